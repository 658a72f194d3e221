"""What the HTML report shows, gathered from a published build (every artifact read
through its manifest, so a file swapped under build/ is refused) into one JSON-able dict.

Lists in the page are columnar (one array a field) and chunks are shared by index: at
10,000 entities the data is a few megabytes, not tens.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from .layout import force_layout

PROFILE_CONTEXTS = 3
PROFILE_EXCERPTS = 2
EXCERPT_CHARS = 320
PROFILE_FACTS = 12
PROFILE_CHUNKS = 25
FINDINGS_SHOWN = 2000

NEEDED = ["entity-graph.json", "entities.parquet", "chunks.parquet",
          "entity_vectors.parquet", "skill-index.json", "semantic_facts.parquet"]


class ReportError(Exception):
    """No usable build to report on; the message says what to do."""


def report_data(config, out: Path, lint: bool = True, with_world_state: bool = True
                ) -> dict[str, Any]:
    """The report's data for the project's published build; links to sources are relative
    to `out`, the report's path."""
    from ..artifacts.reader import ArtifactError, BuildArtifacts

    try:
        build = BuildArtifacts(config.build_dir, NEEDED, config.cache_dir)
        graph = build.json("entity-graph.json")
        profiles = _profiles(build)
        skills = build.json("skill-index.json")["skills"]
        chunks = _chunks(build)
        vectors = build.vectors("entity_vectors.parquet")
        facts = _facts(build)
    except ArtifactError as error:
        raise ReportError(str(error)) from None
    except (KeyError, TypeError, ValueError) as error:
        raise ReportError(f"{config.build_dir}: unreadable build artifacts ({error}); run "
                          "`doit` again") from None
    from ..retrieval.search import graph_problem
    from ..runtime.world import shape_problem

    problem = graph_problem(graph) or shape_problem(skills, graph)
    if problem:
        raise ReportError(f"{config.build_dir}: unusable build artifacts ({problem}); run "
                          "`doit` again")
    import json

    try:
        run_results = json.loads(build.read_extra("run_results.json"))
    except (OSError, ValueError):
        run_results = {}  # (a view of the build, not one of its checked artifacts)
    root_link = Path(os.path.relpath(config.root, out.resolve().parent)).as_posix()
    data: dict[str, Any] = {"kind": "report", "title": f"ctxfst report: {config.root.name}",
                            "source_root": "./" if root_link == "." else root_link + "/"}
    try:  # (the shapes above are checked; a field inside may still be of a wrong type)
        data.update(_graph_view(graph, profiles, chunks, vectors, facts))
        data["world"] = world_model(skills, graph, _start_state(config) if with_world_state
                                    else ([], ""))
        data["build"] = _build_stats(build.manifest, run_results)
    except (AttributeError, KeyError, TypeError, ValueError) as error:
        raise ReportError(f"{config.build_dir}: unusable build artifacts ({error!r}); run "
                          "`doit` again") from None
    data["findings"] = _findings(config) if lint else None
    return data


def _chunks(build) -> dict[str, Any]:
    from ..artifacts.reader import CHUNK_NULLABLE, chunk_columns

    table = build.parquet("chunks.parquet", chunk_columns(), CHUNK_NULLABLE,
                          read_columns=["chunk_id", "source", "line_start", "context"])
    return table.to_pydict()


def _profiles(build) -> dict[str, dict[str, Any]]:
    """Each entity's contexts and excerpts, by its id (entities.parquet: the build has it
    with JSON exports on or off)."""
    import pyarrow as pa

    from ..artifacts.reader import entity_columns

    quoted = ["contexts", "content_excerpts"]
    table = build.parquet("entities.parquet", {**entity_columns(), **{
        name: pa.list_(pa.string()) for name in quoted}}, read_columns=["entity_id", *quoted])
    return {row["entity_id"]: row for row in table.to_pylist()}


def _facts(build) -> dict[str, list[dict[str, Any]]]:
    """Active facts by the id they are about."""
    from ..facts.model import facts_schema
    from ..facts.query import FACTS_FILE, FACTS_NULLABLE

    columns = {field.name: field.type for field in facts_schema()}
    table = build.parquet(FACTS_FILE, columns, FACTS_NULLABLE, read_columns=[
        "entity_id", "fact_namespace", "fact_key", "fact_value_text", "evidence_path",
        "confidence", "is_active"])
    found: dict[str, list[dict[str, Any]]] = {}
    for row in table.to_pylist():
        if row["is_active"]:
            found.setdefault(row["entity_id"], []).append(row)
    return found


def _clip(text: Any, limit: int = EXCERPT_CHARS) -> str:
    text = " ".join(str(text or "").split())
    return text if len(text) <= limit else text[:limit - 1] + "\u2026"


def _graph_view(graph, profiles, chunks, vectors, facts) -> dict[str, Any]:
    nodes = graph["nodes"]
    ids = [node["id"] for node in nodes]
    at = {node_id: number for number, node_id in enumerate(ids)}
    types = sorted({node.get("type") or "entity" for node in nodes})
    edges = [edge for edge in graph["edges"]
             if edge["source"] in at and edge["target"] in at and edge["source"] != edge["target"]]
    relations = sorted({edge["relation"] for edge in edges})
    undirected = set(graph.get("meta", {}).get("undirected_relations", ["SIMILAR"]))

    vector_ids, matrix, _ = vectors
    start = np.full((len(ids), 2), np.nan)
    if len(vector_ids) >= 3 and matrix.shape[1] >= 2:
        rows = [(at[v], number) for number, v in enumerate(vector_ids) if v in at]
        if rows:
            start[[r for r, _ in rows]] = _main_axes(np.asarray(matrix, np.float64)[
                [n for _, n in rows]])
    weights = [(at[e["source"]], at[e["target"]],
                float(e.get("score") or 0.5) if e["relation"] == "SIMILAR" else 1.0)
               for e in edges]
    positions = force_layout(len(ids), weights, start)

    chunk_at = {chunk_id: n for n, chunk_id in enumerate(chunks["chunk_id"])}
    sources = sorted(set(chunks["source"]))
    source_at = {path: n for n, path in enumerate(sources)}
    details = []
    for node in nodes:
        profile = profiles.get(node["id"], {})
        chunk_refs = [chunk_at[c] for c in node.get("chunk_ids", []) if c in chunk_at]
        detail: dict[str, Any] = {
            "contexts": [_clip(c, 240) for c in profile.get("contexts", [])[:PROFILE_CONTEXTS]],
            "excerpts": [_clip(c) for c in profile.get("content_excerpts", [])[:PROFILE_EXCERPTS]],
            "facts": [[f"{f['fact_namespace']}.{f['fact_key']}", _clip(f["fact_value_text"], 160),
                       f["evidence_path"]] for f in facts.get(node["id"], [])[:PROFILE_FACTS]],
            "chunks": chunk_refs[:PROFILE_CHUNKS], "chunk_count": len(chunk_refs)}
        for key in ("preconditions", "postconditions"):
            if node.get(key):
                detail[key] = list(node[key])
        details.append(detail)
    return {
        "types": types, "relations": relations,
        "undirected": sorted(undirected & set(relations)),
        "nodes": {"id": ids, "name": [str(node.get("name") or node["id"]) for node in nodes],
                  "type": [types.index(node.get("type") or "entity") for node in nodes],
                  "aliases": [list(node.get("aliases") or []) for node in nodes],
                  "mentions": [int(node.get("mention_count") or 0) for node in nodes],
                  "x": [x for x, _ in positions], "y": [y for _, y in positions]},
        "edges": {"s": [at[e["source"]] for e in edges], "t": [at[e["target"]] for e in edges],
                  "r": [relations.index(e["relation"]) for e in edges],
                  "w": [None if e.get("score") is None else round(float(e["score"]), 4)
                        for e in edges]},
        "details": details,
        "chunks": {"id": chunks["chunk_id"], "src": [source_at[s] for s in chunks["source"]],
                   "line": chunks["line_start"], "context": [_clip(c, 200) for c in
                                                             chunks["context"]]},
        "sources": sources,
    }


def _main_axes(matrix: np.ndarray) -> np.ndarray:
    """The rows projected on their two main axes (PCA), each axis's sign fixed so that the
    projection does not flip between runs."""
    centred = matrix - matrix.mean(axis=0)
    _, _, axes = np.linalg.svd(centred, full_matrices=False)
    axes = axes[:2]
    signs = np.sign(axes[np.arange(len(axes)), np.abs(axes).argmax(axis=1)])
    projected = centred @ (axes * signs[:, None]).T
    if projected.shape[1] < 2:
        projected = np.hstack([projected, np.zeros((len(projected), 1))])
    return projected


def _start_state(config) -> tuple[list[str], str]:
    """The facts the world-model analysis starts from: the world state's, when there is
    one; else none (then every state no skill produces counts as an input)."""
    from ..runtime.state import StateError, StateStore

    try:
        state = StateStore(config.world_state).load()
    except (StateError, OSError, ValueError):
        return [], ""
    return sorted(state.active_states), str(config.world_state.relative_to(config.root))


def world_model(skills: list[dict[str, Any]], graph: dict[str, Any],
                start: tuple[list[str], str]) -> dict[str, Any]:
    """States, the skills that produce and need them, and what no sequence of skills can
    reach from the start (the planner's relaxed reachability, as `plan` uses it)."""
    from ..runtime.planner import relaxed
    from ..runtime.strips import from_skill_index
    problem = from_skill_index(skills)
    produced: dict[str, list[str]] = {}
    needed: dict[str, list[str]] = {}
    for skill in skills:
        for fact in skill["add_effects"]:
            produced.setdefault(fact, []).append(skill["name"])
        for fact in skill["preconditions"]:
            needed.setdefault(fact, []).append(skill["name"])
    names = {node["id"]: node.get("name") or node["id"] for node in graph.get("nodes", [])}
    state_ids = set(produced) | set(needed) | {
        node["id"] for node in graph.get("nodes", []) if node.get("type") in ("state", "goal")}
    held, start_from = start
    inputs = sorted(state_ids - set(produced)) if not start_from else []
    initial = frozenset(held) if start_from else frozenset(inputs)
    cost, _ = relaxed(problem, initial, None, "max")
    states = []
    for state in sorted(state_ids):
        flags = []
        if state not in produced:
            flags.append("input: no skill produces it" if not start_from
                         else "no skill produces it and the world state does not hold it"
                         if state not in initial else "held: no skill produces it")
        if state not in cost:
            flags.append("unreachable")
        states.append({"id": state, "name": names.get(state, state),
                       "produced_by": sorted(produced.get(state, [])),
                       "needed_by": sorted(needed.get(state, [])),
                       "reachable": state in cost, "flags": flags})
    skill_rows = []
    for skill in sorted(skills, key=lambda s: s["name"]):
        missing = sorted(fact for fact in skill["preconditions"] if fact not in cost)
        skill_rows.append({"name": skill["name"], "node": skill["node_id"],
                           "cost": skill["cost"], "needs": sorted(skill["preconditions"]),
                           "adds": sorted(skill["add_effects"]),
                           "reachable": not missing, "missing": missing})
    return {"start": sorted(initial), "start_from": start_from or "inputs", "states": states,
            "skills": skill_rows,
            "unreachable_states": sum(1 for s in states if not s["reachable"]),
            "unreachable_skills": sum(1 for s in skill_rows if not s["reachable"])}


def _build_stats(manifest: dict[str, Any], run_results: dict[str, Any]) -> dict[str, Any]:
    stages = []
    for stage in run_results.get("stages", []) if isinstance(run_results, dict) else []:
        if not isinstance(stage, dict):
            continue
        counts = {key: value for key, value in sorted(stage.items())
                  if key not in ("stage", "status", "seconds", "outputs", "artifact_rows")
                  and isinstance(value, (int, float, str, bool))}
        stages.append({"stage": str(stage.get("stage", "?")),
                       "status": str(stage.get("status", "?")),
                       "seconds": stage.get("seconds") if isinstance(
                           stage.get("seconds"), (int, float)) else None,
                       "counts": counts})
    artifacts = [{"path": a.get("path"), "stage": a.get("stage"), "bytes": a.get("bytes"),
                  "rows": a.get("rows")} for a in manifest.get("artifacts", [])
                 if isinstance(a, dict)]
    return {"toolchain": manifest.get("toolchain", {}).get("version"),
            "model": manifest.get("model", {}).get("id"),
            "inputs": len(manifest.get("inputs", [])), "stages": stages,
            "artifacts": artifacts, "settings": manifest.get("settings", {})}


def _findings(config) -> dict[str, Any]:
    """Validation and lint findings of the project's sources, as `ctxfst lint` shows them."""
    from ..validation import check_paths

    report = check_paths([], cwd=config.root, lint=True)
    items = [d.to_dict() for d in report.diagnostics]
    counts: dict[str, int] = {}
    for item in items:
        counts[item["code"]] = counts.get(item["code"], 0) + 1
    return {"counts": dict(sorted(counts.items())), "total": len(items),
            "items": items[:FINDINGS_SHOWN], "files": report.files}
