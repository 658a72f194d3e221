"""Arrow from what a build holds in memory: arrays from numpy ones, made from their
buffers (pyarrow's own conversion, pa.array() or an ndarray given to take(), imports
numpy.ma to look for a mask, some 0.1 s once a process, which an edit's build pays in
each of its processes), and Parquet files read from their bytes."""

from __future__ import annotations

import io
from typing import Any

import numpy as np


def from_numpy(values: np.ndarray, kind):
    """A null-free Arrow array of a fixed-width type (pa.int64(), pa.float32()...) with
    the values of a one-dimensional numpy array (converted to that type's dtype)."""
    import pyarrow as pa

    values = np.ascontiguousarray(values, kind.to_pandas_dtype())
    return pa.Array.from_buffers(kind, len(values), [None, pa.py_buffer(values)])


class _NoPandas:
    """A finder that refuses pandas (skip_pandas_probe)."""

    def find_spec(self, name: str, path=None, target=None):
        if name == "pandas" or name.startswith("pandas."):
            raise ImportError("pandas is not probed for here")
        return None


def skip_pandas_probe() -> None:
    """Answer pyarrow's probe for pandas with "not installed". pyarrow imports pandas
    (0.2 s) the first time it makes an array from Python objects, only to see whether
    they are pandas objects, and a build makes none; its explicit conversions
    (to_pandas, from_pandas) still import pandas when called."""
    import sys

    if "pandas" in sys.modules:
        return  # (imported already: nothing left to save)
    import pyarrow as pa

    finder = _NoPandas()
    sys.meta_path.insert(0, finder)
    try:
        pa.array([0])  # (the probe, answered once for the process)
    finally:
        sys.meta_path.remove(finder)


def arrow_reader(data: bytes):
    """A BufferReader over an Arrow-owned copy of data, for pq.ParquetFile. Over the
    Python bytes themselves, the last reference may be dropped by an Arrow worker thread
    after a threaded read returns; that thread then takes the GIL, and if the process is
    exiting just then it aborts ("terminate called without an active exception")."""
    import pyarrow as pa

    buffer = pa.allocate_buffer(len(data))
    np.frombuffer(buffer, np.uint8)[:] = np.frombuffer(data, np.uint8)
    return pa.BufferReader(buffer)


class _BufferFile(io.RawIOBase):
    """A read-only file over a buffer (bytes, a map), that copies out only the ranges
    read from it (io.BytesIO copies any buffer but bytes whole)."""

    def __init__(self, data: bytes | Any) -> None:
        super().__init__()
        self._view = memoryview(data).cast("B")
        self._at = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._at

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._at, io.SEEK_END: len(self._view)}[whence]
        if base + offset < 0:
            raise ValueError("a seek before the start")
        self._at = base + offset
        return self._at

    def readinto(self, buffer) -> int:
        part = self._view[self._at:self._at + len(buffer)]
        buffer[:len(part)] = part
        self._at += len(part)
        return len(part)

    def close(self) -> None:
        if not self.closed:
            self._view.release()
        super().close()


class ParquetParts:
    """A Parquet file held in memory or mapped, read a part at a time: its footer and the
    columns or row groups asked for are copied out for Arrow, not the whole file
    (arrow_reader's copy of a 350 MB chunks.parquet took 0.3 s of an edit at 100,000
    documents). Reads run in this thread, so no Arrow worker ever holds a Python object
    (arrow_reader)."""

    def __init__(self, data: bytes | Any) -> None:
        """data: the file's bytes, or any buffer of them (a map: artifacts.io.map_regular)."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        self._source = _BufferFile(data)
        try:
            self._file = pq.ParquetFile(pa.PythonFile(self._source, mode="r"))
        except BaseException:
            self._source.close()
            raise

    @property
    def metadata(self):
        return self._file.metadata

    @property
    def schema_arrow(self):
        return self._file.schema_arrow

    def read(self, columns: list[str] | None = None):
        return self._file.read(columns=columns, use_threads=False)

    def read_row_groups(self, groups: list[int], columns: list[str] | None = None):
        return self._file.read_row_groups(groups, columns=columns, use_threads=False)

    def close(self) -> None:
        self._file.close()
        self._source.close()

    def __enter__(self) -> ParquetParts:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class GroupsFile:
    """ParquetParts of a file whose row groups and other footer fields are known
    (parquet_splice: a memo's records): the groups asked for are read through a small
    file of them alone, so the file's own footer (12 MB in the facts ledger of 100,000
    documents: 0.1 s to parse) is parsed only for what needs the whole file."""

    def __init__(self, data: bytes | Any, groups: list, footer: list) -> None:
        self._data, self._groups, self._footer = data, groups, footer
        self._whole: ParquetParts | None = None

    def _of(self, groups: list[int]) -> ParquetParts:
        from .parquet_splice import assemble

        return ParquetParts(assemble([self._groups[group] for group in groups], self._footer))

    @property
    def schema_arrow(self):
        with self._of([]) as parts:
            return parts.schema_arrow

    def read_row_groups(self, groups: list[int], columns: list[str] | None = None):
        with self._of(groups) as parts:
            return parts.read_row_groups(list(range(len(groups))), columns)

    def _file(self) -> ParquetParts:
        if self._whole is None:
            self._whole = ParquetParts(self._data)
        return self._whole

    @property
    def metadata(self):
        return self._file().metadata

    def read(self, columns: list[str] | None = None):
        return self._file().read(columns)

    def close(self) -> None:
        if self._whole is not None:
            self._whole.close()
