"""The facts-first query path: exists / count / list over build/semantic_facts.parquet.

Answers are three-valued. "yes" comes with the matching facts and their evidence. "no"
is given only when the key is declared complete for the entity type in the settings
([facts] complete) and every source that can hold that entity type was extracted by the
current extractor version; otherwise an empty match is "unknown", and a bounded lexical
search over the same tenant's chunks is offered (capped, and reported as such).
Every query needs a tenant, and sees only that tenant's facts and chunks.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..artifacts.layout import EVIDENCE_FILE, FACTS_FILE, RUNS_FILE
from ..document.facts import canonical_date, canonical_number, tenant_problem
from ..document.text import normalize

OPS = ("exists", "count", "list")
DEFAULT_LIMIT = 20
# Which kind of source can hold facts of an entity type.
SOURCE_KIND = {"document": "document", "chunk": "document", "entity": "document",
               "skill": "skill"}


class FactsError(Exception):
    """A query that cannot be answered: a tenant with no sources, an unknown fact (exit
    1)."""


class FactsUsage(FactsError):
    """Bad arguments (exit 2)."""


class FactsBuildError(FactsUsage):
    """No usable build: missing, stale or damaged artifacts (exit 2, as for every
    command: fix it and run again)."""


# Columns a writer may leave empty; every other one the queries use holds a value.
FACTS_NULLABLE = frozenset({"freshness_at", "invalidated_run_id", "invalidated_build_seq",
                            "invalidation_reason", "evidence.freshness_at"})
RUNS_NULLABLE = frozenset({"failure_reason"})
EVIDENCE_NULLABLE = frozenset({"freshness_at"})
CHUNKS_FILE = "chunks.parquet"
FALLBACK_COLUMNS = ["chunk_id", "source", "context", "content", "tags"]


def _columns(schema) -> dict[str, Any]:
    return {field.name: field.type for field in schema}


def _build_stamp(meta: dict[bytes, bytes]) -> tuple[int, str]:
    """(build_seq, extract_version) from the facts table's metadata; ValueError if bad."""
    try:
        seq = int(meta.get(b"ctxfst.build_seq", b"0").decode("ascii"))
        version = meta.get(b"ctxfst.extract_version", b"").decode("utf-8")
    except (ValueError, UnicodeDecodeError):
        raise ValueError("its build_seq or extract_version metadata is not valid") from None
    if seq < 0:
        raise ValueError("its build_seq metadata is negative")
    return seq, version


def check_tenant(tenant: str | None) -> str:
    if tenant is None or tenant == "":
        raise FactsUsage("a tenant is required (--tenant T): facts are answered per tenant "
                         "and never across tenants")
    problem = tenant_problem(tenant)
    if problem is not None:
        raise FactsUsage(f"--tenant {problem}")
    return tenant


@dataclass
class Store:
    """The facts artifacts of one build, loaded and checked."""

    build_dir: Path
    facts: list[dict[str, Any]]
    runs: list[dict[str, Any]]
    build_seq: int
    extract_version: str
    artifacts: Any = None  # the BuildArtifacts they were read through
    fact_groups: list[int] = field(default_factory=list)  # the facts file's groups' firsts
    # chunks() tables, once read: a server keeps one Store a build, and the build folder
    # may hold a newer build by the time a fallback asks
    _chunk_tables: dict[tuple[str, ...], Any] = field(default_factory=dict, repr=False)

    @classmethod
    def load(cls, build_dir: Path, project=None) -> Store:
        """The facts artifacts, checked against the build's manifest and for the columns
        the queries use; with `project` (a Config), also against its sources."""
        from ..artifacts.reader import ArtifactError, BuildArtifacts
        from .model import facts_schema, runs_schema

        try:
            build = BuildArtifacts(build_dir, [FACTS_FILE, EVIDENCE_FILE, RUNS_FILE],
                                   project.cache_dir if project is not None else None)
        except ArtifactError as error:
            raise FactsBuildError(str(error)) from None
        if project is not None:
            from ..freshness import changed_inputs, stale_message

            changed = changed_inputs(project, build.manifest)
            if changed:
                raise FactsBuildError(stale_message(changed))
        try:
            facts_file = build.parquet_file(FACTS_FILE, _columns(facts_schema()),
                                            FACTS_NULLABLE)
            table = facts_file.read()
            runs = build.parquet(RUNS_FILE, _columns(runs_schema()), RUNS_NULLABLE)
            seq, version = _build_stamp(table.schema.metadata or {})
        except ArtifactError as error:
            raise FactsBuildError(str(error)) from None
        except ValueError as error:
            raise FactsBuildError(f"{build.path(FACTS_FILE)}: {error}: run `doit clean` "
                                  "and `doit`") from None
        return cls(build_dir, table.to_pylist(), runs.to_pylist(), seq, version, build,
                   facts_file.group_starts)

    def evidence(self, row: int) -> list[dict[str, Any]]:
        """All the evidence of the fact in this row of the facts: from the evidence file's
        row group that pairs with the fact's own."""
        from ..artifacts.reader import ArtifactError
        from .model import evidence_schema

        fact = self.facts[row]
        group = bisect.bisect_right(self.fact_groups, row) - 1
        try:
            file = self.artifacts.parquet_file(EVIDENCE_FILE, _columns(evidence_schema()),
                                               EVIDENCE_NULLABLE)
            entries = [entry for entry in file.read_row_group(group).to_pylist()
                       if entry.pop("fact_id") == fact["fact_id"]] \
                if file.file.num_row_groups == len(self.fact_groups) - 1 else []
        except ArtifactError as error:
            raise FactsBuildError(str(error)) from None
        if len(entries) != fact["evidence_count"]:
            raise FactsBuildError(f"{self.artifacts.path(EVIDENCE_FILE)}: not the evidence "
                                  f"of {fact['fact_id']}: run `doit clean` and `doit`")
        return entries

    def sources(self, tenant: str) -> dict[str, dict[str, Any]]:
        """The tenant's current sources: path -> latest run (deleted ones left out)."""
        latest: dict[str, dict[str, Any]] = {}
        for run in self.runs:
            latest[run["source_path"]] = run
        return {path: run for path, run in latest.items()
                if run["tenant_id"] == tenant and not run["source_deleted"]}

    def chunks(self, columns: list[str]):
        """These columns of chunks.parquet (checked like every artifact: every build has
        one, so a missing or damaged one is an error, not an empty fallback)."""
        from ..artifacts.reader import CHUNK_NULLABLE, ArtifactError, BuildArtifacts, chunk_columns

        key = tuple(columns)
        if key not in self._chunk_tables:
            try:
                build = self.artifacts or BuildArtifacts(self.build_dir, [CHUNKS_FILE])
                kinds = chunk_columns()
                self._chunk_tables[key] = build.parquet(
                    CHUNKS_FILE, {c: kinds[c] for c in columns}, CHUNK_NULLABLE,
                    read_columns=columns)
            except ArtifactError as error:
                raise FactsBuildError(str(error)) from None
        return self._chunk_tables[key]

    def tenant_facts(self, tenant: str, active_only: bool = True) -> list[dict[str, Any]]:
        return [f for f in self.facts if f["tenant_id"] == tenant
                and (f["is_active"] or not active_only)]


def value_forms(value: str, alias: dict[str, str]) -> set[str]:
    """Every normalised form a query value can take, one per value type."""
    forms = {normalize(value), value.strip().casefold()}
    forms.add(alias.get(normalize(value), normalize(value)))
    for convert in (canonical_number, canonical_date, _canonical_json):
        try:
            forms.add(convert(value))
        except ValueError:
            pass
    return {f for f in forms if f}


def _canonical_json(value: str) -> str:
    import json

    try:
        return json.dumps(json.loads(value), ensure_ascii=False, sort_keys=True,
                          separators=(",", ":"), allow_nan=False)
    except (ValueError, TypeError):
        raise ValueError("not JSON") from None


def _alias_table(facts: list[dict[str, Any]]) -> dict[str, str]:
    table: dict[str, str] = {}
    for fact in sorted(facts, key=lambda f: f["entity_id"]):
        if fact["entity_type"] == "entity" and fact["fact_namespace"] == "alias":
            table.setdefault(fact["fact_value_norm"], fact["entity_id"])
    return table


def _public(fact: dict[str, Any], evidence_limit: int | None = 3) -> dict[str, Any]:
    evidence = fact["evidence"] if evidence_limit is None else fact["evidence"][:evidence_limit]
    return {"fact_id": fact["fact_id"], "entity_type": fact["entity_type"],
            "entity_id": fact["entity_id"], "namespace": fact["fact_namespace"],
            "key": fact["fact_key"], "value": fact["fact_value_text"],
            "value_norm": fact["fact_value_norm"], "value_type": fact["value_type"],
            "confidence": fact["confidence"], "freshness_at": fact["freshness_at"],
            "is_active": fact["is_active"], "evidence_count": fact["evidence_count"],
            "evidence": [{"path": e["path"], "start": e["start"], "end": e["end"],
                          "excerpt": e["excerpt"], "source_type": e["source_type"],
                          "source_id": e["source_id"], "extractor": e["extractor"],
                          "confidence": e["confidence"]} for e in evidence]}


def _matches(fact: dict[str, Any], entity_type, namespace, key, forms) -> bool:
    return ((entity_type is None or fact["entity_type"] == entity_type)
            and (namespace is None or fact["fact_namespace"] == namespace)
            and (key is None or fact["fact_key"] == key)
            and (forms is None or fact["fact_value_norm"] in forms))


def completeness(store: Store, settings, tenant: str, entity_type: str | None,
                 namespace: str | None, key: str | None, current_version: str) -> dict:
    """Whether an empty answer may be "no", and why not when it may not."""
    declared = bool(entity_type and namespace and key and
                    f"{namespace}/{key}" in settings.complete_keys(entity_type))
    kind = SOURCE_KIND.get(entity_type or "")
    # Entity types of plugin extractors may come from any source: then all must be current.
    sources = {p: r for p, r in store.sources(tenant).items()
               if kind is None or r["entity_type"] == kind}
    behind = sorted(p for p, r in sources.items()
                    if r["status"] != "completed" or r["extract_version"] != current_version)
    reasons = []
    if not declared:
        reasons.append(f"{namespace or '*'}/{key or '*'} is not declared complete for "
                       f"{entity_type or 'every entity type'} ([facts] complete)"
                       if entity_type and namespace and key else
                       "a \"no\" needs --entity-type, --namespace and --key of a key declared "
                       "complete ([facts] complete)")
    if behind:
        reasons.append(f"{len(behind)} source(s) not extracted by the current extractor "
                       f"version {current_version} (e.g. {behind[0]})")
    return {"declared": declared, "extract_version": current_version,
            "sources_behind": behind[:10], "complete": declared and not behind,
            "why_not": reasons}


def ask(store: Store, settings, tenant: str | None, op: str, entity_type: str | None = None,
        namespace: str | None = None, key: str | None = None, value: str | None = None,
        min_confidence: float = 0.0, limit: int = DEFAULT_LIMIT,
        current_version: str | None = None) -> dict[str, Any]:
    tenant = check_tenant(tenant)
    if op not in OPS:
        raise FactsUsage(f"--op must be one of {', '.join(OPS)}")
    if not (isinstance(min_confidence, (int, float)) and math.isfinite(min_confidence)
            and 0.0 <= min_confidence <= 1.0):
        raise FactsUsage("--min-confidence must be a number from 0 to 1")
    if value is not None and not value.strip():
        raise FactsUsage("--value must not be empty")
    if not store.sources(tenant):
        raise FactsError(f"tenant {tenant!r} has no sources in this build (nothing to "
                         "answer from; tenants never see each other's facts)")
    facts = store.tenant_facts(tenant)
    forms = value_forms(value, _alias_table(facts)) if value is not None else None
    candidates = [f for f in facts if _matches(f, entity_type, namespace, key, forms)]
    matched = [f for f in candidates if f["confidence"] >= min_confidence]
    below = len(candidates) - len(matched)
    matched.sort(key=lambda f: (-f["confidence"], f["entity_type"], f["entity_id"],
                                f["fact_value_norm"]))
    entities = sorted({(f["entity_type"], f["entity_id"]) for f in matched})
    complete = completeness(store, settings, tenant, entity_type, namespace, key,
                            current_version or store.extract_version)
    result: dict[str, Any] = {
        "tenant": tenant, "op": op,
        "filters": {"entity_type": entity_type, "namespace": namespace, "key": key,
                    "value": value, "value_forms": sorted(forms) if forms else None},
        "min_confidence": min_confidence, "build_seq": store.build_seq,
        "answer": "unknown", "count": len(entities), "count_exact": False,
        "facts_matched": len(matched), "below_threshold": below,
        "completeness": complete, "facts": [], "entities": [],
        "fallback": {"used": False}, "truncated": False,
    }
    if matched:
        result["answer"] = "yes"
        result["count_exact"] = complete["complete"]
        result["reason"] = (f"{len(matched)} fact(s) about {len(entities)} "
                            f"{'entity' if len(entities) == 1 else 'entities'} with confidence "
                            f">= {min_confidence}" + ("" if complete["complete"] else
                                                      "; the count is a lower bound"))
        shown = matched if op == "list" else matched[:min(limit, 5)]
        result["facts"] = [_public(f) for f in shown[:limit]]
        result["entities"] = [{"entity_type": t, "entity_id": i} for t, i in entities[:limit]]
        result["truncated"] = len(matched) > len(result["facts"])
        return result
    if complete["complete"] and not below:
        result["answer"] = "no"
        result["count_exact"] = True
        result["reason"] = (f"{namespace}/{key} is declared complete for {entity_type} and "
                            f"every {SOURCE_KIND.get(entity_type, 'source')} of tenant {tenant} "
                            "was extracted "
                            f"by {complete['extract_version']}; no fact matches")
        return result
    why = list(complete["why_not"])
    if below:
        why.insert(0, f"{below} matching fact(s) are below the confidence threshold "
                   f"{min_confidence}")
    result["reason"] = "no fact matches, and an empty answer cannot be \"no\": " + "; ".join(why)
    text = value or key or ""
    if text:
        result["fallback"] = lexical_fallback(store, tenant, text,
                                              settings.facts_fallback_limit,
                                              settings.facts_fallback_scan)
    return result


def lexical_fallback(store: Store, tenant: str, text: str, limit: int,
                     scan_cap: int) -> dict[str, Any]:
    """BM25 over at most scan_cap of the tenant's chunks; at most limit hits."""
    from ..document.text import tokens
    from ..retrieval.lexical import BM25, lexical_text, top_rows

    sources = set(store.sources(tenant))
    report: dict[str, Any] = {"used": True, "method": "bm25 over chunk context, content "
                              "and tags (not facts: read the hits yourself)",
                              "query": text, "scan_cap": scan_cap, "limit": limit,
                              "scanned": 0, "truncated": False, "hits": []}
    if limit == 0 or scan_cap == 0:
        return report
    import pyarrow as pa
    import pyarrow.compute as pc

    table = store.chunks(FALLBACK_COLUMNS)
    # This tenant's chunks only, and no more than the cap become Python objects.
    mine = table.filter(pc.is_in(table.column("source"),
                                 value_set=pa.array(sorted(sources), pa.string())))
    report["truncated"] = mine.num_rows > scan_cap
    rows = mine.slice(0, scan_cap).to_pylist()
    report["scanned"] = len(rows)
    query = set(tokens(text))
    if not rows or not query:
        return report
    scores = BM25.build([tokens(lexical_text(r)) for r in rows]).scores(list(query))
    for row in top_rows(scores, limit):  # rows keep chunks.parquet's id order: ties by id
        if scores[row] <= 0:
            break
        chunk = rows[row]
        report["hits"].append({"chunk_id": chunk["chunk_id"], "source": chunk["source"],
                               "score": round(float(scores[row]), 4),
                               "context": chunk["context"] or "",
                               "excerpt": _snippet(chunk["content"] or "", query)})
    return report


def _snippet(content: str, query: set[str], width: int = 160) -> str:
    lowered = content.casefold()
    where = min((lowered.find(t) for t in query if lowered.find(t) >= 0), default=0)
    start = max(0, where - width // 4)
    piece = " ".join(content[start:start + width].split())
    return ("…" if start else "") + piece + ("…" if start + width < len(content) else "")


def show(store: Store, tenant: str | None, fact_id: str) -> dict[str, Any]:
    tenant = check_tenant(tenant)
    for row, fact in enumerate(store.facts):
        if fact["fact_id"] == fact_id and fact["tenant_id"] == tenant:
            data = _public({**fact, "evidence": store.evidence(row)}, evidence_limit=None)
            data.update({key: fact[key] for key in (
                "tenant_id", "extract_version", "created_run_id", "created_build_seq",
                "updated_build_seq", "invalidated_run_id", "invalidated_build_seq",
                "invalidation_reason")})
            return data
    raise FactsError(f"no fact {fact_id} in tenant {tenant!r}")


def list_facts(store: Store, tenant: str | None, entity_type=None, namespace=None, key=None,
               value=None, include_inactive: bool = False,
               limit: int = 100) -> dict[str, Any]:
    tenant = check_tenant(tenant)
    if not store.sources(tenant):
        raise FactsError(f"tenant {tenant!r} has no sources in this build")
    facts = store.tenant_facts(tenant, active_only=not include_inactive)
    forms = value_forms(value, _alias_table(facts)) if value is not None else None
    matched = [f for f in facts if _matches(f, entity_type, namespace, key, forms)]
    return {"tenant": tenant, "build_seq": store.build_seq, "total": len(matched),
            "facts": [_public(f, evidence_limit=1) for f in matched[:limit]],
            "truncated": len(matched) > limit}

