"""Hole 8 and damaged artifacts: readers (query, eval, export, facts) check every build
artifact they open against manifest.json, then its shape, and refuse clearly."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ctxfst.build.runner import run_build

from .conftest import copy_example, reseal, write

QUERY = ("query", "Hono on Cloudflare Workers", "--bridge-model", "none")
FACTS_ASK = ("facts", "ask", "--tenant", "default", "--op", "exists", "--key", "topic",
             "--value", "no such topic at all")  # unknown: the lexical fallback reads chunks
READS = {  # what each reader opens besides manifest.json
    "query": ["chunks.parquet", "chunk_vectors.parquet", "entity_vectors.parquet",
              "entities.parquet", "entity-graph.json"],
    "facts": ["semantic_facts.parquet", "semantic_fact_extraction_runs.parquet",
              "chunks.parquet"],
}


@pytest.fixture
def built(tmp_path, capsys):
    root = copy_example(tmp_path / "kb")
    assert run_build(root, []) == 0
    capsys.readouterr()
    return root


def assert_clear(result, *names: str) -> None:
    assert result.code == 1, (result.code, result.err)
    assert "internal error" not in result.err and "Traceback" not in result.err, result.err
    assert "run `doit" in result.err, result.err
    for name in names:
        assert name in result.err, (name, result.err)


def queries_file(root: Path) -> Path:
    return write(root, "queries.yaml", yaml.safe_dump({"queries": [
        {"id": "edge", "query": "edge framework for Workers",
         "expected_entities": ["entity:hono"]}]}))


def test_readers_refuse_artifacts_that_do_not_match_the_manifest(built, cli):
    build = built / "build"
    pristine = {p.name: p.read_bytes() for p in build.iterdir() if p.is_file()}
    # The case: chunk vectors copied over the entity vectors still answered.
    shutil.copy(build / "chunk_vectors.parquet", build / "entity_vectors.parquet")
    for args in (QUERY, ("eval", queries_file(built)),
                 ("export", "lancedb", "--db", built / "db")):
        result = cli(*args, cwd=built)
        assert_clear(result, "entity_vectors.parquet", "does not match the build's manifest")
    assert not (built / "db").exists()  # nothing exported from a swapped build
    (build / "entity_vectors.parquet").write_bytes(pristine["entity_vectors.parquet"])
    assert cli(*QUERY, cwd=built).code == 0
    # Same size, other bytes (a build cut short, a bit flipped): the hash says so.
    for name in ("chunks.parquet", "semantic_facts.parquet"):
        data = bytearray(pristine[name])
        data[len(data) // 2] ^= 0xFF
        (build / name).write_bytes(bytes(data))
        command = QUERY if name == "chunks.parquet" else FACTS_ASK
        assert_clear(cli(*command, cwd=built), name, "sha256")
        (build / name).write_bytes(pristine[name])
    # A manifest that does not list what a reader opens.
    manifest = json.loads(pristine["manifest.json"])
    manifest["artifacts"] = [a for a in manifest["artifacts"] if a["path"] != "chunks.parquet"]
    (build / "manifest.json").write_text(json.dumps(manifest))
    for command in (QUERY, FACTS_ASK):
        assert_clear(cli(*command, cwd=built), "chunks.parquet", "not in the build's manifest")


def test_truncated_empty_or_garbage_artifacts_are_clear_errors(built, cli):
    build = built / "build"
    pristine = {p.name: p.read_bytes() for p in build.iterdir() if p.is_file()}
    damages = {"truncated": lambda data: data[: len(data) // 2], "empty": lambda data: b"",
               "garbage": lambda data: b"\x00\xffPAR1 not what it says" * 7}
    failures = []
    for command, args in (("query", QUERY), ("facts", FACTS_ASK)):
        for name in [*READS[command], "manifest.json"]:
            for how, damage in damages.items():
                (build / name).write_bytes(damage(pristine[name]))
                result = cli(*args, cwd=built)
                (build / name).write_bytes(pristine[name])
                if result.code != 1 or "internal error" in result.err or \
                        name not in result.err or "run `doit" not in result.err:
                    failures.append((command, name, how, result.code, result.err.strip()))
    assert not failures, failures
    assert cli(*QUERY, cwd=built).code == 0 and cli(*FACTS_ASK, cwd=built).code == 0


def _parquet_with(path: Path, **columns) -> None:
    """The Parquet file at path with some columns replaced (or added) as given."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    for name, values in columns.items():
        array = pa.array(values) if not isinstance(values, pa.Array) else values
        if name in table.column_names:
            table = table.set_column(table.column_names.index(name), name, array)
        else:
            table = table.append_column(name, array)
    pq.write_table(table, path)


def test_a_hostile_build_whose_manifest_matches_is_still_a_clear_error(built, cli):
    """Garbage that the manifest vouches for (someone wrote both): readers check what
    they parse, too."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    build = built / "build"
    pristine = {p.name: p.read_bytes() for p in build.iterdir() if p.is_file()}
    chunks = pq.read_table(build / "chunks.parquet").num_rows
    facts = pq.read_table(build / "semantic_facts.parquet")
    deep = b"[" * 100_000 + b"]" * 100_000  # deeper than Python's stack
    cases = [  # (command, artifact, how to damage it, what the error names)
        (QUERY, "chunks.parquet", lambda p: p.write_bytes(b"garbage, not Parquet"), "Parquet"),
        (QUERY, "chunks.parquet", lambda p: _parquet_with(p, chunk_id=list(range(chunks))),
         "chunk_id"),
        (QUERY, "chunks.parquet", lambda p: _parquet_with(
            p, entities=[None] * chunks), "entities"),
        (FACTS_ASK, "chunks.parquet", lambda p: p.write_bytes(pristine["chunk_vectors.parquet"]),
         "no column"),
        (QUERY, "entities.parquet", lambda p: pq.write_table(pa.table({"x": [1]}), p),
         "entity_id"),
        (QUERY, "entity-graph.json", lambda p: p.write_bytes(deep), "entity-graph.json"),
        (QUERY, "entity-graph.json", lambda p: p.write_text('{"nodes": [{"id": 5}], '
                                                            '"edges": []}'), "node #1"),
        (QUERY, "entity-graph.json", lambda p: p.write_text(
            '{"nodes": [], "edges": [{"source": "a", "target": "b", "relation": "SIMILAR", '
            '"score": "high"}]}'), "score"),
        (QUERY, "entity_vectors.parquet", lambda p: _parquet_with(p, id=[1] * pq.read_table(
            p).num_rows), "entity_vectors.parquet"),
        (QUERY, "chunk_vectors.parquet", lambda p: pq.write_table(pa.table({
            "id": pq.read_table(p).column("id"),
            "vector": pa.FixedSizeListArray.from_arrays(pa.array([0.5] * 3 * chunks,
                                                                 pa.float32()), 3)
        }).replace_schema_metadata({**pq.read_table(p).schema.metadata,
                                    b"ctxfst.dim": b"3"}), p), "dimensions"),
        (FACTS_ASK, "semantic_facts.parquet", lambda p: _parquet_with(
            p, confidence=pa.array([None] * facts.num_rows, pa.float64())), "confidence"),
        (FACTS_ASK, "semantic_facts.parquet", lambda p: pq.write_table(
            facts.replace_schema_metadata({**facts.schema.metadata,
                                           b"ctxfst.build_seq": b"many"}), p), "build_seq"),
        (FACTS_ASK, "semantic_fact_extraction_runs.parquet", lambda p: pq.write_table(
            pa.table({"run_id": ["r"]}), p), "no column"),
    ]
    failures = []
    for args, name, damage, expected in cases:
        damage(build / name)
        reseal(build, name)
        result = cli(*args, cwd=built)
        for restore in (name, "manifest.json"):
            (build / restore).write_bytes(pristine[restore])
        if result.code != 1 or "internal error" in result.err or name not in result.err \
                or expected not in result.err:
            failures.append((args[0], name, expected, result.code, result.err.strip()[-300:]))
    # The manifest itself: nested past the stack, or with fields of the wrong types.
    manifest = json.loads(pristine["manifest.json"])
    for bad in (deep, json.dumps({**manifest, "inputs": [5]}).encode(),
                json.dumps({**manifest, "artifacts": [
                    {**a, "bytes": str(a["bytes"])} for a in manifest["artifacts"]]}).encode(),
                json.dumps({**manifest, "artifacts": [
                    {**a, "path": "../" + a["path"]} for a in manifest["artifacts"]]}).encode()):
        (build / "manifest.json").write_bytes(bad)
        for args in (QUERY, FACTS_ASK, ("query", "Hono", "--allow-stale")):
            result = cli(*args, cwd=built)
            if result.code != 1 or "internal error" in result.err or \
                    "manifest.json" not in result.err:
                failures.append((args[0], "manifest.json", bad[:40], result.code,
                                 result.err.strip()))
    assert not failures, failures


def test_artifacts_are_never_read_through_links_out_of_the_build(built, cli, tmp_path):
    """A link in build/ (to a copy outside the project, so the manifest matches) is not
    followed: readers never read outside the project root."""
    outside = tmp_path / "outside"
    outside.mkdir()
    for name in ("chunks.parquet", "semantic_facts.parquet"):
        target = outside / name
        shutil.move(built / "build" / name, target)
        (built / "build" / name).symlink_to(target)
        command = QUERY if name == "chunks.parquet" else FACTS_ASK
        assert_clear(cli(*command, cwd=built), name, "link")
        (built / "build" / name).unlink()
        shutil.move(target, built / "build" / name)
    assert cli(*QUERY, cwd=built).code == 0


def test_a_verified_build_is_not_hashed_again(built, cli, monkeypatch):
    """Queries stay fast: a file's sha256 is remembered by its size, mtime, inode and
    ctime; only a changed file is hashed again. A cache that cannot be written, or that
    holds junk, only costs a hash."""
    build = built / "build"
    sizes = {p.stat().st_size: p.name for p in build.iterdir() if p.is_file()}
    hashed: list[str] = []
    real = hashlib.sha256

    def counting(data=b"", **kwargs):
        if len(data) in sizes:
            hashed.append(sizes[len(data)])
        return real(data, **kwargs)

    monkeypatch.setattr(hashlib, "sha256", counting)
    assert cli(*QUERY, cwd=built).code == 0
    assert set(READS["query"]) <= set(hashed)  # verified the first time ...
    remembered = json.loads((built / ".ctxfst/cache/artifacts.json").read_text())
    assert {Path(key).name for key in remembered} >= set(READS["query"])
    hashed.clear()
    first = cli(*QUERY, "--format", "json", cwd=built)
    assert first.code == 0 and hashed == []  # ... and not again
    os.utime(build / "entity-graph.json")  # touched, same bytes: hashed again, accepted
    assert cli(*QUERY, cwd=built).code == 0 and hashed == ["entity-graph.json"]
    # A damaged cache file is a miss, never an error; an unwritable one is skipped.
    for junk in ('{"x": 5}', "[1, 2]", "[" * 100_000, json.dumps(
            {key: ["a", 1, 2, 3, "f" * 64] for key in remembered})):
        (built / ".ctxfst/cache/artifacts.json").write_text(junk)
        (built / ".ctxfst/cache/freshness.json").write_text(junk)
        hashed.clear()
        again = cli(*QUERY, "--format", "json", cwd=built)
        assert again.code == 0 and again.out == first.out, again.err
        assert set(READS["query"]) <= set(hashed)

    from ctxfst.build import io

    def unwritable(path, data):
        raise PermissionError(13, "read-only", str(path))

    monkeypatch.setattr(io, "write_atomic", unwritable)
    (built / ".ctxfst/cache/artifacts.json").unlink()
    assert cli(*QUERY, "--format", "json", cwd=built).out == first.out
    assert not (built / ".ctxfst/cache/artifacts.json").exists()


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_a_fifo_in_the_caches_or_the_build_never_hangs_a_reader(built):
    """Reading a FIFO blocks until someone writes to it: a reader opens files without
    blocking and refuses what is not a regular file (a real process, so a hang on the
    old code is a failed test rather than a stuck run)."""
    freshness = built / ".ctxfst/cache/freshness.json"
    freshness.unlink(missing_ok=True)
    os.mkfifo(freshness)
    try:
        done = subprocess.run([sys.executable, "-m", "ctxfst", *QUERY], cwd=built,
                              capture_output=True, text=True, timeout=120, check=False)
    except subprocess.TimeoutExpired:
        pytest.fail("a FIFO as .ctxfst/cache/freshness.json hung the query")
    assert done.returncode == 0, done.stderr
    freshness.unlink()
    graph = built / "build" / "entity-graph.json"
    graph.unlink()
    os.mkfifo(graph)
    done = subprocess.run([sys.executable, "-m", "ctxfst", *QUERY], cwd=built,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 1 and "entity-graph.json" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_eval_queries_and_skill_graphs_of_the_wrong_shape_are_clear_errors(built, cli):
    """The other files the retrieval commands read: a queries file (shipped with a KB) and
    the project's hand-made skill graph."""
    failures = []
    for queries, code in (({"queries": [{"query": "Hono", "expected_chunks": 5}]}, 1),
                          ({"queries": [{"query": "Hono", "expected_entities": [{"a": 1}]}]}, 1),
                          ({"queries": [{"query": "Hono", "id": ["x"]}]}, 1),
                          ("[" * 100_000, 2)):
        path = write(built, "queries.yaml", queries if isinstance(queries, str)
                     else yaml.safe_dump(queries))
        result = cli("eval", path, cwd=built)
        if result.code != code or "internal error" in result.err:
            failures.append((queries if code == 1 else "deep", result.code, result.err))
    for graph in ("[" * 100_000, '{"nodes": 5}'):
        write(built, "skill-graph.json", graph)
        result = cli("query", "Hono", "--mode", "keyword-graph", cwd=built)
        if result.code != 1 or "internal error" in result.err or \
                "skill-graph.json" not in result.err:
            failures.append((graph[:10], result.code, result.err))
    assert not failures, failures


def test_the_runtime_reads_only_the_skill_index_and_graph_the_manifest_names(built, cli):
    """plan, select, state and run read build/skill-index.json and entity-graph.json:
    an edited one (a skill removed, still well formed) is refused, naming the file."""
    goal, seed = "goal:edge-api-learning-plan", "state:has-resume"
    assert cli("state", "init", "--goal", goal, "--seed", seed, cwd=built).code == 0
    index_path = built / "build" / "skill-index.json"
    pristine = index_path.read_bytes()
    index = json.loads(pristine)
    index["skills"] = index["skills"][1:]
    index_path.write_text(json.dumps(index))
    for args in (("plan",), ("select",), ("state", "subgraph")):
        result = cli(*args, cwd=built)
        assert result.code == 2 and "internal error" not in result.err, (args, result.err)
        assert "skill-index.json does not match the build's manifest" in result.err
    index_path.write_bytes(pristine)
    assert cli("plan", cwd=built).code == 0
