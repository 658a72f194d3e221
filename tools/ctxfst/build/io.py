"""Deterministic, atomic artifact I/O."""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import stat
from pathlib import Path
from typing import Any


def write_atomic(path: Path, data: bytes) -> None:
    """Write data to path so that readers see the old file or the new one, never half.

    Temp file in the same directory, fsync, rename, fsync the directory. A new file gets
    the mode the umask gives (the kernel applies it: mkstemp's 0600 would not); a file
    rewritten keeps its permissions.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        existing = os.lstat(path)
        mode = stat.S_IMODE(existing.st_mode) & 0o777 if stat.S_ISREG(existing.st_mode) \
            else None
    except FileNotFoundError:
        mode = None
    handle, temp = _create_temp(path)
    try:
        with os.fdopen(handle, "wb") as out:
            if mode is not None:
                os.fchmod(out.fileno(), mode)
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


def _create_temp(path: Path) -> tuple[int, str]:
    """A new temp file beside path, created 0666 so that the umask decides its mode."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    while True:
        temp = os.path.join(path.parent, f".{path.name}.{secrets.token_hex(6)}.tmp")
        try:
            return os.open(temp, flags, 0o666), temp
        except FileExistsError:
            continue


def open_no_follow(path: Path, flags: int = os.O_RDONLY, mode: int = 0o666) -> int:
    """os.open that refuses a symbolic link as the last component (OSError ELOOP), so a
    planted link never makes us read, append to or truncate a file elsewhere."""
    return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode)


def read_bytes_no_follow(path: Path) -> bytes:
    with os.fdopen(open_no_follow(path), "rb") as handle:
        return handle.read()


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
