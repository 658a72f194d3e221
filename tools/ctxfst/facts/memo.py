"""What the facts stage remembers of the ledger it wrote, so that an edit reads and
re-encodes only the row groups of the facts it changes.

The memo lives in the build's unit store (data only, owner-checked) and holds:

- "facts_file": the sha256 of the semantic_facts.parquet, the evidence file and the
  runs file this toolchain wrote last, the rule, row-group size and heavy evidence count
  they were cut with (parquet_splice.spaced_group_starts), the key of each row group's
  record, in order, and both files' footer fields but their row groups (schema and
  metadata: a few groups are read through a file of those groups alone);
- "facts-group:<digest of the record>": a row group's record: its first row's sort key
  and fact id, its rows and active rows, whether that row is heavy (a group of its own),
  and its footer entries in the facts file and in the evidence file (whose row groups
  hold the evidence of the facts file's, group for group; artifacts/parquet_splice), so
  the files are spliced without walking their footers. A group copied by an edit keeps
  its record (where it lay when written: its numbers are moved as it is read), so an
  edit writes the records of the groups it encodes, not all of them again;
- "facts:<source path>", for every source: a digest of the evidence it gives each active
  fact it supports (run ids left out: a span read again by a later run is the same).

A fact's row changes only where some source's evidence for it changes, and that happens
only when the source is extracted or deleted; so comparing a changed source's digests
before and after says which facts an edit changes before any row is read.

The memo is used only for the very files it names (their sha256); for any other ledger
(a stranger's, one restored from a backup, one a failed build left) the facts stage reads
the ledger whole, checks it, and writes the memo again from it.
"""

from __future__ import annotations

import bisect
import hashlib
import itertools
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from ..artifacts.io import is_sha256
from ..artifacts.parquet_splice import (
    SPACED_RULE,
    Group,
    SpliceError,
    encoding_of,
    footer_from_record,
    footer_record,
    group_ranges,
    group_record,
    groups_from_records,
)
from .model import SORT_COLUMNS, Evidence

RECORD = "facts_file"
GROUP = "facts-group:"  # + the digest of a row group's record: the record
SOURCE = "facts:"  # + a source's path: {fact id: evidence digest}
# + a source's path: the [tenant, entity type, entity id] of the facts it supports, where
# a merge looks first for the row groups of facts only its old digests name
SUBJECTS = "facts-subjects:"


def evidence_digest(evidence: Iterable[Evidence]) -> str:
    """What one source's evidence for one fact says, whatever run read it."""
    return spans_digest([item.without_run_id() for item in evidence])


def spans_digest(spans: list[tuple]) -> str:
    """evidence_digest of the evidence whose fields, the run id left out, are spans."""
    items = sorted(map(repr, spans))
    return hashlib.blake2b("\n".join(items).encode("utf-8"), digest_size=8).hexdigest()


def digests_by_source(entries: Iterable[tuple[str, Evidence]]) -> dict[str, dict[str, str]]:
    """Each source's digests of the facts these (fact id, evidence) entries support."""
    found: dict[str, dict[str, list[Evidence]]] = {}
    for fid, evidence in entries:
        found.setdefault(evidence.source_path, {}).setdefault(fid, []).append(evidence)
    return {path: {fid: evidence_digest(items) for fid, items in facts.items()}
            for path, facts in found.items()}


def subjects_of(candidates) -> list[list[str]]:
    """The subjects (tenant, entity type, entity id) of the facts these (fact id,
    Candidate) pairs support, sorted: where their rows lie in the facts' order."""
    return [list(subject) for subject in sorted({
        (c.tenant_id, c.entity_type, c.entity_id) for _, c in candidates})]


def read_subjects(value: Any) -> list[tuple[str, str, str]] | None:
    """A source's subjects as the store holds them; None for anything else."""
    if not isinstance(value, list) or not all(
            isinstance(item, list) and len(item) == 3 and all(type(part) is str
                                                              for part in item)
            for item in value):
        return None
    return [tuple(item) for item in value]


def read_digests(value: Any) -> dict[str, str] | None:
    """A source's digests as the memo holds them; None for anything else."""
    if not isinstance(value, dict) or not all(
            type(fid) is str and type(digest) is str for fid, digest in value.items()):
        return None
    return value


def _firsts_of(rows: Iterable[int]) -> list[int]:
    """The first row of each of groups of these many rows."""
    return list(itertools.accumulate(rows, initial=0))[:-1]


@dataclass
class GroupKeys:
    """What the memo knows of a row group's rows without reading them."""

    first: tuple[str, ...]  # its first row's sort key (SORT_COLUMNS)
    fact_id: str            # its first row's fact id
    rows: int
    active: int
    heavy: bool = False     # its first row has heavy evidence: it is the group's only row


def group_keys(table, starts: list[int], heavy: int) -> list[GroupKeys]:
    """The GroupKeys of a facts table's row groups (their first rows); a fact with
    `heavy` or more evidence entries is a heavy one."""
    import pyarrow.compute as pc

    if not starts:
        return []
    firsts = table.select([*SORT_COLUMNS, "fact_id", "evidence_count"]).take(starts).to_pylist()
    active = table.column("is_active")
    return [GroupKeys(tuple(first[name] for name in SORT_COLUMNS), first["fact_id"],
                      end - start, pc.sum(active.slice(start, end - start)).as_py() or 0,
                      first["evidence_count"] >= heavy)
            for first, (start, end) in zip(firsts, group_ranges(starts, table.num_rows),
                                           strict=True)]


@dataclass
class LedgerMemo:
    facts_sha: str
    runs_sha: str
    group_rows: int      # the row-group size the facts file was cut with
    heavy: int           # and the evidence count that made a fact a row group of its own
    encoding: str        # parquet_splice.encoding_of its footer
    keys: list[GroupKeys]
    groups: list[Group]  # in the facts file's bytes
    evidence_sha: str
    evidence_encoding: str
    evidence_groups: list[Group]  # in the evidence file's bytes, group for group
    # each group's record key in the store, where its record is stored (None: not yet)
    stored: list[str | None] = field(default_factory=list)
    # the files' other footer fields (parquet_splice.bare_footer), where known: their
    # groups are then read through files of those groups alone (arrays.GroupsFile)
    footer: list[tuple[int, int, bytes]] | None = None
    evidence_footer: list[tuple[int, int, bytes]] | None = None

    def __post_init__(self) -> None:
        if len(self.stored) != len(self.keys):
            self.stored = [None] * len(self.keys)

    @classmethod
    def read(cls, value: Any, facts: bytes, facts_sha: str, runs_sha: str, evidence: bytes,
             evidence_sha: str, group_rows: int, heavy: int) -> LedgerMemo | None:
        """The memo of exactly these files (their sha256) cut with this group size and
        heavy evidence count, or None (another ledger, another toolchain's memo, or a
        damaged one)."""
        if not isinstance(value, dict) or value.get("facts_sha256") != facts_sha or \
                value.get("runs_sha256") != runs_sha or value.get("group_rows") != group_rows \
                or value.get("evidence_sha256") != evidence_sha \
                or value.get("heavy") != heavy or value.get("cut") != SPACED_RULE \
                or not is_sha256(value.get("encoding")) \
                or not is_sha256(value.get("evidence_encoding")):
            return None
        try:
            keys = []
            groups = groups_from_records(facts, [entry["part"] for entry in value["groups"]])
            evidence_groups = groups_from_records(
                evidence, [entry["evidence_part"] for entry in value["groups"]])
            for entry, group in zip(value["groups"], groups, strict=True):
                first, fact_id, rows, active, alone = (
                    entry[n] for n in ("first", "id", "rows", "active", "heavy"))
                if not (isinstance(first, list) and len(first) == len(SORT_COLUMNS) and
                        all(type(part) is str for part in first) and type(fact_id) is str
                        and type(rows) is int and type(active) is int and 0 <= active <= rows
                        and group.rows == rows and type(alone) is bool
                        and (rows == 1 or not alone)):
                    return None
                keys.append(GroupKeys(tuple(first), fact_id, rows, active, alone))
            footers = [footer_from_record(value[name]) if name in value else None
                       for name in ("footer", "evidence_footer")]
        except (KeyError, TypeError, SpliceError):
            return None
        if None in footers or encoding_of(footers[0]) != value["encoding"] or \
                encoding_of(footers[1]) != value["evidence_encoding"]:
            footers = [None, None]  # (read through the files' own footers)
        if [k.first for k in keys] != sorted(k.first for k in keys) or \
                any(group.rows < k.rows for k, group in zip(keys, evidence_groups, strict=True)):
            return None  # (every fact has evidence)
        stored = value.get("stored")
        return cls(facts_sha, runs_sha, group_rows, heavy, value["encoding"], keys, groups,
                   evidence_sha, value["evidence_encoding"], evidence_groups,
                   stored if isinstance(stored, list) and all(
                       type(key) is str for key in stored) else [], *footers)

    def save(self, store) -> None:
        """Put the memo in the store (RECORD): the records of its groups that are not
        there yet, and the list of their keys; the records of no group of it go."""
        from ..artifacts.io import compact_json

        keys = []
        for key, k, g, e in zip(self.stored, self.keys, self.groups, self.evidence_groups,
                                strict=True):
            if key is None:
                blob = compact_json({"first": list(k.first), "id": k.fact_id, "rows": k.rows,
                                     "active": k.active, "heavy": k.heavy,
                                     "part": group_record(g), "evidence_part": group_record(e)})
                key = hashlib.blake2b(blob, digest_size=16).hexdigest()
                store.put_blob(GROUP + key, blob)
            keys.append(key)
        self.stored = keys
        store.put(RECORD, {"facts_sha256": self.facts_sha, "runs_sha256": self.runs_sha,
                           "evidence_sha256": self.evidence_sha,
                           "group_rows": self.group_rows, "heavy": self.heavy,
                           "cut": SPACED_RULE, "encoding": self.encoding,
                           "evidence_encoding": self.evidence_encoding, "groups": keys,
                           **({"footer": footer_record(self.footer),
                               "evidence_footer": footer_record(self.evidence_footer)}
                              if self.footer and self.evidence_footer else {})})
        _drop_records(store, keys)

    @cached_property
    def _firsts(self) -> list[tuple[str, ...]]:
        return [k.first for k in self.keys]

    @cached_property
    def starts(self) -> list[int]:
        """Each row group's first row in the file."""
        return _firsts_of(k.rows for k in self.keys)

    def group_of(self, sort_key: tuple) -> int:
        """The row group a row with this sort key is in, or would go into."""
        return max(0, bisect.bisect_right(self._firsts, sort_key) - 1)

    def group_of_row(self, row: int) -> int:
        return bisect.bisect_right(self.starts, row) - 1

    def groups_of_subject(self, subject: tuple[str, str, str]) -> range:
        """The row groups that hold the rows of this subject's facts, if it has any:
        SORT_COLUMNS begin with the subject."""
        prefixes = self._subjects
        first = self.group_of((*subject, *[""] * (len(SORT_COLUMNS) - len(subject))))
        return range(first, max(first + 1, bisect.bisect_right(prefixes, subject)))

    @cached_property
    def _subjects(self) -> list[tuple[str, ...]]:
        return [k.first[:3] for k in self.keys]


def forget_memo(store) -> None:
    """Take the memo out of the store, its groups' records with it."""
    store.remove(RECORD)
    _drop_records(store, [])


def _drop_records(store, kept: list[str]) -> None:
    """Take out of the store the group records of keys not in `kept`."""
    for stale in store.keys(GROUP) - {GROUP + key for key in kept}:
        store.remove(stale)


def stored_memo(store) -> Any:
    """The memo as the store holds it, each group's record in the place of its key (and
    the keys as "stored"), for LedgerMemo.read; None where a record is missing."""
    value = store.value(RECORD)
    keys = value.get("groups") if isinstance(value, dict) else None
    if not (isinstance(keys, list) and all(type(key) is str for key in keys)):
        return value  # (not a memo this toolchain wrote: LedgerMemo.read says so)
    found = store.values([GROUP + key for key in keys])
    if len(found) != len(set(keys)):
        return None
    return {**value, "groups": [found[GROUP + key] for key in keys], "stored": keys}
