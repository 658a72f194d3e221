"""Parquet files made from the encoded row groups of earlier ones, without decoding them.

A Parquet file is its row groups' column chunks, one after the other, then a footer (a
Thrift struct, FileMetaData) that says where each chunk starts. A row group's bytes do
not depend on the other row groups, so a file whose row groups are cut at boundaries
that depend only on the rows themselves can be updated by re-encoding just the groups
that changed and copying the others' bytes: the footer is rewritten with the copied
chunks' offsets moved. The result is byte for byte the file pyarrow writes for the whole
table with the same row groups (a test checks it), so an incremental build and a clean
one still agree.

The previous files come from the build itself (a staged file checked by the digest
recorded when it was written) or from the facts ledger (the file whose sha256 the facts
memo records). Their groups are found by walking the footer, or from the record of the
groups made when the file was written (file_record, group_record: each checked against
the file's bytes); rows are copied only where their keys match the recorded ones.
Anything unexpected raises SpliceError, and the caller writes the file whole.
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import struct
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

MAGIC = b"PAR1"

# Thrift compact protocol type ids.
_STOP, _TRUE, _FALSE, _BYTE, _I16, _I32, _I64, _DOUBLE, _BINARY, _LIST, _SET, _MAP, \
    _STRUCT = range(13)
_MAX_DEPTH = 32

# Field ids in parquet.thrift.
_FILE_NUM_ROWS, _FILE_ROW_GROUPS = 3, 4
_GROUP_COLUMNS, _GROUP_NUM_ROWS, _GROUP_FILE_OFFSET, _GROUP_ORDINAL = 1, 3, 5, 7
_CHUNK_FILE_OFFSET, _CHUNK_META = 2, 3
_CHUNK_PAGE_INDEX = (4, 5, 6, 7)  # offset and column index: pyarrow writes none for us
_META_TOTAL_COMPRESSED, _META_DATA_PAGE, _META_DICTIONARY_PAGE = 7, 9, 11
_META_OFFSETS = (_META_DATA_PAGE, _META_DICTIONARY_PAGE)
# Index pages and bloom filters live outside a row group's chunks (pyarrow writes them
# after all groups): a file with them is written whole.
_META_OUTSIDE = (10, 14, 15)
# Footer fields that say how the groups were encoded: a group is copied only under a
# footer that has the same ones (another pyarrow, another schema: written whole).
_FILE_ENCODING = (1, 2, 6, 7)  # version, schema, created_by, column_orders


class SpliceError(ValueError):
    """Bytes that are not a Parquet file as this module understands one."""


# The footer is walked, not decoded: a row group's entry is kept as its bytes plus the
# places of the numbers that change when its column chunks move (offsets, its ordinal).
# Walking is some ten times faster in Python than building the whole structure.

def _varint(data: bytes, at: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        if at >= len(data):
            raise SpliceError("footer ends early")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, at
        shift += 7
        if shift > 70:
            raise SpliceError("varint too long")


def _signed(data: bytes, at: int) -> tuple[int, int]:
    value, at = _varint(data, at)
    return (value >> 1) ^ -(value & 1), at


def _varint_bytes(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _zigzag_bytes(value: int) -> bytes:
    return _varint_bytes((value << 1) ^ (value >> 63))


def _skip(data: bytes, at: int, kind: int, depth: int = 0) -> int:
    """The position after one value of this type."""
    if depth > _MAX_DEPTH:
        raise SpliceError("footer nested too deep")
    if kind in (_TRUE, _FALSE, _BYTE):  # (a bool inside a list is one byte)
        return at + 1
    if kind in (_I16, _I32, _I64):
        return _varint(data, at)[1]
    if kind == _DOUBLE:
        return at + 8
    if kind == _BINARY:
        size, at = _varint(data, at)
        return at + size
    if kind in (_LIST, _SET):
        element, size, at = _list(data, at)
        for _ in range(size):
            at = _skip(data, at, element, depth + 1)
        return at
    if kind == _STRUCT:
        return _walk_struct(data, at, None, depth + 1)
    raise SpliceError(f"unexpected Thrift type {kind}")


def _walk_struct(data: bytes, at: int, visit, depth: int = 0) -> int:
    """Walk the fields of the struct at `at`: visit(field id, type, value position)
    returns the position after the value, or None to have it skipped. Returns the
    position after the struct's stop byte."""
    last = 0
    while True:
        if at >= len(data):
            raise SpliceError("footer ends early")
        header = data[at]
        at += 1
        kind = header & 0x0F
        if kind == _STOP:
            return at
        if header >> 4:
            field_id = last + (header >> 4)
        else:
            field_id, at = _signed(data, at)
        last = field_id
        end = visit(field_id, kind, at) if visit is not None else None
        if end is None:
            end = at if kind in (_TRUE, _FALSE) else _skip(data, at, kind, depth)
        at = end


def _list(data: bytes, at: int) -> tuple[int, int, int]:
    """(element type, count, position of the first element) of a list."""
    if at >= len(data):
        raise SpliceError("footer ends early")
    header = data[at]
    size, element, at = header >> 4, header & 0x0F, at + 1
    if size == 15:
        size, at = _varint(data, at)
    if size > len(data) - at:  # every element takes a byte at least
        raise SpliceError("a list longer than the footer")
    return element, size, at


@dataclass
class Patches:
    """The numbers of a row group's footer entry that change when its column chunks
    move: each one's place in the entry [at, end), whether it is the group's ordinal
    (else a file offset, moved with the chunks), and its value. numpy arrays, so that
    the entries of thousands of groups are read and moved together (_read_patches,
    _moved_entries)."""

    at: Any       # int64
    end: Any      # int64
    ordinal: Any  # bool
    value: Any    # int64

    @classmethod
    def of(cls, items: list[tuple[int, int, bool, int]]) -> Patches:
        import numpy as np

        try:
            rows = np.array(items, np.int64).reshape(-1, 4)
        except OverflowError:
            raise SpliceError("a number of more than 64 bits") from None
        return cls(rows[:, 0].copy(), rows[:, 1].copy(), rows[:, 2].astype(bool),
                   rows[:, 3].copy())


@dataclass
class Group:
    """One row group of a file: its rows, its bytes' place and its footer entry."""

    data: bytes  # the whole file (b"" for a group of a file given as pieces)
    start: int   # where its column chunks begin
    size: int    # their bytes, together
    rows: int
    entry: bytes  # its RowGroup struct, as written
    patches: Patches  # the numbers in entry that a move changes


@dataclass
class ParquetParts:
    footer: list[tuple[int, int, bytes]]  # FileMetaData's fields: (id, type, value bytes)
    groups: list[Group]


def _scan_group(data: bytes, at: int, limit: int) -> tuple[Group, int]:
    """The row group entry at `at` (its data must end by `limit`) and where it ends."""
    patches: list[tuple[int, int, bool, int]] = []  # (start, end, ordinal?, value)
    found = {"rows": None, "begin": None, "end": None}

    def number(value_at: int, ordinal: bool) -> int:
        value, end = _signed(data, value_at)
        patches.append((value_at, end, ordinal, value))
        return end

    def column_meta(field_id: int, kind: int, value_at: int) -> int | None:
        if field_id in _META_OUTSIDE:
            raise SpliceError("index pages and bloom filters are not supported")
        if field_id in _META_OFFSETS and kind == _I64:
            value, end = _signed(data, value_at)
            patches.append((value_at, end, False, value))
            if field_id in (_META_DATA_PAGE, _META_DICTIONARY_PAGE):
                meta["first"] = value if meta["first"] is None else min(meta["first"], value)
            return end
        if field_id == _META_TOTAL_COMPRESSED and kind == _I64:
            meta["size"], end = _signed(data, value_at)
            return end
        return None

    def chunk(field_id: int, kind: int, value_at: int) -> int | None:
        if field_id in _CHUNK_PAGE_INDEX:
            raise SpliceError("page indexes are not supported")
        if field_id == _CHUNK_FILE_OFFSET and kind == _I64:
            value, end = _signed(data, value_at)
            if value:  # (pyarrow writes 0 there)
                patches.append((value_at, end, False, value))
            return end
        if field_id == _CHUNK_META and kind == _STRUCT:
            return _walk_struct(data, value_at, column_meta)
        return None

    def group(field_id: int, kind: int, value_at: int) -> int | None:
        nonlocal meta
        if field_id == _GROUP_COLUMNS and kind == _LIST:
            element, count, at = _list(data, value_at)
            for _ in range(count):
                meta = {"first": None, "size": None}
                at = _walk_struct(data, at, chunk)
                if meta["first"] is None or meta["size"] is None or meta["size"] < 0:
                    raise SpliceError("a column chunk without its offsets")
                if found["end"] is not None and meta["first"] != found["end"]:
                    raise SpliceError("column chunks of a row group are not contiguous")
                if found["begin"] is None:
                    found["begin"] = meta["first"]
                found["end"] = meta["first"] + meta["size"]
            return at
        if field_id == _GROUP_FILE_OFFSET and kind == _I64:
            return number(value_at, False)
        if field_id == _GROUP_ORDINAL and kind == _I16:
            return number(value_at, True)
        if field_id == _GROUP_NUM_ROWS and kind == _I64:
            found["rows"], end = _signed(data, value_at)
            return end
        return None

    meta: dict = {}
    end = _walk_struct(data, at, group)
    begin, stop, rows = found["begin"], found["end"], found["rows"]
    if begin is None or rows is None or rows < 0 or not 4 <= begin <= stop <= limit:
        raise SpliceError("row group outside the data")
    if any(not ordinal and not (begin <= value < stop or value == 0 and stop == begin)
           for _, _, ordinal, value in patches):
        raise SpliceError(_OUTSIDE)
    entry = bytes(data[at:end])  # (data may be a view: the entry is kept as bytes)
    return Group(data, begin, stop - begin, rows, entry,
                 Patches.of([(s - at, e - at, ordinal, value)
                             for s, e, ordinal, value in patches])), end


# Every number moved with a group must point into it (or be the 0 pyarrow writes).
_OUTSIDE = "an offset outside its row group"


def _footer_start(data: bytes) -> int:
    if len(data) < 12 or data[:4] != MAGIC or data[-4:] != MAGIC:
        raise SpliceError("not Parquet")
    start = len(data) - 8 - struct.unpack("<I", data[-8:-4])[0]
    if start < 4:
        raise SpliceError("footer length out of range")
    return start


def read_parts(data: bytes) -> ParquetParts:
    """The footer fields and row groups of Parquet bytes, or of a view of them (cast to
    unsigned bytes), the footer's fields kept as bytes (SpliceError unless every row
    group's column chunks lie one after the other, as pyarrow writes them)."""
    start = _footer_start(data)
    footer: list[tuple[int, int, bytes]] = []
    groups: list[Group] = []

    def field(field_id: int, kind: int, value_at: int) -> int:
        if field_id == _FILE_ROW_GROUPS and kind == _LIST:
            element, count, at = _list(data, value_at)
            if element != _STRUCT:
                raise SpliceError("row groups that are not structs")
            for _ in range(count):
                group, at = _scan_group(data, at, start)
                groups.append(group)
            end = at
        else:
            end = value_at if kind in (_TRUE, _FALSE) else _skip(data, value_at, kind)
        footer.append((field_id, kind, bytes(data[value_at:end])))
        return end

    if _walk_struct(data, start, field) != len(data) - 8:
        raise SpliceError("footer length does not match")
    if not any(field_id == _FILE_ROW_GROUPS for field_id, _, _ in footer):
        raise SpliceError("no row groups in the footer")
    return ParquetParts(footer, groups)


def column_digests(data: bytes, columns: tuple[str, ...]) -> list[str]:
    """For each row group of a Parquet file (its bytes), a digest of its row count and of
    the bytes of these top-level columns' chunks as they lie in the file. A file written
    with fixed options (io.parquet_bytes) encodes equal values as equal bytes, so equal
    digests mean equal values in those columns (other bytes may still hold equal values:
    a reader then only does more work)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    metadata = pq.ParquetFile(pa.BufferReader(data)).metadata
    return group_digests(metadata, range(metadata.num_row_groups), columns, len(data),
                         lambda start, size: data[start:start + size])


def group_digests(metadata, groups: Iterable[int], columns: tuple[str, ...], size: int,
                  read: Callable[[int, int], bytes]) -> list[str]:
    """column_digests() of these row groups of a file of `size` bytes whose Parquet
    metadata this is, reading its bytes by read(start, size)."""
    found = []
    for index in groups:
        group = metadata.row_group(index)
        digest = hashlib.blake2b(str(group.num_rows).encode(), digest_size=16)
        for column in range(group.num_columns):
            chunk = group.column(column)
            if chunk.path_in_schema.split(".")[0] not in columns:
                continue
            start = chunk.dictionary_page_offset if chunk.has_dictionary_page \
                else chunk.data_page_offset
            if not 0 <= start <= start + chunk.total_compressed_size <= size:
                raise SpliceError("a column chunk outside its file")
            digest.update(chunk.path_in_schema.encode() + b"\0")
            digest.update(read(start, chunk.total_compressed_size))
        found.append(digest.hexdigest())
    return found


def group_spans(data: bytes) -> list[tuple[int, int, int]]:
    """(start, size, rows) of each row group of Parquet bytes, from pyarrow's reading of
    the footer (a tenth of the time of walking it here; enough where the groups are only
    looked at, not moved). SpliceError unless each group's column chunks lie together
    inside the data."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    footer_start = _footer_start(data)
    try:
        metadata = pq.ParquetFile(pa.BufferReader(data)).metadata
    except (OSError, ValueError, pa.ArrowException) as error:
        raise SpliceError(f"not Parquet ({error})") from None
    spans = []
    for index in range(metadata.num_row_groups):
        group = metadata.row_group(index)
        begin = end = None
        for column in (group.column(j) for j in range(group.num_columns)):
            first = column.dictionary_page_offset if column.has_dictionary_page else \
                column.data_page_offset
            if end is not None and first != end:
                raise SpliceError("column chunks of a row group are not contiguous")
            begin = first if begin is None else begin
            end = first + column.total_compressed_size
        if begin is None or not 4 <= begin <= end <= footer_start or group.num_rows < 0:
            raise SpliceError("row group outside the data")
        spans.append((begin, end - begin, group.num_rows))
    return spans


def _moved_entries(groups: list[Group], starts: list[int]) -> list[tuple[bytes, Patches]]:
    """Each group's footer entry, and the places of its numbers in it, for its bytes
    moved to starts[i] as the i-th group of a file. All groups' numbers are encoded
    together and written over the old ones where they keep their length (an edit moves
    offsets by far less than they are); an entry whose numbers change length is spliced
    from its bytes and them. A group whose numbers keep their values keeps its entry."""
    import numpy as np

    count = len(groups)
    if not count:
        return []
    counts = np.fromiter((len(g.patches.at) for g in groups), np.int64, count)
    sizes = np.fromiter((len(g.entry) for g in groups), np.int64, count)
    owner = np.repeat(np.arange(count), counts)
    at, end, ordinal, value = (np.concatenate([getattr(g.patches, name) for g in groups])
                               for name in ("at", "end", "ordinal", "value"))
    deltas = np.asarray(starts, np.int64) - np.fromiter((g.start for g in groups), np.int64,
                                                        count)
    moved = np.where(ordinal, owner, value + deltas[owner])
    changed = np.bincount(owner[moved != value], minlength=count) > 0
    zigzag = ((moved << 1) ^ (moved >> 63)).view(np.uint64)
    shifts = np.arange(10, dtype=np.uint64) * np.uint64(7)
    lengths = 1 + (zigzag[:, None] >= (np.uint64(1) << shifts[1:])).sum(axis=1)
    encoded = ((zigzag[:, None] >> shifts) & np.uint64(0x7F)).astype(np.uint8)
    used = np.arange(10) < lengths[:, None]
    encoded[np.arange(10) < (lengths - 1)[:, None]] |= 0x80  # (continuation bits)
    resized = np.bincount(owner[lengths != end - at], minlength=count) > 0
    first, entry_at = _starts(counts), _starts(sizes)
    out = np.frombuffer(b"".join(g.entry for g in groups), np.uint8).copy()
    places = (entry_at[owner] + at)[:, None] + np.arange(10)
    kept = used & ~resized[owner][:, None]  # (a longer number would spill over)
    out[places[kept]] = encoded[kept]
    out_bytes = out.tobytes()
    found = []
    for index, group in enumerate(groups):
        if not changed[index]:
            found.append((group.entry, group.patches))
            continue
        low, high = first[index], first[index + 1]
        if not resized[index]:
            found.append((out_bytes[entry_at[index]:entry_at[index + 1]], Patches(
                at[low:high], end[low:high], ordinal[low:high], moved[low:high])))
            continue
        spliced, new_at, last = bytearray(), [], 0
        for number in range(low, high):
            spliced += group.entry[last:at[number]]
            new_at.append(len(spliced))
            spliced += encoded[number, :lengths[number]].tobytes()
            last = end[number]
        spliced += group.entry[last:]
        places_now = np.array(new_at, np.int64)
        found.append((bytes(spliced), Patches(places_now, places_now + lengths[low:high],
                                                ordinal[low:high], moved[low:high])))
    return found


def _starts(sizes):
    """Where each of items of these sizes starts when they are put end to end, and
    where the last ends (numpy: one more than the sizes)."""
    import numpy as np

    starts = np.zeros(len(sizes) + 1, np.int64)
    np.cumsum(sizes, out=starts[1:])
    return starts


def assemble(groups: list[Group], footer: list[tuple[int, int, bytes]]) -> bytes:
    """A Parquet file of these row groups, in this order, with the footer's other fields
    (schema, key-value metadata, writer) taken from `footer`."""
    return b"".join(assemble_pieces(groups, footer)[0])


def bare_footer(footer: list[tuple[int, int, bytes]]) -> list[tuple[int, int, bytes]]:
    """A footer's fields without its row groups and row count (assemble puts in those of
    the groups it is given): what a file of some of its groups takes."""
    return [(field_id, kind, b"" if field_id in (_FILE_NUM_ROWS, _FILE_ROW_GROUPS)
             else value) for field_id, kind, value in footer]


def footer_record(footer: list[tuple[int, int, bytes]]) -> list[list]:
    """bare_footer() as JSON data (footer_from_record reads it)."""
    return [[field_id, kind, base64.b64encode(value).decode("ascii")]
            for field_id, kind, value in bare_footer(footer)]


def footer_from_record(record: Any) -> list[tuple[int, int, bytes]]:
    """The footer fields footer_record() wrote (SpliceError for anything else)."""
    try:
        footer = [(field_id, kind, base64.b64decode(value, validate=True))
                  for field_id, kind, value in record]
    except (TypeError, ValueError) as error:
        raise SpliceError(f"a footer record that is not one ({error})") from None
    if not all(type(field_id) is int and 0 < field_id < 2 ** 15 and type(kind) is int
               and 0 < kind < 16 for field_id, kind, _ in footer) or \
            [field_id for field_id, _, _ in footer] != sorted({f for f, _, _ in footer}) or \
            not any(field_id == _FILE_ROW_GROUPS for field_id, _, _ in footer):
        raise SpliceError("a footer record that is not one")
    return footer


def group_bytes(group: Group) -> memoryview:
    """A row group's bytes in its file (a view, not a copy)."""
    return memoryview(group.data)[group.start:group.start + group.size]


def copied_from(data: bytes, handle: int, stamp: tuple) -> Callable[[Group], Any]:
    """assemble_pieces' piece for a file spliced from a previous one (its bytes `data`,
    open as `handle`, with files.file_stamp `stamp`): that file's row groups as
    spans of it, which artifacts.io.write_pieces has the kernel copy; others as views."""
    from .io import Span

    def piece(group: Group):
        view = group_bytes(group)
        return Span(handle, group.start, view, stamp) if group.data is data else view

    return piece


def assemble_pieces(groups: list[Group], footer: list[tuple[int, int, bytes]],
                    piece: Callable[[Group], Any] = group_bytes
                    ) -> tuple[list[Any], list[tuple]]:
    """assemble() as the pieces that make the file end to end (each group's
    piece(group): by default a view of its file, not a copy, so that a caller may write
    them without joining them), and each row group's fields as they lie in the new file,
    but its file (start, size, rows, entry, patches: its footer need not be walked to
    splice it again)."""
    pieces: list[Any] = [MAGIC, *map(piece, groups)]
    starts = list(itertools.accumulate((group.size for group in groups), initial=len(MAGIC)))
    del starts[-1]  # (where the last group ends: the footer)
    moved = _moved_entries(groups, starts)
    entries = [entry for entry, _ in moved]
    placed = [(at, group, entry, patches)
              for at, group, (entry, patches) in zip(starts, groups, moved, strict=True)]
    encoded = bytearray()
    last = 0
    for field_id, kind, value in footer:
        delta = field_id - last
        if 0 < delta <= 15:
            encoded.append(delta << 4 | kind)
        else:
            encoded.append(kind)
            encoded += _zigzag_bytes(field_id)
        last = field_id
        if field_id == _FILE_NUM_ROWS:
            value = _zigzag_bytes(sum(group.rows for group in groups))
        elif field_id == _FILE_ROW_GROUPS:
            count = len(entries)
            head = bytes([count << 4 | _STRUCT]) if count < 15 else \
                bytes([0xF0 | _STRUCT]) + _varint_bytes(count)
            value = head + b"".join(entries)
        encoded += value
    encoded.append(_STOP)
    pieces += [bytes(encoded), struct.pack("<I", len(encoded)), MAGIC]
    return pieces, [(start, group.size, group.rows, entry, patches)
                    for start, group, entry, patches in placed]


def group_record(group: Group) -> dict:
    """A row group's place and footer entry as JSON data (groups_from_records reads it).
    Of the numbers a move patches, only their places in the entry are kept (packed, 32
    bits each: place * 2, plus 1 for the ordinal): the numbers are read back from it."""
    places = (group.patches.at * 2 + group.patches.ordinal).astype("<u4").tobytes()
    return {"start": group.start, "size": group.size, "rows": group.rows,
            "entry": base64.b64encode(group.entry).decode("ascii"),
            "places": base64.b64encode(places).decode("ascii")}


def groups_from_records(data: bytes, records: list) -> list[Group]:
    """The row groups group_record()s describe in the file `data`, which lie one after
    the other from the file's start, as pyarrow writes them (SpliceError for records
    that do not fit it). A record may give a group where it lay in an earlier file (its
    bytes since moved whole, as splicing moves them): its entry's numbers are moved with
    it (so a record need not be written again each time an edit before it moves it)."""
    if not isinstance(records, list):
        raise SpliceError("row group records that are not a list")
    fields, entries, places, recorded = [], [], [], []
    at = len(MAGIC)
    for record in records:
        try:
            start, size, rows = (record[name] for name in ("start", "size", "rows"))
            entries.append(base64.b64decode(record["entry"], validate=True))
            places.append(base64.b64decode(record["places"], validate=True))
        except (KeyError, TypeError, ValueError) as error:
            raise SpliceError(f"a row group record that is not one ({error})") from None
        if any(type(n) is not int for n in (start, size, rows)) or not (
                4 <= start and 0 <= size and at + size <= len(data) - 8 and rows >= 0) \
                or len(places[-1]) % 4:
            raise SpliceError("a row group record outside its file")
        recorded.append(start)
        fields.append((at, size, rows))
        at += size
    patches = _read_patches(entries, places, recorded,
                            [start + size for start, (_, size, _) in zip(recorded, fields,
                                                                          strict=True)])
    # (each entry's offsets and ordinal as they are in this file: _moved_entries keeps
    # an entry whose numbers are these already)
    return [Group(data, start, size, rows, entry, numbers) for (start, size, rows),
            (entry, numbers) in zip(fields, _moved_entries(
                [Group(data, start, size, rows, entry, numbers) for start, (_, size, rows),
                 entry, numbers in zip(recorded, fields, entries, patches, strict=True)],
                [start for start, _, _ in fields]), strict=True)]


def _read_patches(entries: list[bytes], places: list[bytes], begins: list[int],
                  stops: list[int]) -> list[Patches]:
    """The numbers at these places (group_record's) of these entries, all groups'
    together; each must be a varint that lies in its entry after the one before it,
    and each offset must point into its group's bytes [begin, stop)."""
    import numpy as np

    count = len(entries)
    if not count:
        return []
    counts = np.fromiter((len(p) // 4 for p in places), np.int64, count)
    sizes = np.fromiter(map(len, entries), np.int64, count)
    owner = np.repeat(np.arange(count), counts)
    words = np.frombuffer(b"".join(places), "<u4").astype(np.int64)
    at, ordinal = words >> 1, (words & 1).astype(bool)
    if (at >= sizes[owner]).any():
        raise SpliceError("a row group record whose numbers are not in its entry")
    joined = np.frombuffer(b"".join(entries) + bytes(10), np.uint8)
    window = joined[(_starts(sizes)[owner] + at)[:, None] + np.arange(10)]
    last_byte = window < 0x80
    lengths = last_byte.argmax(axis=1) + 1
    end = at + lengths
    if not last_byte.any(axis=1).all() or (end > sizes[owner]).any() \
            or ((owner[1:] == owner[:-1]) & (at[1:] < end[:-1])).any() \
            or (window[lengths == 10, 9] > 1).any():  # (more than 64 bits)
        raise SpliceError("a row group record whose numbers are not in its entry")
    payload = (window & 0x7F).astype(np.uint64) << (np.arange(10, dtype=np.uint64) * 7)
    payload[np.arange(10) >= lengths[:, None]] = 0
    raw = np.bitwise_or.reduce(payload, axis=1)
    value = (raw >> np.uint64(1)).astype(np.int64) ^ -(raw & np.uint64(1)).astype(np.int64)
    begin = np.asarray(begins, np.int64)[owner]
    stop = np.asarray(stops, np.int64)[owner]
    if (~ordinal & ~((begin <= value) & (value < stop) | (value == 0) & (stop == begin))
            ).any():
        raise SpliceError(_OUTSIDE)
    pieces = np.cumsum(counts)[:-1]
    return [Patches(*numbers) for numbers in zip(
        *(np.split(column, pieces) for column in (at, end, ordinal, value)), strict=True)]


def encoding_of(footer: list[tuple[int, int, bytes]]) -> str:
    """A digest of the footer fields that say how its groups were encoded: groups are
    copied only into a file whose footer has the same."""
    return hashlib.sha256(repr(_encoding(footer)).encode()).hexdigest()


def starts_group(key: str, target: int) -> bool:
    """Whether a row with this key (not the first) is one of natural_starts(...,
    target)."""
    return zlib.crc32(key.encode("utf-8")) % target == 0


def _encoding(footer: list[tuple[int, int, bytes]]) -> list[tuple[int, int, bytes]]:
    return [field for field in footer if field[0] in _FILE_ENCODING]


def natural_starts(keys: list[str], target: int) -> list[int]:
    """The rows after the first whose key's CRC-32 is a multiple of target (those that
    may start a row group: spaced_starts)."""
    crc32 = zlib.crc32  # (starts_group inline: a call per key was half the time)
    return [index for index, key in enumerate(keys)
            if index and crc32(key.encode("utf-8")) % target == 0]


# The rule spaced_group_starts cuts by, as a memo of groups cut by it names it.
SPACED_RULE = "crc32 % (target / 4), 3 / 4 target apart, 8 target at most"


def spaced_group_starts(keys: list[str], target: int, alone: Iterable[int] = ()
                        ) -> list[int]:
    """The first row of each row group, decided by the rows' keys and the groups before:
    a group starts at a key whose CRC-32 is a multiple of target / 4 once the group
    before holds 3/4 target rows or more, 8 * target rows after the last start where no
    key did, and at each row in `alone` (rows too large to encode again with their
    neighbours) and the row after it. Groups hold about target rows; few hold twice
    that: a changed row's group (chosen by its rows, so the larger ones more often)
    averages some 1.1 target rows, where a group started at each key whose CRC-32 is a
    multiple of target alone (memoryless) averages 2 target rows. The rule looks only
    back: a change moves no start before it, and the starts after it are the old ones
    again from the first old start the new cut meets."""
    if not keys:
        return []
    return spaced_starts(natural_starts(keys, spacing_of(target)), len(keys), target, alone)


def heavy_apart_starts(keys: list[str], sizes, target: int, heavy: int) -> list[int]:
    """spaced_group_starts() of these keys, each row whose size (an array of numbers,
    one a row: a fact's evidence entries, an entity's mentions) is `heavy` or more in a
    row group of its own."""
    import numpy as np

    return spaced_group_starts(keys, target,
                               np.flatnonzero(np.asarray(sizes) >= heavy).tolist())


def spacing_of(target: int) -> int:
    """What a key's CRC-32 is a multiple of where it may start a group of spaced_starts."""
    return max(1, target // 4)


def spaced_starts(candidates: list[int], rows: int, target: int, alone: Iterable[int] = ()
                  ) -> list[int]:
    """spaced_group_starts() of `rows` rows from the rows whose keys may start a group
    (natural_starts(keys, spacing_of(target)))."""
    if not rows:
        return []
    spacing = spacing_of(target)
    least, most = target - spacing, 8 * target
    forced = {row for first in alone for row in (first, first + 1) if 0 < row < rows}
    starts = [0]
    for row in sorted({*candidates, *forced}):
        while starts[-1] + most < row:
            starts.append(starts[-1] + most)
        if row in forced or row - starts[-1] >= least:
            starts.append(row)
    while starts[-1] + most < rows:
        starts.append(starts[-1] + most)
    return starts


def group_ranges(starts: list[int], rows: int) -> list[tuple[int, int]]:
    """(start, end) of each row group, from the groups' first rows."""
    return list(itertools.pairwise([*starts, rows]))


def relative_starts(ranges: list[tuple[int, int]]) -> list[int]:
    """The first rows of these ranges' groups once the ranges are put end to end."""
    starts, at = [], 0
    for start, end in ranges:
        starts.append(at)
        at += end - start
    return starts


def keys_digest(keys: list[str]) -> str:
    """A digest of a row group's keys, in order."""
    return hashlib.blake2b("\0".join(keys).encode("utf-8"), digest_size=16).hexdigest()


def splice(previous: bytes, previous_keys: list[str], keys: list[str], starts: list[int],
           unchanged: Callable[[int, int], bool],
           encode: Callable[[list[tuple[int, int]]], bytes]) -> bytes:
    """The file of rows `keys`, in row groups from `starts`: a group that holds the same
    keys as one of the previous file's, none of them changed (`unchanged(start, end)`:
    of the rows [start, end)), is
    copied; the others are encoded together (`encode(ranges)`: Parquet bytes with one
    row group per (start, end) range, in order) and their footer gives the schema and
    metadata. Equal to encoding every group (SpliceError where previous is not such a
    file, and the caller writes it whole)."""
    parts = read_parts(previous)
    if sum(group.rows for group in parts.groups) != len(previous_keys) or \
            any(group.rows < 0 for group in parts.groups):
        raise SpliceError("previous keys do not match the previous file")
    old: dict[str, tuple[Group, str, str | None]] = {}  # first key -> group, its keys' digest
    row = 0
    for group in parts.groups:
        if group.rows:
            old[previous_keys[row]] = (group, keys_digest(previous_keys[row:row + group.rows]),
                                       None)
        row += group.rows
    return b"".join(_splice(old, encoding_of(parts.footer), keys, starts, unchanged,
                            encode)[0])


def splice_recorded(previous: bytes, record, keys: list[str], starts: list[int],
                    unchanged: Callable[[int, int], bool],
                    encode: Callable[[list[tuple[int, int]]], bytes],
                    piece: Callable[[Group], Any] = group_bytes
                    ) -> tuple[list[Any], dict]:
    """splice() from the file_record() of `previous` instead of its keys and footer
    (neither is read again), as the pieces of the new file (assemble_pieces: each row
    group as piece(group), of `previous` or of the groups encoded now), and the record
    of the new file."""
    from .io import is_sha256

    try:
        encoding = record["encoding"]
        entries = record["groups"]
        groups = groups_from_records(previous, [entry["part"] for entry in entries])
        old = {}
        for entry, group in zip(entries, groups, strict=True):
            first, digest, sha256 = entry["first"], entry["digest"], entry.get("sha256")
            if type(first) is not str or type(digest) is not str:
                raise SpliceError("a row group record that is not one")
            old[first] = (group, digest, sha256 if is_sha256(sha256) else None)
    except (KeyError, TypeError) as error:
        raise SpliceError(f"a file record that is not one ({error})") from None
    pieces, groups, encoding, shas = _splice(old, encoding, keys, starts, unchanged, encode,
                                             piece)
    return pieces, file_record(groups, keys, starts, encoding, shas)


def spliced_or_encoded(previous: bytes | None, record, keys: list[str], starts: list[int],
                       unchanged: Callable[[int, int], bool],
                       encode: Callable[[list[tuple[int, int]]], bytes],
                       piece: Callable[[Group], Any] = group_bytes
                       ) -> tuple[list[Any], dict | None]:
    """splice_recorded() from a previous file and its record; without one, or with a
    record that does not fit it, every group encoded at once (the same bytes). The new
    file's pieces and record (None: a footer this module cannot splice, another
    pyarrow's)."""
    if previous is not None:
        try:
            return splice_recorded(previous, record, keys, starts, unchanged, encode, piece)
        except SpliceError:
            pass  # a record that does not fit the file: every group is encoded
    data = encode(group_ranges(starts, len(keys)))
    try:
        return [data], record_of(data, keys, starts)
    except SpliceError:
        return [data], None


def file_record(groups: list[Group], keys: list[str], starts: list[int], encoding: str,
                shas: list[str]) -> dict:
    """What splice_recorded needs of a file of rows `keys` cut at `starts` (its groups
    as they lie in it, the sha256 of each one's bytes, and encoding_of its footer), as
    JSON data."""
    if not len(groups) == len(starts) == len(shas):
        raise SpliceError("row groups do not match their starts")
    return {"encoding": encoding, "groups": [
        {"first": keys[start], "digest": keys_digest(keys[start:end]), "sha256": sha256,
         "part": group_record(group)}
        for group, sha256, (start, end) in zip(groups, shas,
                                               group_ranges(starts, len(keys)), strict=True)]}


def record_of(data: bytes, keys: list[str], starts: list[int]) -> dict:
    """The file_record of a file written whole (its footer walked once)."""
    parts = read_parts(data)
    return file_record(parts.groups, keys, starts, encoding_of(parts.footer),
                       [hashlib.sha256(group_bytes(group)).hexdigest()
                        for group in parts.groups])


def _splice(old: dict[str, tuple[Group, str, str | None]], encoding: str, keys: list[str],
            starts: list[int], unchanged: Callable[[int, int], bool],
            encode: Callable[[list[tuple[int, int]]], bytes],
            piece: Callable[[Group], Any] = group_bytes
            ) -> tuple[list[Any], list[Group], str, list[str]]:
    """The pieces, groups and encoding of the spliced file, and the sha256 of each of
    its groups' bytes (a copied group's as its record says, else hashed)."""
    chosen: list[tuple[Group, str | None] | None] = []
    ranges = []
    for start, end in group_ranges(starts, len(keys)):
        match = old.get(keys[start])
        if match is not None and match[0].rows == end - start and \
                unchanged(start, end) and \
                match[1] == keys_digest(keys[start:end]):
            chosen.append((match[0], match[2]))
        else:
            chosen.append(None)
            ranges.append((start, end))
    fresh = read_parts(encode(ranges))
    if len(fresh.groups) != len(ranges):
        raise SpliceError("encoded row groups do not match the ranges")
    fresh_encoding = encoding_of(fresh.footer)
    if any(choice is not None for choice in chosen) and encoding != fresh_encoding:
        raise SpliceError("the previous file was written differently")
    made = iter(fresh.groups)
    groups = [choice[0] if choice is not None else next(made) for choice in chosen]
    shas = [choice[1] if choice is not None and choice[1] is not None else
            hashlib.sha256(group_bytes(group)).hexdigest()
            for choice, group in zip(chosen, groups, strict=True)]
    pieces, placed = assemble_pieces(groups, fresh.footer, piece)
    return pieces, [Group(b"", *fields) for fields in placed], fresh_encoding, shas


def replace_runs(previous: list[Group], encoding: str, runs: list[tuple[int, int, int]],
                 parts: ParquetParts) -> tuple[list[bytes | memoryview], list[tuple]]:
    """The file of `previous`'s row groups (written under a footer of this encoding_of)
    with each run [begin, end) of them replaced by the next `count` groups of the file
    read as `parts` (runs: (begin, end, count), in order, apart); the footer's other
    fields come from that file. As assemble_pieces() gives it: the pieces of the file,
    and its groups' fields."""
    if len(parts.groups) != sum(count for _, _, count in runs):
        raise SpliceError("encoded row groups do not match the runs")
    if encoding != encoding_of(parts.footer):
        raise SpliceError("the previous file was written differently")
    made = iter(parts.groups)
    groups: list[Group] = []
    at = 0
    for begin, end, count in runs:
        if not at <= begin <= end <= len(previous):
            raise SpliceError("runs out of order")
        groups.extend(previous[at:begin])
        groups.extend(next(made) for _ in range(count))
        at = end
    groups.extend(previous[at:])
    return assemble_pieces(groups, parts.footer)
