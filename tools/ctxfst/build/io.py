"""Deterministic, atomic artifact I/O."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any


def write_atomic(path: Path, data: bytes) -> None:
    """Write data to path so that readers see the old file or the new one, never half.

    Temp file in the same directory, fsync, rename, fsync the directory.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temp, path)
    except BaseException:
        try:
            os.unlink(temp)
        except FileNotFoundError:
            pass
        raise
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def json_bytes(payload: Any, compact: bool = False) -> bytes:
    """Canonical JSON text: stable key order as built, UTF-8, trailing newline.

    compact uses json's C encoder (indenting forces the slow pure-Python one).
    """
    layout = {"separators": (",", ":")} if compact else {"indent": 2}
    return (json.dumps(payload, ensure_ascii=False, allow_nan=False, **layout) + "\n").encode()


def write_json(path: Path, payload: Any, compact: bool = False) -> None:
    write_atomic(path, json_bytes(payload, compact))


def read_json(path: Path) -> Any:
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def parquet_bytes(table) -> bytes:
    """Parquet with fixed writer options, so equal tables give equal bytes."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd", compression_level=3, use_dictionary=True,
                   write_statistics=True, data_page_version="2.0", version="2.6",
                   store_schema=True)
    return sink.getvalue().to_pybytes()


def write_parquet(path: Path, table) -> None:
    write_atomic(path, parquet_bytes(table))


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
