"""Arrow arrays from numpy ones, made from their buffers: pyarrow's own conversion
(pa.array(), or an ndarray given to take()) imports numpy.ma to look for a mask, some
0.1 s once a process, which an edit's build pays in each of its processes."""

from __future__ import annotations

import numpy as np


def from_numpy(values: np.ndarray, kind):
    """A null-free Arrow array of a fixed-width type (pa.int64(), pa.float32()...) with
    the values of a one-dimensional numpy array (converted to that type's dtype)."""
    import pyarrow as pa

    values = np.ascontiguousarray(values, kind.to_pandas_dtype())
    return pa.Array.from_buffers(kind, len(values), [None, pa.py_buffer(values)])


def arrow_reader(data: bytes):
    """A BufferReader over an Arrow-owned copy of data, for pq.ParquetFile. Over the
    Python bytes themselves, the last reference may be dropped by an Arrow worker thread
    after a threaded read returns; that thread then takes the GIL, and if the process is
    exiting just then it aborts ("terminate called without an active exception")."""
    import pyarrow as pa

    buffer = pa.allocate_buffer(len(data))
    np.frombuffer(buffer, np.uint8)[:] = np.frombuffer(data, np.uint8)
    return pa.BufferReader(buffer)
