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
