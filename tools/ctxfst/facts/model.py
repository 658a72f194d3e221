"""Fact records: ids, evidence, and the Arrow schemas of the facts artifacts.

A fact is (tenant, entity_type, entity_id, namespace, key, normalised value); its id is a
hash of exactly that tuple encoded as a JSON array, so equal facts from any source or
build share one row, and each source that supports it adds an evidence entry.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from json.encoder import encode_basestring
from operator import itemgetter
from typing import Any, NamedTuple

FACTS_SCHEMA_VERSION = "2.0.0"  # 2.0.0: rows keep bounded evidence, the rest in its file
ENTITY_TYPES = ("document", "chunk", "entity", "skill")
TRIGGERS = ("create", "update", "backfill", "manual_retry")
STATUSES = ("queued", "running", "completed", "failed")


def fact_id(tenant: str, entity_type: str, entity_id: str, namespace: str, key: str,
            value_norm: str) -> str:
    """sha256 of the JSON array of the six parts (unambiguous: no separator can collide)."""
    parts = (tenant, entity_type, entity_id, namespace, key, value_norm)
    try:  # exactly json.dumps(list(parts), ensure_ascii=False, separators=(",", ":")),
        # built from json's own string encoder: 4x faster on a few hundred thousand facts
        encoded = "[" + ",".join(map(encode_basestring, parts)) + "]"
    except TypeError:  # a part that is no str (a plugin's): json.dumps says how it encodes
        encoded = json.dumps(list(parts), ensure_ascii=False, separators=(",", ":"))
    return "fact:" + hashlib.sha256(encoded.encode("utf-8")).hexdigest()[:32]


class Evidence(NamedTuple):
    """Where a fact was read: a span of a source file's text (LF line endings, no BOM).

    text[start:end] == excerpt, checked when the fact is extracted. (A named tuple, not a
    frozen dataclass: a full build makes a few hundred thousand, 6x faster.)
    """

    source_type: str      # document | chunk | entity | skill: the record the span is in
    source_id: str        # that record's id (a document's id is its path)
    path: str             # the project-relative file the offsets index into
    start: int
    end: int
    excerpt: str
    extractor: str        # the rule, e.g. derived.mention
    extract_version: str  # the rule's version
    confidence: float
    freshness_at: str | None
    source_path: str = ""  # the input whose extraction produced it (set by the store)
    run_id: str = ""
    value_text: str = ""   # the value as this source wrote it

    def sort_key(self) -> tuple:
        return (-self.confidence, self.source_path, self.path, self.start, self.end,
                self.extractor)

    def without_run_id(self) -> tuple:
        """Its fields but the run id, as a plain tuple: a span read again by a later run
        is the same evidence."""
        return self[:_RUN_ID] + self[_RUN_ID + 1:]


_RUN_ID = Evidence._fields.index("run_id")
_FIELDS = Evidence._fields
# A fact's row keeps its first this many evidence entries, and every declared one; all of
# them are in the evidence file (an entity's type cites every document declaring it).
EVIDENCE_KEPT = 8
DECLARED = "declared"  # the extractor of the facts a document declares
# sort_key's order, as two stable sorts by keys taken in C (an entity's facts hold an
# entry for every document declaring it: sort_key's tuples were most of sorting them)
_AFTER_CONFIDENCE = itemgetter(*(_FIELDS.index(name) for name in (
    "source_path", "path", "start", "end", "extractor")))
_CONFIDENCE = itemgetter(_FIELDS.index("confidence"))
# Evidence.sort_key as Arrow sort keys (ties: the order the entries were made)
EVIDENCE_ORDER = (("confidence", "descending"), ("source_path", "ascending"),
                  ("path", "ascending"), ("start", "ascending"), ("end", "ascending"),
                  ("extractor", "ascending"))


def sorted_evidence(evidence) -> list[Evidence]:
    """The evidence in Evidence.sort_key's order (equal keys keep their order)."""
    ordered = sorted(evidence, key=_AFTER_CONFIDENCE)
    ordered.sort(key=_CONFIDENCE, reverse=True)  # (reverse keeps a sort stable)
    return ordered


def kept_evidence(ordered: list[Evidence]) -> list[Evidence]:
    """What a fact's row keeps of its evidence (in sort_key order): the first
    EVIDENCE_KEPT entries and every declared one."""
    if len(ordered) <= EVIDENCE_KEPT:
        return ordered
    return ordered[:EVIDENCE_KEPT] + [e for e in ordered[EVIDENCE_KEPT:]
                                      if e.extractor == DECLARED]


def kept_rows(rank, extractors):
    """kept_evidence's rule over arrays: which entries a row keeps, from each one's rank
    in its fact's sort_key order (a numpy array) and its extractor (an Arrow array)."""
    import pyarrow.compute as pc

    return (rank < EVIDENCE_KEPT) | pc.equal(extractors, DECLARED).to_numpy(
        zero_copy_only=False)


def bounded_lists(entries, bounds):
    """The evidence lists fact rows keep (kept_rows' entries of each): `entries` is an
    Arrow struct array of the facts' evidence, each fact's in sort_key order, and fact
    i's entries are bounds[i] - bounds[0] .. bounds[i + 1] - bounds[0] (a numpy array)."""
    import numpy as np
    import pyarrow as pa

    sizes = np.diff(bounds)
    rank = np.arange(len(entries)) - np.repeat(bounds[:-1] - bounds[0], sizes)
    kept = kept_rows(rank, entries.field("extractor"))
    offsets = np.concatenate([[0], np.cumsum(kept)])[bounds - bounds[0]]
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()),
                                    entries.filter(pa.array(kept)))


class Candidate(NamedTuple):
    """A fact as one extractor sees it in one source, with its evidence."""

    tenant_id: str
    entity_type: str
    entity_id: str
    namespace: str
    key: str
    value_text: str
    value_norm: str
    value_type: str
    evidence: Evidence

    @property
    def fact_id(self) -> str:
        return fact_id(self.tenant_id, self.entity_type, self.entity_id, self.namespace,
                       self.key, self.value_norm)


@dataclass
class Fact:
    """One row of semantic_facts.parquet. `evidence` holds its evidence entries, or the
    first of them in sort_key order: `hidden` more sort after those, and the latest of
    their dates is `hidden_latest` (the merge leaves them in the evidence file)."""

    fact_id: str
    tenant_id: str
    entity_type: str
    entity_id: str
    namespace: str
    key: str
    value_norm: str
    value_type: str
    evidence: list[Evidence] = field(default_factory=list)
    is_active: bool = True
    created_run_id: str = ""
    created_build_seq: int = 0
    updated_build_seq: int = 0
    invalidated_run_id: str | None = None
    invalidated_build_seq: int | None = None
    invalidation_reason: str | None = None
    hidden: int = 0
    hidden_latest: str | None = None

    def primary(self) -> Evidence:
        return min(self.evidence, key=Evidence.sort_key)

    def as_row(self) -> dict[str, Any]:
        ordered = sorted_evidence(self.evidence)
        first = ordered[0]  # primary(): sorted is stable, so the first of the best
        dates = [e.freshness_at for e in ordered if e.freshness_at]
        if self.hidden_latest:
            dates.append(self.hidden_latest)
        return {
            "fact_id": self.fact_id, "tenant_id": self.tenant_id,
            "entity_type": self.entity_type, "entity_id": self.entity_id,
            "fact_namespace": self.namespace, "fact_key": self.key,
            "fact_value_text": first.value_text, "fact_value_norm": self.value_norm,
            "value_type": self.value_type, "confidence": first.confidence,
            "evidence_source_type": first.source_type,
            "evidence_source_id": first.source_id, "evidence_path": first.path,
            "evidence_excerpt": first.excerpt, "evidence_start": first.start,
            "evidence_end": first.end, "extractor": first.extractor,
            "extract_version": first.extract_version,
            "freshness_at": max(dates) if dates else None,
            "is_active": self.is_active, "created_run_id": self.created_run_id,
            "created_build_seq": self.created_build_seq,
            "updated_build_seq": self.updated_build_seq,
            "invalidated_run_id": self.invalidated_run_id,
            "invalidated_build_seq": self.invalidated_build_seq,
            "invalidation_reason": self.invalidation_reason,
            "evidence_count": len(ordered) + self.hidden,
            # (its fields: the struct's order)
            "evidence": [e._asdict() for e in kept_evidence(ordered)],
        }

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Fact:
        """The fact of a row, with the evidence the row keeps (the others counted in
        `hidden`: as_row() gives the row back)."""
        evidence = evidence_entries(row["evidence"])
        hidden = row["evidence_count"] - len(evidence)
        return cls(row["fact_id"], row["tenant_id"], row["entity_type"], row["entity_id"],
                   row["fact_namespace"], row["fact_key"], row["fact_value_norm"],
                   row["value_type"], evidence, row["is_active"],
                   row["created_run_id"], row["created_build_seq"], row["updated_build_seq"],
                   row["invalidated_run_id"], row["invalidated_build_seq"],
                   row["invalidation_reason"], hidden,
                   row["freshness_at"] if hidden else None)


def evidence_entries(entries: list[dict[str, Any]]) -> list[Evidence]:
    """Evidence from dicts of its fields (as Arrow reads the evidence struct)."""
    # (in Evidence's order, made positionally: by keyword took a quarter longer)
    if entries and tuple(entries[0]) == _FIELDS:
        return [Evidence._make(e.values()) for e in entries]
    return [Evidence(**e) for e in entries]


def facts_schema():
    import pyarrow as pa

    evidence = pa.struct([
        ("source_type", pa.string()), ("source_id", pa.string()), ("path", pa.string()),
        ("start", pa.int64()), ("end", pa.int64()), ("excerpt", pa.string()),
        ("extractor", pa.string()), ("extract_version", pa.string()),
        ("confidence", pa.float64()), ("freshness_at", pa.string()),
        ("source_path", pa.string()), ("run_id", pa.string()),
        ("value_text", pa.string())])
    return pa.schema([
        ("fact_id", pa.string()), ("tenant_id", pa.string()), ("entity_type", pa.string()),
        ("entity_id", pa.string()), ("fact_namespace", pa.string()),
        ("fact_key", pa.string()), ("fact_value_text", pa.string()),
        ("fact_value_norm", pa.string()), ("value_type", pa.string()),
        ("confidence", pa.float64()), ("evidence_source_type", pa.string()),
        ("evidence_source_id", pa.string()), ("evidence_path", pa.string()),
        ("evidence_excerpt", pa.string()), ("evidence_start", pa.int64()),
        ("evidence_end", pa.int64()), ("extractor", pa.string()),
        ("extract_version", pa.string()), ("freshness_at", pa.string()),
        ("is_active", pa.bool_()), ("created_run_id", pa.string()),
        ("created_build_seq", pa.int64()), ("updated_build_seq", pa.int64()),
        ("invalidated_run_id", pa.string()), ("invalidated_build_seq", pa.int64()),
        ("invalidation_reason", pa.string()), ("evidence_count", pa.int32()),
        ("evidence", pa.list_(evidence)),
    ])


def evidence_schema():
    """semantic_fact_evidence.parquet: every evidence entry of every fact, a row each, in
    the facts' order and each fact's in sort_key order."""
    import pyarrow as pa

    return pa.schema([("fact_id", pa.string()),
                      *facts_schema().field("evidence").type.value_type])


def runs_schema():
    import pyarrow as pa

    return pa.schema([
        ("run_id", pa.string()), ("build_seq", pa.int64()), ("tenant_id", pa.string()),
        ("entity_type", pa.string()), ("entity_id", pa.string()),
        ("source_path", pa.string()), ("trigger", pa.string()), ("status", pa.string()),
        ("input_fingerprint", pa.string()), ("source_deleted", pa.bool_()),
        ("facts_written", pa.int64()), ("failure_reason", pa.string()),
        ("extract_version", pa.string()), ("started_build_seq", pa.int64()),
        ("finished_build_seq", pa.int64()),
    ])


def _metadata(artifact: str, build_seq: int, extract_version: str) -> dict[str, str]:
    return {"ctxfst.artifact": artifact, "ctxfst.schema_version": FACTS_SCHEMA_VERSION,
            "ctxfst.build_seq": str(build_seq), "ctxfst.extract_version": extract_version}


# The row order of semantic_facts.parquet, as its columns (fact_sort_key: as a Fact's).
SORT_COLUMNS = ("tenant_id", "entity_type", "entity_id", "fact_namespace", "fact_key",
                "fact_value_norm")


def fact_sort_key(fact: Fact) -> tuple:
    """The row order of semantic_facts.parquet."""
    return (fact.tenant_id, fact.entity_type, fact.entity_id, fact.namespace, fact.key,
            fact.value_norm)


def facts_table(facts: list[Fact], build_seq: int, extract_version: str):
    return rows_table([fact.as_row() for fact in sorted(facts, key=fact_sort_key)],
                      build_seq, extract_version)


def rows_table(rows: list[dict[str, Any]], build_seq: int, extract_version: str):
    """Fact rows (Fact.as_row(), in artifact order) as the semantic_facts table."""
    import pyarrow as pa

    # One struct array: the same table as Table.from_pylist(rows, schema), a third faster.
    rows_array = pa.array(rows, type=pa.struct(list(facts_schema())))
    table = pa.Table.from_batches([pa.RecordBatch.from_struct_array(rows_array)])
    return table.replace_schema_metadata(table_metadata(build_seq, extract_version))


def table_metadata(build_seq: int, extract_version: str) -> dict[str, str]:
    """The schema metadata of semantic_facts.parquet."""
    return _metadata("semantic_facts", build_seq, extract_version)


def evidence_metadata(build_seq: int, extract_version: str) -> dict[str, str]:
    """The schema metadata of semantic_fact_evidence.parquet."""
    return _metadata("semantic_fact_evidence", build_seq, extract_version)


def evidence_table(facts: list[Fact], build_seq: int, extract_version: str):
    """The evidence file of these facts (each with all its evidence), in artifact order."""
    return evidence_rows_table([(fact.fact_id, *entry)
                                for fact in sorted(facts, key=fact_sort_key)
                                for entry in sorted_evidence(fact.evidence)],
                               build_seq, extract_version)


def evidence_rows_table(rows: list[tuple], build_seq: int, extract_version: str):
    """Evidence rows ((fact id, *Evidence) tuples) as a semantic_fact_evidence table."""
    import pyarrow as pa

    schema = evidence_schema()
    columns = list(zip(*rows, strict=True)) if rows else [() for _ in schema]
    return pa.Table.from_arrays([pa.array(column, field.type) for column, field
                                 in zip(columns, schema, strict=True)], schema=schema
                                ).replace_schema_metadata(evidence_metadata(build_seq,
                                                                            extract_version))


def runs_table(runs: list[dict[str, Any]], build_seq: int, extract_version: str,
               previous=None):
    """The runs table: these runs (dicts) and the previous ones (an Arrow table in
    runs_schema, or None), ordered by (build_seq, source_path)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    table = pa.Table.from_pylist(runs, schema=runs_schema())
    if previous is not None:
        table = pa.concat_tables([previous.replace_schema_metadata(None), table])
    order = pc.sort_indices(table, sort_keys=[("build_seq", "ascending"),
                                              ("source_path", "ascending")])  # (stable)
    table = table.take(order).combine_chunks()
    return table.replace_schema_metadata(_metadata("semantic_fact_extraction_runs", build_seq,
                                                   extract_version))
