"""The facts of a first build, made as Arrow columns instead of Python objects.

With no previous ledger every candidate is new, so the merge is a sort: the candidates of
all sources (790,000 at 10,000 documents) are sorted into the artifact's order, each run
of equal fact ids becomes one fact, and its evidence list is that run, in the order
Fact.as_row() gives it. No Fact, Evidence or row dict is made. The result is the table
Merge.apply gives over an empty ledger, byte for byte (tests/test_facts.py holds the two
to each other).

Extraction workers send their candidates back as Arrow IPC streams, one a column
(candidate_batch): pickling 790,000 named tuples cost more than extracting them, and the
merge combines a column at a time, letting its streams go. Their text columns are
dictionary-encoded (all but fact_id repeat a lot: the candidates take 110 MB at 10,000
documents, not 270 MB), and the dictionaries are put in order once combined, so that the
sort compares integers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..collector import return_free_memory
from .model import (
    EVIDENCE_ORDER,
    SORT_COLUMNS,
    Candidate,
    bounded_lists,
    evidence_metadata,
    evidence_schema,
    facts_schema,
    rows_table,
    table_metadata,
)

# A candidate row: its fact's id, key and value type, then its evidence as the fact keeps it.
_FACT_FIELDS = ("fact_id", *SORT_COLUMNS, "value_type")


def _evidence_type():
    return facts_schema().field("evidence").type.value_type


def candidate_schema():
    """The candidates' columns: those of the fact, then those of its evidence, texts
    dictionary-encoded but for the fact id (the one that does not repeat)."""
    import pyarrow as pa

    def coded(field):
        return field.with_type(pa.dictionary(pa.int32(), field.type)) \
            if field.type == pa.string() and field.name != "fact_id" else field

    return pa.schema([coded(field) for field in [
        *(pa.field(name, pa.string()) for name in _FACT_FIELDS), *_evidence_type()]])


def _array(values: Sequence[Any], field):
    import pyarrow as pa

    if pa.types.is_dictionary(field.type):
        return pa.array(values, field.type.value_type).dictionary_encode()
    return pa.array(values, field.type)


def _in_order(column):
    """A dictionary column whose dictionary is sorted: its indices order as its values.
    (Other columns as they are.)"""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    if not pa.types.is_dictionary(column.type):
        return column
    column = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if column.dictionary.null_count or len(pc.unique(column.dictionary)) != len(
            column.dictionary):  # (each value once: equal values must rank equal)
        column = column.cast(column.type.value_type).dictionary_encode()
    order = pc.sort_indices(column.dictionary).to_numpy()
    rank = np.empty(len(order), np.int32)
    rank[order] = np.arange(len(order), dtype=np.int32)
    return pa.DictionaryArray.from_arrays(pa.array(rank).take(column.indices),
                                          column.dictionary.take(pa.array(order)))


def _plain(column):
    """A column with its values in place of a dictionary's indices."""
    import pyarrow as pa

    return column.cast(column.type.value_type) if pa.types.is_dictionary(column.type) \
        else column


def _sortable(table):
    """The table with each dictionary column's indices in its place (_in_order columns:
    they sort as the values)."""
    import pyarrow as pa

    return pa.table({name: column.combine_chunks().indices
                     if pa.types.is_dictionary(column.type) else column
                     for name, column in zip(table.column_names, table.columns, strict=True)})


def candidate_batch(sources: list[tuple[str, str, list[tuple[str, Candidate]]]]
                    ) -> tuple[list[bytes], list[int]]:
    """The candidates of these sources ((path, run id, [(fact id, candidate)]), in
    order) as Arrow IPC streams, one a column of candidate_schema, a source's repeated
    spans left out (Merge.apply adds them once); and the number of facts each source
    supports."""
    import pyarrow as pa

    rows: list[tuple] = []
    supported: list[int] = []
    for path, run_id, candidates in sources:
        seen: set[tuple] = set()
        for fid, candidate in candidates:
            ev = candidate.evidence
            row = (fid, candidate.tenant_id, candidate.entity_type, candidate.entity_id,
                   candidate.namespace, candidate.key, candidate.value_norm,
                   candidate.value_type, ev.source_type, ev.source_id, ev.path, ev.start,
                   ev.end, ev.excerpt, ev.extractor, ev.extract_version, ev.confidence,
                   ev.freshness_at, path, run_id, candidate.value_text)
            span = (fid, *row[8:])
            if span in seen:
                continue
            seen.add(span)
            rows.append(row)
        supported.append(len({fid for fid, _ in candidates}))
    schema = candidate_schema()
    # (rows turned into columns in one C pass: an append per value cost a fifth of this)
    columns = list(zip(*rows, strict=True)) if rows else [() for _ in schema]
    streams = []
    for column, field in zip(columns, schema, strict=True):
        sink, alone = pa.BufferOutputStream(), pa.schema([field])
        with pa.ipc.new_stream(sink, alone) as writer:
            writer.write_batch(pa.record_batch([_array(column, field)], schema=alone))
        streams.append(sink.getvalue().to_pybytes())
    return streams, supported


def _combined(streams: list[list[bytes | None]], index: int, field):
    """Column `index` (of candidate_schema, `field`) of the candidates of candidate_batch's
    streams, in order, as one array; each stream of it is let go once read (None in its
    place)."""
    import pyarrow as pa

    chunks = []
    for columns in streams:
        stream, columns[index] = columns[index], None
        chunks.extend(batch.column(0) for batch in pa.ipc.open_stream(stream))
    return pa.chunked_array(chunks, field.type).combine_chunks()


class FreshFacts:
    """The facts of a first build from its candidates (candidate_batch streams, in the
    order they were extracted): every fact active, created by the first source (in that
    order) to support it, with the value type that source gave it.

    Only the order is computed for all of them; rows(begin, end) makes the table of a
    range of facts, so the file is written a row group at a time and the whole table
    (twice the candidates' size) is never held. Empties `streams`."""

    def __init__(self, streams: list[list[bytes]], build_seq: int, extract_version: str
                 ) -> None:
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        self.build_seq, self.extract_version = build_seq, extract_version
        # One chunk a column (a take across the workers' 300 chunks is 30x slower), the
        # dictionaries combined and in order; each column's streams are let go as it is
        # combined, so the candidates are held about once (not streams and copy at once).
        # The streams are Python bytes, whose freed pages Arrow's allocator never reuses:
        # they are given back column by column (115 MB of the combine's peak at 10,000
        # documents).
        schema = candidate_schema()
        columns = []
        for index, field in enumerate(schema):
            columns.append(_in_order(_combined(streams, index, field)))
            return_free_memory()
        self.candidates = candidates = pa.table(columns, names=schema.names)
        del columns
        streams.clear()
        rows = candidates.num_rows
        # A stable sort: equal evidence keys keep the order the candidates were made in.
        order = pc.sort_indices(
            _sortable(candidates.select([*SORT_COLUMNS,
                                         *(name for name, _ in EVIDENCE_ORDER)])),
            sort_keys=[*((name, "ascending") for name in SORT_COLUMNS), *EVIDENCE_ORDER])
        self.ranks = ranks = order.to_numpy()
        fact_ids = candidates.column("fact_id").take(order).combine_chunks()
        differs = pc.not_equal(fact_ids.slice(1), fact_ids.slice(0, max(rows - 1, 0)))
        starts = np.flatnonzero(differs.to_numpy(zero_copy_only=False)) + 1
        # each fact's candidates: ranks[bounds[i]:bounds[i + 1]]
        self.bounds = np.concatenate([[0], starts, [rows]]).astype(np.int64) if rows else \
            np.zeros(1, dtype=np.int64)
        self.count = len(self.bounds) - 1
        self.primary = ranks[self.bounds[:-1]]  # each fact's first evidence (its row's)
        self.first_made = np.minimum.reduceat(ranks, self.bounds[:-1]) if rows else ranks
        # (the sort columns as their dictionaries' indices: as strings, every fact's took
        # 0.5 GB at 100,000 documents)
        keys = candidates.select(["fact_id", *SORT_COLUMNS]).take(pa.array(self.primary))
        self.keys = keys.combine_chunks().append_column(
            "is_active", pa.array(np.ones(self.count, dtype=bool))).append_column(
            "evidence_count", pa.array(np.diff(self.bounds).astype(np.int32)))

    def tables(self, begin: int, end: int):
        """The semantic_facts table of facts begin..end and their evidence table."""
        ranked = self._ranked(begin, end)  # (taken once for the two)
        return self.rows(begin, end, ranked), self.evidence(begin, end, ranked)

    def rows(self, begin: int, end: int, ranked=None):
        """The semantic_facts table of facts begin..end, in the artifact's order (ranked:
        their evidence, _ranked's, when taken already)."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        facts = end - begin
        if facts == 0:
            return rows_table([], self.build_seq, self.extract_version)
        candidates = self.candidates

        def taken(names: list[str], rows: np.ndarray):
            picked = candidates.select(names).take(pa.array(rows))
            return pa.table([_plain(column) for column in picked.columns], names=names)

        primary = taken(candidates.column_names, self.primary[begin:end])
        first_made = taken(["value_type", "run_id"], self.first_made[begin:end])
        bounds = self.bounds[begin:end + 1]
        evidence_type = _evidence_type()
        ranked = self._ranked(begin, end) if ranked is None else ranked
        # freshness_at: the latest date any evidence gives (as Fact.as_row(): "" is none)
        dates = ranked.column("freshness_at")
        dates = pc.if_else(pc.equal(dates, ""), pa.scalar(None, pa.string()), dates)
        latest = pa.table({"fact": np.repeat(np.arange(facts), np.diff(bounds)),
                           "date": dates}).group_by("fact", use_threads=False).aggregate(
            [("date", "max")]).sort_by("fact").column("date_max")
        # The row keeps what kept_evidence keeps; the evidence file has them all.
        evidence = bounded_lists(pa.StructArray.from_arrays(
            [ranked.column(field.name).combine_chunks() for field in evidence_type],
            fields=list(evidence_type)), bounds)
        seq = pa.array(np.full(facts, self.build_seq, dtype=np.int64))
        columns = {
            **{name: primary.column(name) for name in ("fact_id", *SORT_COLUMNS)},
            "fact_value_text": primary.column("value_text"),
            "value_type": first_made.column("value_type"),
            "confidence": primary.column("confidence"),
            "evidence_source_type": primary.column("source_type"),
            "evidence_source_id": primary.column("source_id"),
            "evidence_path": primary.column("path"),
            "evidence_excerpt": primary.column("excerpt"),
            "evidence_start": primary.column("start"), "evidence_end": primary.column("end"),
            "extractor": primary.column("extractor"),
            "extract_version": primary.column("extract_version"),
            "freshness_at": latest,
            "is_active": pa.array(np.ones(facts, dtype=bool)),
            "created_run_id": first_made.column("run_id"),
            "created_build_seq": seq, "updated_build_seq": seq,
            "invalidated_run_id": pa.nulls(facts, pa.string()),
            "invalidated_build_seq": pa.nulls(facts, pa.int64()),
            "invalidation_reason": pa.nulls(facts, pa.string()),
            "evidence_count": pa.array(np.diff(bounds).astype(np.int32)),
            "evidence": evidence,
        }
        schema = facts_schema()
        return pa.Table.from_arrays([columns[field.name] for field in schema], schema=schema
                                    ).replace_schema_metadata(
            table_metadata(self.build_seq, self.extract_version))

    def _ranked(self, begin: int, end: int):
        """The evidence of facts begin..end, in the artifact's order, as plain columns."""
        import pyarrow as pa

        names = [field.name for field in _evidence_type()]
        picked = self.candidates.select(names).take(
            pa.array(self.ranks[self.bounds[begin]:self.bounds[end]]))
        return pa.table([_plain(column) for column in picked.columns], names=names)

    def evidence(self, begin: int, end: int, ranked=None):
        """The semantic_fact_evidence table of facts begin..end."""
        import numpy as np
        import pyarrow as pa

        bounds = self.bounds[begin:end + 1]
        ranked = self._ranked(begin, end) if ranked is None else ranked
        fact_ids = self.keys.column("fact_id").take(
            pa.array(np.repeat(np.arange(begin, end), np.diff(bounds))))
        schema = evidence_schema()
        return pa.Table.from_arrays([fact_ids, *ranked.columns], schema=schema
                                    ).replace_schema_metadata(
            evidence_metadata(self.build_seq, self.extract_version))


def fresh_facts(streams: list[list[bytes]], build_seq: int, extract_version: str):
    """FreshFacts' whole table, and its evidence table."""
    facts = FreshFacts(streams, build_seq, extract_version)
    return facts.tables(0, facts.count)
