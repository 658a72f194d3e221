"""The chunk files of a build, chunks.json and chunks.parquet, made from the compilation
units: a document's rows are kept in its unit and copied while it is unchanged, and the
previous files' unchanged bytes and row groups are copied, not encoded again."""


from __future__ import annotations

import base64
import bisect
import hashlib
import json
import os
from dataclasses import dataclass, field
from json.encoder import encode_basestring
from pathlib import Path
from typing import Any

import numpy as np

from ..artifacts.arrays import ParquetParts
from ..artifacts.io import Span, compact_json, is_sha256, write_pieces
from ..compile.profiles import profile_catalog
from ..diagnostics import Diagnostic
from ..document.link import Summary, link
from ..files import file_stamp
from .incremental import Checked
from .published import PUBLISHED, read_as_published
from .units import (
    COMPILED,
    LINKED,
    DocumentUnit,
    UnitStore,
    catalog_rows,
    load_row,
    unit_key,
)


@dataclass
class Compiled:
    """The chunk artifacts (chunks.json and chunks.parquet as pieces, some of them spans
    of the previous files, still open) and what they were made from."""

    json: list[bytes | Span] | None  # (None: chunks.json is not made)
    parquet: list[bytes | memoryview | Span]
    chunks: int
    catalog_json: bytes  # what the profiles read of the catalog, compact (catalog.json)
    entities: int
    recompiled: int
    made_from: dict[str, Any]
    # the documents' units compiled now, and the paths compiled last that are gone (None:
    # these units are every document compiled): UnitStore.put_compiled, with the record
    documents: tuple[list[DocumentUnit], list[str] | None]
    copied: int = 0  # rows copied from the previous chunks.json
    opened: list[int] = field(default_factory=list)  # files the spans copy from
    read_from: dict[str, Any] = field(default_factory=dict)  # (load_compiled)

    def write(self, json_path: Path, parquet_path: Path) -> None:
        """Write chunks.json (when made) and chunks.parquet, and note their sha256 in the
        record (the next compile reads them only while they are still those files)."""
        try:
            json_sha256 = write_pieces(json_path, self.json) if self.json is not None \
                else None
            self.made_from["sha256"] = write_pieces(parquet_path, self.parquet)
        finally:
            self.close()
        if self.made_from["json"] is not None and json_sha256 is not None:
            self.made_from["json"]["sha256"] = json_sha256

    def close(self) -> None:
        while self.opened:
            os.close(self.opened.pop())

    def record(self, store: UnitStore) -> None:
        """Once the staged files hold what write() wrote: the next build splices them."""
        save_compiled(store, self.made_from, self.read_from)
        store.put_compiled(*self.documents)
        store.save()


def _kept_rows(blob: bytes | None, summary: Summary) -> list[tuple[str, bytes]] | None:
    """A document's kept rows: their compact JSON texts, one per line (compact JSON holds
    no raw newline), each the row of the summary's chunk at its place; else None."""
    if blob is None:
        return None
    texts = blob.split(b"\n") if blob else []
    if len(texts) != len(summary.chunks):
        return None
    for text, chunk in zip(texts, summary.chunks, strict=True):
        if not text.startswith(_row_start(chunk[1])):
            return None
    return [(chunk[1], text) for chunk, text in zip(summary.chunks, texts, strict=True)]


def _row_start(chunk_id: str) -> bytes:
    # (json's own string encoder: what json.dumps(ensure_ascii=False) writes, 10x faster)
    return ('{"id":' + encode_basestring(chunk_id) + ",").encode("utf-8")


def compile_chunks(checked: Checked, store: UnitStore, previous_parquet: Path,
                   previous_json: Path, json_exports: bool = True,
                   reuse_layout: bool = True, let_go: bool = False) -> Compiled:
    """chunks.json (with json_exports) and chunks.parquet from the units: rows are
    compiled only for the documents without kept rows. With the layout of the previous
    files (the ones the last compile recorded: chunks.json, or without JSON exports
    chunks.parquet) and reuse_layout, only the changed documents' rows are read: the
    others' texts are copied from chunks.json, their Arrow rows from chunks.parquet;
    otherwise every document's kept rows are joined. chunks.parquet splices the changed
    documents' rows into the previous one. let_go: each typed document is forgotten
    once its rows are made (for a caller that needs none of them after)."""
    from ..compile.chunks import CompileError, chunks_json

    # A document's rows are unchanged while its unit is the one the last compile
    # compiled (and it is not volatile): the store compares them (compiled_changes),
    # only those of the documents this validation changed or dropped where the last
    # compile compiled the units it started from.
    paths = {unit.path for unit in checked.units}
    made_from, read_from = load_compiled(store)
    linked = _linked_here(store, checked)
    compared = None
    if made_from is not None and linked is not None:
        since_units = checked.based_on and made_from.get("units") == checked.based_on
        compared = store.compiled_changes(sorted(checked.changed | set(checked.removed))
                                          if since_units else None)
    gone = None  # (path, relative, sha256) the last compile had that no unit has now
    if compared is not None:
        differ, gone = compared
        changed = set(differ) | {unit.path for unit in checked.units if unit.volatile}
    else:  # (no record, or units the store does not hold: nothing is copied from)
        changed, made_from = set(paths), None
    published = store.value(PUBLISHED)
    found = _previous_chunks(made_from, previous_parquet, published)
    opened = [found[1]] if found is not None else []  # (the files spans copy from)
    try:
        if not reuse_layout:
            before = None
        elif json_exports:
            before = _previous_json(made_from, previous_json, published)
        else:
            before = _previous_layout(made_from, found)
        if before is not None and before[2] is not None:
            opened.append(before[2])
        errors: list[Diagnostic] = []
        # (without the previous layout, every document's rows are read)
        kept, fresh = _unit_rows(checked, store, changed if before is not None
                                 else paths, errors, let_go)
        if errors:
            raise CompileError(errors)
        _forget_stale_rows(store, checked.units, gone)
        store.remove(ROWS_RECORDED)  # (until the record names the rows kept now)
        store.save()
        rows = _ChunkRows(kept, before, paths - changed)
        entities = _catalog(checked, store, linked)
        parquet, layout = _chunks_parquet(rows, fresh, made_from, found, changed)
        recompiled = len(fresh)
        fresh.clear()  # (the rows as dicts, some 100 MB at 10,000 documents: not needed)
        pieces = chunks_json(compact_json(entities), rows.texts()) if json_exports else None
        made_from = {"sha256": None, "layout": layout, "json": rows.layout(pieces),
                     "units": checked.mark}  # (sha256: write())
        documents = ([unit for unit in checked.units if unit.path in changed],
                     [path for path, _, _ in gone if path not in paths]) \
            if gone is not None else (checked.units, None)
        return Compiled(pieces, parquet, len(rows.ids), compact_json(profile_catalog(entities)),
                        len(entities), recompiled, made_from, documents, rows.copied,
                        opened, read_from)
    except BaseException:
        for handle in opened:  # (Compiled.write closes them otherwise)
            os.close(handle)
        raise


def _rows_key(relative: str, sha256: str) -> str:
    return "rows:" + unit_key(relative, sha256)


def _linked_here(store: UnitStore, checked: Checked) -> dict | None:
    """The record of the link step (LINKED) when the store holds the units checked was
    validated as (their save may have failed: a full disk, or caches are off), so that
    its tables can be taken for them; else None."""
    saved = store.value(LINKED)
    return saved if isinstance(saved, dict) and saved.get("units") == checked.mark else None


# Saved with a compile's record, removed with the rows a compile keeps: without it, rows
# may be kept that the record does not name (a compile stopped in between).
ROWS_RECORDED = COMPILED + ":rows-recorded"


def _forget_stale_rows(store: UnitStore, units: list[DocumentUnit],
                       gone: list[tuple[str, str, str]] | None) -> None:
    """Forget the kept rows no document has now: those of the documents the last compile
    compiled (path, relative path, sha256) that no unit has now (gone). Every stale key
    is looked for (a scan of the keys) without them, or after a compile that kept rows
    and stopped before its record (their documents in no record, those rows are no
    one's once they change again)."""
    if gone is None or store.value(ROWS_RECORDED) is not True:
        stale = store.keys("rows:") - {_rows_key(unit.relative, unit.sha256)
                                        for unit in units if not unit.volatile}
    else:
        # (a link to a document shares its rows: keep what a unit still has)
        relatives = {relative for _, relative, _ in gone}
        live = {(unit.relative, unit.sha256) for unit in units
                if unit.relative in relatives and not unit.volatile}
        stale = {_rows_key(relative, sha256) for _, relative, sha256 in gone
                 if (relative, sha256) not in live}
    for key in stale:
        store.remove(key)


def _compiled_parts(record: dict) -> list[tuple[str, dict, str]]:
    """The compile record's long parts, kept under keys of their own so that an edit
    rewrites only those it changes (the chunk ids and document paths stay): (key, the
    dict holding the part, its name)."""
    if not isinstance(record.get("json"), dict):
        return []
    return [(f"{COMPILED}:json.{name}", record["json"], name)
            for name in ("ids", "paths", "docs", "lengths")]


def load_compiled(store: UnitStore) -> tuple[dict | None, dict[str, Any]]:
    """The last compile's record with its parts in place (None when it does not read
    back), and the parts as read, by key (save_compiled writes only the others)."""
    record = store.value(COMPILED)
    if not isinstance(record, dict) or not isinstance(record.get("json"), (dict, type(None))):
        return None, {}
    parts = _compiled_parts(record)
    blobs = store.blobs([key for key, _, _ in parts])
    for key, holder, name in parts:
        value = load_row(blobs[key]) if key in blobs else None
        if value is None:
            return None, {}
        holder[name] = value
    return record, {key: holder[name] for key, holder, name in parts}


def compiled_groups(record: Any, size: int) -> list[tuple[str, int]] | None:
    """The row groups of the chunks.parquet a compile record describes (the unit store's
    "compiled" value), each as (the sha256 of its bytes, its rows), when the record lists
    them as this module writes them (lying one after the other in a file of `size`
    bytes); else None."""
    layout = record.get("layout") if isinstance(record, dict) else None
    entries = layout.get("groups") if isinstance(layout, dict) else None
    if not isinstance(entries, list):
        return None
    found, at = [], 4  # (the file's first group starts after its magic)
    for entry in entries:
        part = entry.get("part") if isinstance(entry, dict) else None
        if not (isinstance(part, dict) and is_sha256(entry.get("sha256"))
                and all(type(part.get(name)) is int for name in ("start", "size", "rows"))
                and part["start"] == at and part["size"] >= 0 and part["rows"] >= 0):
            return None
        at += part["size"]
        found.append((entry["sha256"], part["rows"]))
    return found if at <= size else None


def save_compiled(store: UnitStore, record: dict, read_from: dict[str, Any]) -> None:
    """Keep a compile record (load_compiled reads it back); parts equal to those
    read_from holds are not encoded or written again."""
    record = {**record, "json": dict(record["json"]) if isinstance(record.get("json"), dict)
              else record.get("json")}
    for key, holder, name in _compiled_parts(record):
        value = holder.pop(name)
        if key not in read_from or read_from[key] != value:
            store.put_blob(key, compact_json(value))
    store.put(COMPILED, record)
    store.put(ROWS_RECORDED, True)


def _catalog(checked: Checked, store: UnitStore, linked: dict | None
             ) -> list[dict[str, Any]]:
    """The entity catalog the link step kept; made again from every summary when the
    store does not hold what validation linked (linked: _linked_here), or when a kept
    row does not read back (then kept again)."""
    ours = linked is not None and linked.get("entities") == store.index.catalog_count()
    if ours:
        try:
            return store.index.catalog()
        except ValueError:
            pass
    store.load_summaries(checked.units)
    linked = link([unit.summary for unit in checked.units], _no_position)
    rows = catalog_rows(linked.declarations, linked.merged,
                         {unit.path: unit.relative for unit in checked.units})
    if ours:
        store.index.clear_catalog()
        store.index.put_catalog(rows)
        store.save()
    return [rows[entity_id] for entity_id in sorted(rows)]


def _no_position(path: str, key: tuple) -> tuple[int, int]:
    # (a validated knowledge base declares nothing otherwise: no diagnostic is made)
    return 0, 0


def _unit_rows(checked: Checked, store: UnitStore, paths: set[str],
               errors: list[Diagnostic], let_go: bool = False
               ) -> tuple[dict[str, list[tuple[str, bytes]]], dict[str, list[dict]]]:
    """The rows of these documents' units, as (chunk id, text): kept ones, else compiled
    now (and kept); and the rows compiled now, by document (an empty list for each where
    they were compiled in parts, Checked.in_parts: their text alone is kept). let_go:
    each typed document is forgotten once its rows are made (Checked.let_go)."""
    from ..compile.chunks import document_rows, row_text

    root = checked.root.resolve()
    units = [unit for unit in checked.units if unit.path in paths]
    keys = {unit.path: _rows_key(unit.relative, unit.sha256) for unit in units}
    store.load_summaries(units)  # (each kept row is checked against its chunk id)
    cached = store.blobs([keys[u.path] for u in units if not u.volatile])
    kept = {unit.path: None if unit.volatile else
            _kept_rows(cached.get(keys[unit.path]), unit.summary) for unit in units}
    fresh: dict[str, list[dict[str, Any]]] = {}  # path -> rows compiled now
    parts = checked.in_parts([unit for unit in units if kept[unit.path] is None])
    for part in parts:
        checked.documents([unit.path for unit in part])  # together
        for unit in part:
            rows = document_rows(checked.document(unit.path), unit.relative, root, errors)
            if let_go:  # (a first build would hold every typed document and row at once)
                checked.let_go(unit.path)
            # (in parts, as text alone, parsed again where encoded: 700,000 rows as dicts
            # took 2 GB at 100,000 documents)
            fresh[unit.path] = rows if len(parts) == 1 else []
            kept[unit.path] = [(row["id"], row_text(row).encode("utf-8")) for row in rows]
            if not unit.volatile:
                store.put_blob(keys[unit.path],
                               b"\n".join(text for _, text in kept[unit.path]))
    return kept, fresh


class _ChunkRows:
    """Every chunk row in id order, as chunks.json writes it: the rows of the documents
    read now, and runs of the others' rows as they lie in the previous chunks.json
    (copied as whole blocks of bytes, commas included). Per-row numbers are arrays: an
    edit handles every row of the knowledge base here, and only the changed ones one
    by one."""

    def __init__(self, read: dict[str, list[tuple[str, bytes]]],
                 before: tuple[bytes, dict] | None, keep: set[str]) -> None:
        """read: rows by document; before: the previous chunks.json and its layout
        (_previous_json), or the layout alone (_previous_layout: the rows kept are then
        taken from the previous chunks.parquet, and no chunks.json is made); keep: the
        documents whose rows in it are kept."""
        added = sorted((chunk_id, path, text) for path, rows in read.items()
                       for chunk_id, text in rows)
        old_paths = before[1]["paths"] if before is not None else []
        self.paths = sorted({path for _, path, _ in added} |
                            {path for path in old_paths if path in keep})
        number = {path: index for index, path in enumerate(self.paths)}
        self.ids: list[str] = []
        docs: list[np.ndarray] = []     # each row's document, an index into paths
        lengths: list[np.ndarray] = []
        self.pieces: list[bytes | Span] = []  # joined by commas: the rows
        self._segments: list[tuple[int, int, int]] = []  # (first row, old row, rows)
        self._old: tuple[memoryview, np.ndarray] | None = None  # (chunks.json's rows)
        self._old_count = 0
        self._read: dict[int, bytes] = {}  # new row -> its text, for the rows read now
        self.copied = 0
        events: list[tuple[int, int, Any]] = []  # (old row, 0 add | 1 drop, added row)
        old_ids: list[str] = []
        # the previous rows' ids, their natural group starts and the target they are of
        self._old_natural: tuple[list[str], np.ndarray | None, Any] = ([], None, None)
        self.natural: tuple[list[int], int] | None = None  # (natural_starts(), once asked)
        if before is not None:
            data, old, self._fd, self._stamp = before
            old_lengths = old["lengths"]
            self._old_count = len(old["ids"])
            if data is not None:
                starts = np.empty(len(old_lengths) + 1, np.int64)
                starts[0] = 0
                np.cumsum(old_lengths + 1, out=starts[1:])
                self._old = (memoryview(data), starts + old["head"])
            keeping = np.array([path in keep for path in old_paths], bool)
            remap = np.array([number.get(path, -1) for path in old_paths], np.int64)
            old_ids, old_docs = old["ids"], old["docs"]
            self._old_natural = (old_ids, old.get("natural"), old.get("natural_target"))
            events = [(row, 1, None) for row in
                      np.flatnonzero(~keeping[old_docs]).tolist()] if len(old_docs) else []
            events += [(bisect.bisect_left(old_ids, item[0]), 0, item) for item in added]
        else:
            events = [(0, 0, item) for item in added]
        events.sort(key=lambda event: (event[0], event[1], event[2] and event[2][0]))
        at = 0  # the next old row
        for row, kind, item in [*events, (len(old_ids), 2, None)]:
            if row > at:  # the old rows at..row, kept: one block
                self._copy(at, row, old_ids)
                docs.append(remap[old_docs[at:row]])
                if self._old is not None:
                    lengths.append(old_lengths[at:row])
                at = row
            if kind == 0:
                chunk_id, path, text = item
                self._read[len(self.ids)] = text
                self.ids.append(chunk_id)
                docs.append(np.array([number[path]], np.int64))
                lengths.append(np.array([len(text)], np.int64))
                self.pieces.append(text)
            elif kind == 1:
                at = row + 1
        self.docs = np.concatenate(docs) if docs else np.zeros(0, np.int64)
        self.lengths = np.concatenate(lengths) if lengths else np.zeros(0, np.int64)

    def _copy(self, begin: int, end: int, ids: list[str]) -> None:
        self._segments.append((len(self.ids), begin, end - begin))
        self.ids.extend(ids[begin:end])
        self.copied += end - begin
        if self._old is None:
            return  # (no chunks.json: the rows are taken from chunks.parquet)
        body, starts = self._old
        first, last = int(starts[begin]), int(starts[end])
        # (the layout must fit the block: its first row's start, and a comma or the
        # rows' end after it; the stage compiles every row again otherwise)
        if not (bytes(body[first:first + len(_row_start(ids[begin]))])
                == _row_start(ids[begin]) and body[last - 1:last] in
                (b",", _JSON_TAIL[:1])):
            raise ValueError("a chunks.json layout that does not fit the file")
        # (less the last comma; copied by the kernel when chunks.json is written)
        self.pieces.append(Span(self._fd, first, body[first:last - 1], self._stamp))

    def natural_starts(self, target: int) -> list[int]:
        """parquet_splice.natural_starts() of the rows' ids: for the rows copied, from
        the previous layout's (each checked to start a group by its CRC); for the rows
        read now, computed. (A CRC of all 70,000 ids took 20 ms of each edit.)"""
        from ..artifacts.parquet_splice import natural_starts, starts_group

        old_ids, old, old_target = self._old_natural
        if old is None or old_target != target or not all(
                starts_group(old_ids[row], target) for row in old.tolist()):
            found = natural_starts(self.ids, target)
        else:
            found = [row for row in self._read if row and starts_group(self.ids[row], target)]
            for first, old_row, count in self._segments:
                begin, end = np.searchsorted(old, [old_row, old_row + count])
                found.extend((old[begin:end] - old_row + first).tolist())
                # (the old first row is never recorded: copied after a row added before
                # it, it starts a group by its CRC like any other)
                if old_row == 0 and count and starts_group(old_ids[0], target):
                    found.append(first)
            found = sorted(row for row in found if row)  # (never the first row)
        self.natural = (found, target)
        return found

    def changed_rows(self, changed: set[str]) -> np.ndarray:
        """Whether each row belongs to one of these documents."""
        return np.array([path in changed for path in self.paths], bool)[self.docs] \
            if self.paths else np.zeros(0, bool)

    def texts(self) -> list[bytes | Span]:
        return self.pieces

    def row(self, index: int) -> dict[str, Any]:
        """Row `index` of the new order, parsed from its text."""
        if index in self._read:
            return json.loads(self._read[index])
        if self._old is None:  # (the stage compiles every row again)
            raise ValueError("a kept chunk row without its chunks.json text")
        row = self.old_row(index)
        body, starts = self._old
        return json.loads(bytes(body[int(starts[row]):int(starts[row + 1]) - 1]))

    @property
    def old_count(self) -> int:
        """The rows of the previous files (0 without their layout)."""
        return self._old_count

    def old_row(self, index: int) -> int | None:
        """Where row `index` of the new order lay in the previous files (None for a row
        read now)."""
        if index in self._read:
            return None
        place = bisect.bisect_right(self._segments, (index, self._old_count + 1)) - 1
        first, old_row, count = self._segments[place]
        return old_row + index - first

    def layout(self, pieces: list[bytes | Span] | None) -> dict[str, Any] | None:
        """Each row's id and document, in order, and where it lies in chunks.json (these
        pieces; None: no chunks.json, and no lengths), for the next compile (its sha256
        is added once it is written); None when an id could not be kept in it (a
        newline)."""
        ids = "\n".join(self.ids)
        if ids.count("\n") != max(len(self.ids) - 1, 0):
            return None
        where = {}
        if pieces is not None:
            size = sum(len(piece.data if isinstance(piece, Span) else piece)
                       for piece in pieces)
            where = {"head": size - _body_size(self.lengths) - len(_JSON_TAIL)}
        return {**where, "paths": self.paths, "ids": ids, "docs": _packed(self.docs),
                "lengths": _packed(self.lengths) if pieces is not None else "",
                **({"natural": _packed(self.natural[0]), "natural_target": self.natural[1]}
                   if self.natural is not None else {})}


def _packed(numbers: np.ndarray) -> str:
    """Non-negative numbers under 2**32 as base64 text, little-endian (a list of 70,000
    in JSON took longer to write and read back)."""
    return base64.b64encode(np.asarray(numbers, "<u4").tobytes()).decode("ascii")


def _unpacked(text: Any) -> np.ndarray | None:
    if not isinstance(text, str):
        return None
    try:
        data = base64.b64decode(text, validate=True)
    except ValueError:
        return None
    if len(data) % 4:
        return None
    return np.frombuffer(data, "<u4").astype(np.int64)


_JSON_TAIL = b"]}\n"  # what chunks_json writes after the rows


def _body_size(lengths: np.ndarray) -> int:
    """The bytes of rows of these lengths, joined by commas."""
    return int(lengths.sum()) + max(0, len(lengths) - 1)


def _recorded_layout(made_from: Any) -> dict | None:
    """The last compile's layout of its rows (ids, docs, lengths and natural starts
    unpacked), when it is well formed; else None."""
    old = made_from.get("json") if isinstance(made_from, dict) else None
    if not isinstance(old, dict):
        return None
    ids, paths = old.get("ids"), old.get("paths")
    docs, lengths = _unpacked(old.get("docs")), _unpacked(old.get("lengths"))
    if not isinstance(ids, str) or docs is None or lengths is None:
        return None
    ids = ids.split("\n") if ids else []
    # (rows that start a row group; malformed, they are found again from the ids)
    natural = _unpacked(old.get("natural"))
    if natural is not None and len(natural) and not (
            int(natural[0]) >= 1 and int(natural[-1]) < len(ids)
            and bool((natural[1:] > natural[:-1]).all())):
        natural = None
    if not (isinstance(paths, list) and len(ids) == len(docs)
            and all(type(p) is str for p in paths)
            and (not len(docs) or int(docs.max()) < len(paths))
            and ids == sorted(ids)):
        return None
    return {**old, "ids": ids, "docs": docs, "lengths": lengths, "natural": natural}


def _previous_json(made_from: Any, path: Path, published: Any = None
                   ) -> tuple[bytes, dict, int, tuple] | None:
    """The previous chunks.json's bytes and layout (_recorded_layout), and the file, open
    (the caller closes it), when it is the file the last compile recorded and the layout
    fits it; else None."""
    old = _recorded_layout(made_from)
    if old is None:
        return None
    lengths, head = old["lengths"], old.get("head")
    if not (len(lengths) == len(old["ids"]) and type(head) is int
            and (not len(lengths) or int(lengths.min()) > 0)):
        return None
    opened = recorded_file(path, old, keep_open=True, published=published)
    if opened is None:
        return None
    data, handle, stamp = opened
    if head < 0 or head + _body_size(lengths) + len(_JSON_TAIL) != len(data):
        os.close(handle)
        return None
    return data, old, handle, stamp


def _previous_layout(made_from: Any, parquet: tuple | None
                     ) -> tuple[None, dict, None, None] | None:
    """The layout of the previous rows alone (no chunks.json to copy them from), when
    the previous chunks.parquet is the file the last compile recorded (`parquet`:
    _previous_chunks) and holds as many rows; else None."""
    old = _recorded_layout(made_from)
    if old is None or parquet is None:
        return None
    groups = compiled_groups(made_from, len(parquet[0]))
    if groups is None or sum(rows for _, rows in groups) != len(old["ids"]):
        return None
    return None, old, None, None


CHUNK_GROUP_ROWS = 512  # rows of chunks.parquet per row group, about


def _chunks_parquet(rows: _ChunkRows, fresh: dict[str, list[dict]], made_from: Any,
                    found: tuple | None, changed: set[str]) -> tuple[list, dict]:
    """chunks.parquet in row groups cut by chunk id (parquet_splice.spaced_starts): the
    previous file's groups whose rows are all unchanged are copied (as spans of it:
    `found`, _previous_chunks, left open for the kernel to copy them), the others
    encoded from the rows (compiled now, taken from the previous file, or parsed from
    their text); every group is encoded when there is no usable previous file. The
    bytes are the same either way. As the pieces to write end to end, and the file's
    layout (parquet_splice.file_record), for the next build to splice it by."""
    import pyarrow as pa

    from ..artifacts.parquet import parquet_groups_bytes
    from ..artifacts.parquet_splice import (
        copied_from,
        group_bytes,
        spaced_starts,
        spacing_of,
        spliced_or_encoded,
    )
    from ..compile.chunks import chunks_table

    keys = rows.ids
    starts = spaced_starts(rows.natural_starts(spacing_of(CHUNK_GROUP_ROWS)), len(keys),
                           CHUNK_GROUP_ROWS)
    compiled = {row["id"]: row for document in fresh.values() for row in document}
    base, piece = None, group_bytes
    if found is not None:
        base = found[0]
        piece = copied_from(*found)
    copied = _CopiedRows.of(base, rows.old_count) if base is not None and rows.old_count \
        else None

    def row(index: int) -> dict[str, Any]:
        return compiled.get(keys[index]) or rows.row(index)

    def group(start: int, end: int):
        """The table of one row group's rows."""
        indexes = range(start, end)
        # Rows kept from the previous build are taken from the previous
        # chunks.parquet as Arrow (parsing their JSON was most of an edit's compile).
        old = {i: rows.old_row(i) for i in indexes if keys[i] not in compiled} \
            if copied is not None else {}
        taken = [i for i in indexes if old.get(i) is not None]
        made = [i for i in indexes if old.get(i) is None]
        table = chunks_table([row(i) for i in made])
        if taken:
            try:
                table = copied.combined([old[i] for i in taken], table, taken, made)
            except pa.ArrowException:  # (a previous file of another schema: from JSON)
                table = chunks_table([row(i) for i in indexes])
        return table

    def encode(ranges: list[tuple[int, int]]) -> bytes:
        # A group at a time: a first build holds one group's table, not all 70,000 rows'
        # (the bytes are those of the whole table cut at the same rows)
        return parquet_groups_bytes(chunks_table([]).schema,
                                    (group(start, end) for start, end in ranges))

    try:
        # (without a previous file, every group is encoded: no row is asked about)
        changed_row = rows.changed_rows(changed) if base is not None else None
        layout = made_from.get("layout") if base is not None else None
        return spliced_or_encoded(base, layout, keys, starts,
                                  lambda start, end: not changed_row[start:end].any(),
                                  encode, piece)
    finally:
        if copied is not None:
            copied.file.close()


class _CopiedRows:
    """Rows of the previous chunks.parquet, read as Arrow a row group at a time."""

    def __init__(self, file: ParquetParts, starts: list[int]) -> None:
        self.file = file
        self.starts = starts  # each group's first row, and the rows in all

    @classmethod
    def of(cls, data: bytes, rows: int) -> _CopiedRows | None:
        """The previous file's rows, when it holds as many as the previous layout (the
        last compile recorded both: they list the same rows, in id order)."""
        try:
            file = ParquetParts(data)
        except (OSError, ValueError):
            return None
        metadata = file.metadata
        starts = [0]
        for index in range(metadata.num_row_groups):
            starts.append(starts[-1] + metadata.row_group(index).num_rows)
        if starts[-1] != rows:
            file.close()
            return None
        return cls(file, starts)

    def combined(self, old_rows: list[int], made, taken: list[int], made_at: list[int]):
        """The table of rows old_rows (of the previous file) and `made` (a table), put
        in the order of their places (taken and made_at: the rows' new indexes)."""
        import pyarrow as pa

        group_of = [bisect.bisect_right(self.starts, row) - 1 for row in old_rows]
        groups = sorted(set(group_of))
        at, read_from = 0, {}  # each group's first row in the groups read, end to end
        for group in groups:
            read_from[group] = at
            at += self.starts[group + 1] - self.starts[group]
        picked = self.file.read_row_groups(groups).take(
            [read_from[group] + row - self.starts[group]
             for row, group in zip(old_rows, group_of, strict=True)])
        # (read back, a list's item is named "element": cast to the schema written)
        both = pa.concat_tables([picked.cast(made.schema), made])
        place = {index: n for n, index in enumerate([*taken, *made_at])}
        # (one chunk per column, as a table made from rows: chunking changes the pages)
        return both.take([place[index] for index in sorted(place)]).combine_chunks()


def _previous_chunks(made_from: Any, path: Path, published: Any = None
                     ) -> tuple[bytes, int, tuple] | None:
    """The previous staged chunks.parquet's bytes, the file open (the caller closes it)
    and its stamp, when it is the file the last compile recorded (by sha256; made_from:
    its record, checked by compile_chunks); else None."""
    if not isinstance(made_from, dict):
        return None
    return recorded_file(path, made_from, keep_open=True, published=published)


def recorded_file(path: Path, record: dict, keep_open: bool = False,
                  published: Any = None):
    """The bytes of a staged file a stage wrote last (record: their sha256), mapped
    (artifacts.io.map_open: a stage reads a few row groups of them and copies the
    others), when they are still those; else None. With keep_open, also the file, open
    for reading (the caller closes it), and its stamp when mapped (artifacts.io.Span).

    They are hashed unless the file has the stamp (size, mtime, ctime, inode) it had
    when the last build published it with that sha256 (`published`, the unit store's
    record of it: remember_published): a published twin edited in place, even to the
    same size and mtime, has another ctime."""
    from ..artifacts.io import map_open, open_no_follow

    sha256 = record.get("sha256")
    if not isinstance(sha256, str):
        return None
    try:
        handle = open_no_follow(path)
    except OSError:
        return None
    try:
        info = os.fstat(handle)
        data = map_open(handle, info)
        if not (read_as_published(published, path.name, data, info, sha256)
                or hashlib.sha256(data).hexdigest() == sha256):
            data = None
    except OSError:
        data = None
    if data is None or not keep_open:
        os.close(handle)
        return data
    return data, handle, file_stamp(info)
