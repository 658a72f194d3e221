"""Parquet as the build writes it: fixed writer options, so that equal tables give equal
bytes (and row groups that parquet_splice can reuse)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .io import FileSpan, write_atomic
from .parquet_splice import (
    Group,
    SpliceError,
    assemble_pieces,
    bare_footer,
    encoding_of,
    group_bytes,
    group_ranges,
    read_parts,
)


def parquet_bytes(table, dictionary: bool = True, group_starts: list[int] | None = None
                  ) -> bytes:
    """Parquet with fixed writer options, so equal tables give equal bytes. dictionary:
    False for columns of unique values (ids, vectors), where it only costs time.
    group_starts: the first row of each row group (else one group), for files updated by
    splicing their row groups (parquet_splice.py)."""
    starts = [0] if group_starts is None else group_starts
    return parquet_groups_bytes(table.schema, (
        table.slice(start, end - start) for start, end in group_ranges(starts, table.num_rows)),
        dictionary)


def parquet_groups_bytes(schema, groups: Iterable[Any], dictionary: bool = True) -> bytes:
    """parquet_bytes() of the tables `groups` put end to end, each one row group, made
    one at a time (a file larger than memory allows as one table)."""
    return _files_of_groups([schema], ((group,) for group in groups), dictionary)[0]


def _files_of_groups(schemas: list, groups: Iterable[tuple], dictionary: bool,
                     views: bool = False, into: list | None = None) -> list:
    """One file for each schema, each of `groups` giving every file its next row group.
    views: each file as a view of the buffer Arrow wrote it in, not copied into bytes.
    into: open binary files to write them in (returned), not memory (views unused)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    sinks = [pa.BufferOutputStream() for _ in schemas] if into is None else \
        [_sink_of(file) for file in into]
    writers = [pq.ParquetWriter(sink, schema, compression="zstd", compression_level=3,
                                use_dictionary=dictionary, write_statistics=True,
                                data_page_version="2.0", version="2.6", store_schema=True)
               for sink, schema in zip(sinks, schemas, strict=True)]
    try:
        for tables in groups:
            for writer, table in zip(writers, tables, strict=True):
                writer.write_table(table, row_group_size=max(1, table.num_rows))
    finally:
        for writer in writers:
            writer.close()
    if into is not None:
        for sink, file in zip(sinks, into, strict=True):
            if isinstance(sink, pa.OSFile):
                sink.close()
            file.flush()  # (read back by its descriptor)
        return into
    if views:  # (bytes that read_parts and write_pieces take as they take bytes)
        return [memoryview(sink.getvalue()).cast("B") for sink in sinks]
    return [sink.getvalue().to_pybytes() for sink in sinks]


_OPEN_FILES = "/proc/self/fd"  # where the system names this process's open files


def _sink_of(file):
    """An Arrow sink that writes into an open binary file: the file opened again by
    Arrow where the system names open files (/proc/self/fd), so that no write takes the
    GIL (through the Python file each one did: the encoding threads' writes took 30 %
    longer); else the Python file itself."""
    import pyarrow as pa

    try:
        return pa.OSFile(f"{_OPEN_FILES}/{file.fileno()}", "wb")
    except OSError:  # (no such names here)
        return pa.PythonFile(file, mode="w")


def parquet_groups_bytes_threaded(schema, count: int, group: Callable[[int], Any],
                                  dictionary: bool = True) -> bytes:
    """parquet_groups_bytes() of the tables group(0) .. group(count - 1), a run of them
    encoded in each of a few threads (Arrow encodes, and group should make its table,
    without holding the GIL; threads, not forked workers, so no process holds a second
    copy of the caller's memory) and the runs' row groups put together
    (parquet_splice): the same bytes, in a fraction of the time where cores are free."""
    return parquet_files_threaded([schema], count, lambda number: (group(number),),
                                  dictionary)[0]


def parquet_files_threaded(schemas: list, count: int, groups: Callable[[int], tuple],
                           dictionary: bool = True) -> list[bytes]:
    """parquet_groups_bytes_threaded() of several files at once: groups(number) gives the
    number-th row group of each (files whose groups are made from the same data, made
    once)."""
    return [b"".join(made.pieces) for made in
            parquet_pieces_threaded(schemas, count, groups, dictionary)]


@dataclass
class Pieces:
    """A Parquet file as the pieces that make it end to end, with its encoding
    (parquet_splice.encoding_of) and row groups as they lie in it; those two None where
    this toolchain cannot read its footer."""

    pieces: list[Any]
    encoding: str | None
    groups: list[Group] | None
    footer: list[tuple[int, int, bytes]] | None = None  # (parquet_splice.bare_footer)


def pieces_of(data: bytes) -> Pieces:
    """A whole file's bytes as Pieces (its footer read by parquet_splice)."""
    try:
        parts = read_parts(data)
    except SpliceError:
        return Pieces([data], None, None)
    return Pieces([data], encoding_of(parts.footer), parts.groups, bare_footer(parts.footer))


def parquet_pieces_threaded(schemas: list, count: int, groups: Callable[[int], tuple],
                            dictionary: bool = True, spill: Path | None = None
                            ) -> list[Pieces]:
    """parquet_files_threaded()'s files as Pieces: views of the buffers the threads
    encoded them in, neither copied into bytes nor joined (each a copy of the files:
    490 MB at 100,000 documents' facts). spill: a folder where the threads write them
    in temporary files instead (gone once closed), the pieces then FileSpans of those,
    which write_pieces copies and hashes without holding them."""
    import mmap
    import tempfile
    from concurrent.futures import ThreadPoolExecutor

    from ..collector import return_free_memory
    from ..parallel import worker_count

    def encoded(numbers: range, spilled: bool = spill is not None) -> list:
        into = [tempfile.TemporaryFile(dir=spill) for _ in schemas] if spilled else None
        try:
            return _files_of_groups(schemas, (groups(number) for number in numbers),
                                    dictionary, views=not spilled, into=into)
        except BaseException:
            for file in into or ():
                file.close()
            raise
        finally:
            return_free_memory()  # (what making its groups' tables left, in this thread)

    workers = worker_count()
    share = -(-count // workers) if count else 1
    runs = [range(start, min(start + share, count)) for start in range(0, count, share)]
    if len(runs) < 2 and spill is None:
        return [pieces_of(data) for data in encoded(range(count))]
    with ThreadPoolExecutor(workers) as pool:
        parts = list(pool.map(encoded, runs or [range(0)]))
    files = []
    for made in zip(*parts, strict=True):
        # a spilled file is read through a mapping for its footer alone (its groups'
        # bytes are neither read nor held: FileSpans)
        views = [mmap.mmap(part.fileno(), 0, access=mmap.ACCESS_READ) if spill else part
                 for part in made]
        read: list = []
        try:
            read = [read_parts(view) for view in views]
            file_of = {id(view): part for view, part in zip(views, made, strict=True)}
            encoding, footer = encoding_of(read[-1].footer), bare_footer(read[-1].footer)
            pieces, placed = assemble_pieces(
                [found for part in read for found in part.groups], read[-1].footer,
                (lambda group, file_of=file_of: FileSpan(file_of[id(group.data)],
                                                         group.start, group.size))
                if spill else group_bytes)
        except SpliceError:  # a footer this toolchain cannot put together: encoded at once
            return [pieces_of(data) for data in encoded(range(count), spilled=False)]
        finally:
            if spill:
                read = []  # (its groups name the mappings)
                for view in views:
                    view.close()
        files.append(Pieces(pieces, encoding, [Group(b"", *fields) for fields in placed],
                            footer))
    return files


def write_parquet(path: Path, table, dictionary: bool = True) -> None:
    write_atomic(path, parquet_bytes(table, dictionary))
