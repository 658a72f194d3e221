"""The artifact writers' encodings: the same text as the standard library's."""

from __future__ import annotations

import contextlib
import enum
import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxfst.artifacts.io import indented_json, json_bytes

_SCALARS = (st.none() | st.booleans() | st.integers() | st.text()
            | st.floats(allow_nan=False, allow_infinity=False))
_KEYS = st.text() | st.integers() | st.booleans() | st.none() | \
    st.floats(allow_nan=False, allow_infinity=False)
_VALUES = st.recursive(_SCALARS, lambda inner: st.lists(inner, max_size=5)
                       | st.tuples(inner, inner)
                       | st.dictionaries(_KEYS, inner, max_size=5), max_leaves=40)


@settings(max_examples=400, deadline=None)
@given(_VALUES)
def test_indented_json_is_the_standard_librarys_text(value):
    assert indented_json(value) == json.dumps(value, ensure_ascii=False, allow_nan=False,
                                              indent=2)
    assert json_bytes(value) == (json.dumps(value, ensure_ascii=False, allow_nan=False,
                                            indent=2) + "\n").encode("utf-8")


@pytest.mark.parametrize("value", [
    [{"path": "a},\n    {b", "sha256": "}]", "bytes": 3}, {"path": "{", "n": None}],
    {"inputs": [{"x": 1.5, 2: True}], "artifacts": [{"inputs": ["a", "b"]}] * 2},
    [{"only": "one"}], [{"a": 1}, {}], [{"a": [1]}], [{"a": 1}, "x"],
])
def test_lists_of_records_and_repeated_lists_encode_as_the_standard_library(value):
    assert indented_json(value) == json.dumps(value, ensure_ascii=False, indent=2)


class _Level(enum.IntEnum):
    HIGH = 3


def test_subclasses_encode_as_their_base_type():
    value = {"level": _Level.HIGH, "lines": ["a", _Level.HIGH, "\u2028"], _Level.HIGH: "x"}
    assert indented_json(value) == json.dumps(value, ensure_ascii=False, indent=2)


@pytest.mark.parametrize("bad", [math.nan, [math.inf], {"x": -math.inf}])
def test_non_finite_numbers_are_refused(bad):
    with pytest.raises(ValueError):
        indented_json(bad)


@pytest.mark.parametrize("bad", [{1, 2}, [object()], {"x": b"bytes"}, {(1, 2): "tuple key"}])
def test_what_json_cannot_encode_is_refused(bad):
    with pytest.raises(TypeError):
        indented_json(bad)


def _made(pieces, span) -> tuple[list, bytes]:
    """The pieces to write (("bytes", data) as it is; ("span" or "file", offset, size) as
    span(offset, size) gives it, with its bytes) and the bytes they stand for."""
    made, expected = [], b""
    for piece in pieces:
        piece, data = (piece[1], piece[1]) if piece[0] == "bytes" else span(*piece[1:])
        made.append(piece)
        expected += data
    return made, expected


def _written(path, made: list, kernel_copies: bool) -> str:
    """write_pieces(path, made), where the kernel copies or cannot (another file system)."""
    import os
    from unittest import mock

    from ctxfst.artifacts.io import write_pieces

    no_copy = OSError(18, "cross-device")
    with mock.patch.object(os, "copy_file_range", side_effect=no_copy) if not \
            kernel_copies else contextlib.nullcontext():
        return write_pieces(path, made)


_PIECES = st.lists(st.one_of(st.binary(max_size=40).map(lambda data: ("bytes", data)),
                             st.tuples(st.just("span"), st.integers(0, 300),
                                       st.integers(0, 120))), max_size=12)


@settings(max_examples=150, deadline=None)
@given(_PIECES, st.booleans())
def test_a_file_written_from_pieces_and_spans_is_their_bytes_end_to_end(
        tmp_path_factory, pieces, kernel_copies):
    """write_pieces: bytes written, spans of another open file copied by the kernel (or
    written from memory where it cannot copy, or past the end of the file); the file
    and its sha256 are those of the pieces joined, and recorded as written."""
    import hashlib
    import os

    from ctxfst.artifacts.io import Span, recording_writes
    from ctxfst.files import file_stamp

    folder = tmp_path_factory.mktemp("pieces")
    source_bytes = bytes(range(256)) * 1 + b"tail"  # 260 bytes: spans may run past it
    (folder / "source").write_bytes(source_bytes)
    handle = os.open(folder / "source", os.O_RDONLY)
    stamp = file_stamp(os.fstat(handle))
    padded = source_bytes + bytes(500)  # what a span past the end stands for in memory
    try:
        made, expected = _made(pieces, lambda offset, size: (
            Span(handle, offset, memoryview(padded)[offset:offset + size], stamp),
            padded[offset:offset + size]))
        with recording_writes() as written:
            digest = _written(folder / "out", made, kernel_copies)
    finally:
        os.close(handle)
    assert (folder / "out").read_bytes() == expected
    assert digest == hashlib.sha256(expected).hexdigest()
    assert written[str(folder / "out")]["sha256"] == digest


_FILE_PIECES = st.lists(st.one_of(
    st.binary(max_size=40).map(lambda data: ("bytes", data)),
    st.tuples(st.just("file"), st.integers(0, 260), st.integers(0, 260)).map(
        lambda piece: (piece[0], piece[1], min(piece[2], 260 - piece[1])))), max_size=12)


@settings(max_examples=100, deadline=None)
@given(_FILE_PIECES, st.booleans())
def test_a_file_written_from_file_spans_is_their_bytes_end_to_end(
        tmp_path_factory, pieces, kernel_copies):
    """write_pieces: FileSpans of a temporary file are copied by the kernel (or read and
    written where it cannot copy) and hashed by reading them: the file and its sha256
    are those of the pieces joined."""
    import hashlib
    import os
    import tempfile

    from ctxfst.artifacts.io import FileSpan

    folder = tmp_path_factory.mktemp("file-spans")
    source_bytes = bytes(range(256)) + b"tail"
    with tempfile.TemporaryFile(dir=folder) as source:
        source.write(source_bytes)
        source.flush()
        made, expected = _made(pieces, lambda offset, size: (
            FileSpan(source, offset, size), source_bytes[offset:offset + size]))
        digest = _written(folder / "out", made, kernel_copies)
    assert (folder / "out").read_bytes() == expected
    assert digest == hashlib.sha256(expected).hexdigest()
    assert os.listdir(folder) == ["out"]


def test_a_file_span_past_its_files_end_is_an_error_and_writes_nothing(tmp_path):
    import tempfile

    from ctxfst.artifacts.io import FileSpan, write_pieces

    with tempfile.TemporaryFile(dir=tmp_path) as source:
        source.write(b"0123456789")
        source.flush()
        with pytest.raises(OSError):
            write_pieces(tmp_path / "out", [b"head", FileSpan(source, 4, 20)])
    assert not (tmp_path / "out").exists()
    assert [path.name for path in tmp_path.iterdir()] == []


def test_spans_of_a_file_written_in_place_since_it_was_read_are_written_from_memory(
        tmp_path):
    """The digest is of the bytes read; a source edited in place before the copy (a
    published twin, the same file) must not put other bytes under that digest."""
    import hashlib
    import os
    import time

    from ctxfst.artifacts.io import Span, write_pieces
    from ctxfst.files import file_stamp

    source = tmp_path / "source"
    source.write_bytes(b"0123456789" * 1000)
    handle = os.open(source, os.O_RDONLY)
    try:
        read = os.pread(handle, 10_000, 0)
        stamp = file_stamp(os.fstat(handle))
        time.sleep(0.01)
        with open(source, "r+b") as edit:  # the same size, in place
            edit.write(b"X" * 10)
        pieces = [b"[", Span(handle, 0, memoryview(read), stamp), b"]"]
        digest = write_pieces(tmp_path / "out", pieces)
    finally:
        os.close(handle)
    assert (tmp_path / "out").read_bytes() == b"[" + read + b"]"
    assert digest == hashlib.sha256(b"[" + read + b"]").hexdigest()


@pytest.mark.parametrize("kernel_copies", [True, False])
def test_copy_atomic_copies_a_file_and_refuses_a_link(tmp_path, kernel_copies):
    import hashlib
    import os
    from unittest import mock

    from ctxfst.artifacts.io import NotAFile, copy_atomic, recording_writes

    data = os.urandom(3 << 20) + b"end"
    (tmp_path / "source").write_bytes(data)
    (tmp_path / "target").write_bytes(b"old")
    patch = mock.patch.object(os, "copy_file_range", side_effect=OSError(38, "no")) \
        if not kernel_copies else contextlib.nullcontext()
    with patch, recording_writes() as written:
        copy_atomic(tmp_path / "source", tmp_path / "target")
    assert (tmp_path / "target").read_bytes() == data
    assert written[str(tmp_path / "target")]["sha256"] == hashlib.sha256(data).hexdigest()
    (tmp_path / "link").symlink_to(tmp_path / "source")
    with pytest.raises(NotAFile):
        copy_atomic(tmp_path / "link", tmp_path / "target")
    assert (tmp_path / "target").read_bytes() == data


def test_a_mapped_parquet_file_reads_as_its_bytes_and_a_fifo_is_refused(tmp_path):
    import os

    import pyarrow as pa
    import pyarrow.parquet as pq

    from ctxfst.artifacts.arrays import ParquetParts
    from ctxfst.artifacts.io import NotAFile, map_open, map_regular, write_pieces

    table = pa.table({"id": [f"row-{n:05d}" for n in range(3000)],
                      "value": list(range(3000))})
    pq.write_table(table, tmp_path / "file.parquet", row_group_size=700)
    mapped, info = map_regular(tmp_path / "file.parquet")
    assert info.st_size == len(mapped) == (tmp_path / "file.parquet").stat().st_size
    with ParquetParts(mapped) as parts, \
            ParquetParts((tmp_path / "file.parquet").read_bytes()) as whole:
        assert parts.metadata.num_row_groups == 5
        assert parts.read_row_groups([1, 3]) == whole.read_row_groups([1, 3]) \
            == pa.concat_tables([table.slice(700, 700), table.slice(2100, 700)])
        assert parts.read(["value"]) == table.select(["value"])
    # a view of the map is written as its bytes (what the facts stage copies of a ledger)
    write_pieces(tmp_path / "copy", [b"<", memoryview(mapped)[100:5000], b">"])
    assert (tmp_path / "copy").read_bytes() == \
        b"<" + (tmp_path / "file.parquet").read_bytes()[100:5000] + b">"
    (tmp_path / "empty").write_bytes(b"")
    assert map_regular(tmp_path / "empty")[0] == b""
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(NotAFile):
        map_regular(tmp_path / "fifo")
    # a staged artifact is mapped without following links
    (tmp_path / "link").symlink_to(tmp_path / "file.parquet")
    assert len(map_regular(tmp_path / "link")[0]) == info.st_size
    with pytest.raises(NotAFile):
        map_regular(tmp_path / "link", follow_links=False)
    # a file cut short between its stat and its map: an OSError, as a failed read
    handle = os.open(tmp_path / "copy", os.O_RDWR)
    try:
        stale = os.fstat(handle)
        os.ftruncate(handle, 10)
        with pytest.raises(OSError):
            map_open(handle, stale)
    finally:
        os.close(handle)
