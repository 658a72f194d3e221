"""Parquet files made from the encoded row groups of earlier ones, without decoding them.

A Parquet file is its row groups' column chunks, one after the other, then a footer (a
Thrift struct, FileMetaData) that says where each chunk starts. A row group's bytes do
not depend on the other row groups, so a file whose row groups are cut at boundaries
that depend only on the rows themselves can be updated by re-encoding just the groups
that changed and copying the others' bytes: the footer is rewritten with the copied
chunks' offsets moved. The result is byte for byte the file pyarrow writes for the whole
table with the same row groups (a test checks it), so an incremental build and a clean
one still agree.

Only what pyarrow writes is read here (files this toolchain made and verified by
digest), and anything unexpected raises SpliceError: the caller then writes the file
whole.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from typing import Any, Callable

MAGIC = b"PAR1"

# Thrift compact protocol type ids.
_STOP, _TRUE, _FALSE, _BYTE, _I16, _I32, _I64, _DOUBLE, _BINARY, _LIST, _SET, _MAP, \
    _STRUCT = range(13)

# Field ids in parquet.thrift.
_FILE_NUM_ROWS, _FILE_ROW_GROUPS = 3, 4
_GROUP_COLUMNS, _GROUP_FILE_OFFSET, _GROUP_ORDINAL = 1, 5, 7
_CHUNK_FILE_OFFSET, _CHUNK_META = 2, 3
_CHUNK_PAGE_INDEX_OFFSETS = (4, 6)  # offset index and column index: not written by us
_META_TOTAL_COMPRESSED = 7
_META_OFFSETS = (9, 10, 11, 14)  # data page, index page, dictionary page, bloom filter


class SpliceError(ValueError):
    """Bytes that are not a Parquet file as this module understands one."""


Struct = list  # [(field id, type, value), ...] in the order written


class _Reader:
    def __init__(self, data: bytes, at: int) -> None:
        self.data, self.at = data, at

    def byte(self) -> int:
        if self.at >= len(self.data):
            raise SpliceError("footer ends early")
        value = self.data[self.at]
        self.at += 1
        return value

    def varint(self) -> int:
        shift = result = 0
        while True:
            byte = self.byte()
            result |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return result
            shift += 7
            if shift > 70:
                raise SpliceError("varint too long")

    def zigzag(self) -> int:
        value = self.varint()
        return (value >> 1) ^ -(value & 1)

    def take(self, size: int) -> bytes:
        if size < 0 or self.at + size > len(self.data):
            raise SpliceError("footer ends early")
        value = self.data[self.at:self.at + size]
        self.at += size
        return value

    def value(self, kind: int, depth: int) -> Any:
        if depth > 32:
            raise SpliceError("footer nested too deep")
        if kind in (_TRUE, _FALSE):  # (a bool inside a list: one byte)
            return self.byte() == 1
        if kind == _BYTE:
            return self.byte()
        if kind in (_I16, _I32, _I64):
            return self.zigzag()
        if kind == _DOUBLE:
            return self.take(8)
        if kind == _BINARY:
            return self.take(self.varint())
        if kind in (_LIST, _SET):
            header = self.byte()
            size, element = header >> 4, header & 0x0F
            if size == 15:
                size = self.varint()
            return (element, [self.value(element, depth + 1) for _ in range(size)])
        if kind == _STRUCT:
            return self.struct(depth + 1)
        raise SpliceError(f"unexpected Thrift type {kind}")

    def struct(self, depth: int = 0) -> Struct:
        fields: Struct = []
        last = 0
        while True:
            header = self.byte()
            kind = header & 0x0F
            if kind == _STOP:
                return fields
            delta = header >> 4
            field_id = last + delta if delta else self.zigzag()
            last = field_id
            if kind == _TRUE or kind == _FALSE:
                fields.append((field_id, kind, kind == _TRUE))
            else:
                fields.append((field_id, kind, self.value(kind, depth)))


def _varint(value: int, out: bytearray) -> None:
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return


def _zigzag(value: int, out: bytearray) -> None:
    _varint((value << 1) ^ (value >> 63), out)


def _write_value(kind: int, value: Any, out: bytearray) -> None:
    if kind in (_TRUE, _FALSE):
        out.append(1 if value else 2)  # as Thrift's C++ writer puts them
    elif kind == _BYTE:
        out.append(value)
    elif kind in (_I16, _I32, _I64):
        _zigzag(value, out)
    elif kind == _DOUBLE:
        out += value
    elif kind == _BINARY:
        _varint(len(value), out)
        out += value
    elif kind in (_LIST, _SET):
        element, items = value
        if len(items) < 15:
            out.append(len(items) << 4 | element)
        else:
            out.append(0xF0 | element)
            _varint(len(items), out)
        for item in items:
            _write_value(element, item, out)
    elif kind == _STRUCT:
        _write_struct(value, out)
    else:
        raise SpliceError(f"unexpected Thrift type {kind}")


def _write_struct(fields: Struct, out: bytearray) -> None:
    last = 0
    for field_id, kind, value in fields:
        if kind in (_TRUE, _FALSE):
            kind = _TRUE if value else _FALSE
        delta = field_id - last
        if 0 < delta <= 15:
            out.append(delta << 4 | kind)
        else:
            out.append(kind)
            _zigzag(field_id, out)
        last = field_id
        if kind not in (_TRUE, _FALSE):
            _write_value(kind, value, out)
    out.append(_STOP)


def encode_struct(fields: Struct) -> bytes:
    out = bytearray()
    _write_struct(fields, out)
    return bytes(out)


def _field(fields: Struct, field_id: int) -> Any:
    for found, _, value in fields:
        if found == field_id:
            return value
    raise SpliceError(f"footer field {field_id} missing")


def _replaced(fields: Struct, field_id: int, value: Any) -> Struct:
    return [(f, k, value if f == field_id else v) for f, k, v in fields]


@dataclass
class Group:
    """One row group of a file: its rows, its bytes' place and its footer entry."""

    data: bytes  # the whole file
    start: int   # where its column chunks begin
    size: int    # their bytes, together
    rows: int
    meta: Struct


@dataclass
class ParquetParts:
    footer: Struct
    groups: list[Group]


def read_parts(data: bytes) -> ParquetParts:
    """The footer and row groups of Parquet bytes (SpliceError unless every row group's
    column chunks lie one after the other, as pyarrow writes them)."""
    if len(data) < 12 or data[:4] != MAGIC or data[-4:] != MAGIC:
        raise SpliceError("not Parquet")
    length = struct.unpack("<I", data[-8:-4])[0]
    start = len(data) - 8 - length
    if start < 4:
        raise SpliceError("footer length out of range")
    reader = _Reader(data, start)
    footer = reader.struct()
    if reader.at != len(data) - 8:
        raise SpliceError("footer length does not match")
    groups = []
    element, row_groups = _field(footer, _FILE_ROW_GROUPS)
    for meta in row_groups:
        _, columns = _field(meta, _GROUP_COLUMNS)
        begin = end = None
        for chunk in columns:
            if any(f in _CHUNK_PAGE_INDEX_OFFSETS for f, _, _ in chunk):
                raise SpliceError("page indexes are not supported")
            column = _field(chunk, _CHUNK_META)
            offsets = [v for f, _, v in column if f in (9, 11)]
            first = min(offsets)
            size = _field(column, _META_TOTAL_COMPRESSED)
            if end is not None and first != end:
                raise SpliceError("column chunks of a row group are not contiguous")
            begin = first if begin is None else begin
            end = first + size
        if begin is None or not 4 <= begin <= end <= start:
            raise SpliceError("row group outside the data")
        groups.append(Group(data, begin, end - begin, _field(meta, 3), meta))
    return ParquetParts(footer, groups)


def _moved(meta: Struct, delta: int, ordinal: int) -> Struct:
    """A row group's footer entry for its bytes moved by delta, as the ordinal-th."""
    moved: Struct = []
    for field_id, kind, value in meta:
        if field_id == _GROUP_COLUMNS:
            element, chunks = value
            value = (element, [_moved_chunk(chunk, delta) for chunk in chunks])
        elif field_id == _GROUP_FILE_OFFSET:
            value += delta
        elif field_id == _GROUP_ORDINAL:
            value = ordinal
        moved.append((field_id, kind, value))
    return moved


def _moved_chunk(chunk: Struct, delta: int) -> Struct:
    out: Struct = []
    for field_id, kind, value in chunk:
        if field_id == _CHUNK_FILE_OFFSET and value:  # (pyarrow writes 0 there)
            value += delta
        elif field_id == _CHUNK_META:
            value = [(f, k, v + delta if f in _META_OFFSETS else v) for f, k, v in value]
        out.append((field_id, kind, value))
    return out


def assemble(groups: list[Group], footer: Struct) -> bytes:
    """A Parquet file of these row groups, in this order, with the footer's other fields
    (schema, key-value metadata, writer) taken from `footer`."""
    out = bytearray(MAGIC)
    entries = []
    for ordinal, group in enumerate(groups):
        delta = len(out) - group.start
        out += group.data[group.start:group.start + group.size]
        entries.append(_moved(group.meta, delta, ordinal))
    element = _field(footer, _FILE_ROW_GROUPS)[0]
    fields = _replaced(footer, _FILE_NUM_ROWS, sum(group.rows for group in groups))
    fields = _replaced(fields, _FILE_ROW_GROUPS, (element, entries))
    encoded = encode_struct(fields)
    out += encoded
    out += struct.pack("<I", len(encoded))
    out += MAGIC
    return bytes(out)


def content_group_starts(keys: list[str], target: int) -> list[int]:
    """The first row of each row group, decided by the rows' keys alone: a group starts
    at a key whose CRC-32 is a multiple of target (so about target rows a group), or
    8 * target rows after the last start. An edit then changes only the groups that hold
    changed rows, and a row added or removed moves no boundary but its own group's."""
    starts = [0] if keys else []
    for index in range(1, len(keys)):
        if zlib.crc32(keys[index].encode("utf-8")) % target == 0 \
                or index - starts[-1] >= 8 * target:
            starts.append(index)
    return starts


def splice(previous: bytes, previous_keys: list[str], keys: list[str], starts: list[int],
           unchanged: Callable[[int], bool],
           encode: Callable[[list[tuple[int, int]]], bytes]) -> bytes:
    """The file of rows `keys`, in row groups from `starts`: a group that holds the same
    keys as one of the previous file's, none of them changed (`unchanged(row)`), is
    copied; the others are encoded together (`encode(ranges)`: Parquet bytes with one
    row group per (start, end) range, in order) and their footer gives the schema and
    metadata. Equal to encoding every group (SpliceError where previous is not such a
    file, and the caller writes it whole)."""
    parts = read_parts(previous)
    if sum(group.rows for group in parts.groups) != len(previous_keys):
        raise SpliceError("previous keys do not match the previous file")
    old: dict[str, tuple[Group, int]] = {}  # first key -> group, its first row
    row = 0
    for group in parts.groups:
        if group.rows:
            old[previous_keys[row]] = (group, row)
        row += group.rows
    chosen: list[Group | None] = []
    ranges = []
    for start, end in zip(starts, [*starts[1:], len(keys)]):
        match = old.get(keys[start])
        if match is not None and match[0].rows == end - start and \
                previous_keys[match[1]:match[1] + end - start] == keys[start:end] and \
                all(unchanged(index) for index in range(start, end)):
            chosen.append(match[0])
        else:
            chosen.append(None)
            ranges.append((start, end))
    fresh = read_parts(encode(ranges))
    if len(fresh.groups) != len(ranges):
        raise SpliceError("encoded row groups do not match the ranges")
    made = iter(fresh.groups)
    return assemble([group if group is not None else next(made) for group in chosen],
                    fresh.footer)
