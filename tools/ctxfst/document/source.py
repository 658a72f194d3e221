"""Turning raw bytes into text safely: size, binary, encoding, BOM and line endings."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..diagnostics import Diagnostic, diag

# Far above any real Markdown document; keeps a stray dump from exhausting memory.
MAX_FILE_BYTES = 8 * 1024 * 1024
_BINARY_SNIFF_BYTES = 8192


@dataclass(frozen=True)
class Source:
    """One input file: the path shown in diagnostics and, when already known, its bytes.

    Bytes are given for files read from the git index; otherwise they are read lazily.
    """

    path: str
    fs_path: Path | str | None = None  # (a project's walk gives strings)
    data: bytes | None = None

    def read_bytes(self, limit: int = MAX_FILE_BYTES) -> tuple[bytes | None, Diagnostic | None]:
        data, problem, _ = self.read_with_stat(limit)
        return data, problem

    def read_with_stat(self, limit: int = MAX_FILE_BYTES
                       ) -> tuple[bytes | None, Diagnostic | None, os.stat_result | None]:
        """read_bytes(), and the stat of the file the bytes were read from (one open
        file; None for bytes given, or none read)."""
        if self.data is not None:
            if len(self.data) > limit:
                return None, _too_large(self.path, len(self.data), limit), None
            return self.data, None, None
        assert self.fs_path is not None
        from ..artifacts.io import FileTooLarge, read_regular

        try:
            data, info = read_regular(self.fs_path, limit)
            return data, None, info
        except FileTooLarge as error:
            return None, _too_large(self.path, error.size, limit), None
        except (OSError, ValueError) as error:  # ValueError: a NUL byte in the name
            reason = getattr(error, "strerror", None) or error
            return None, diag("CTX001", f"cannot read file: {reason}", self.path), None


def _too_large(path: str, size: int, limit: int) -> Diagnostic:
    return diag("CTX004", f"file is {size:,} bytes; the limit is {limit:,} bytes", path)


def decode_text(path: str, data: bytes) -> tuple[str | None, Diagnostic | None]:
    """Decode UTF-8 (BOM accepted) and normalise CRLF/CR line endings to LF."""
    nul = data.find(b"\x00", 0, _BINARY_SNIFF_BYTES)
    if nul >= 0:
        line, column = _byte_location(data, nul)
        return None, diag("CTX003", "file contains NUL bytes: it is binary, not Markdown",
                          path, line, column)
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        line, column = _byte_location(data, error.start)
        return None, diag("CTX002", f"invalid UTF-8 byte 0x{data[error.start]:02x} "
                          f"({error.reason})", path, line, column)
    if not text.strip():
        return None, diag("CTX005", "file is empty", path)
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    return text, None


def _byte_location(data: bytes, offset: int) -> tuple[int, int]:
    line_start = data.rfind(b"\n", 0, offset) + 1
    line = data.count(b"\n", 0, offset) + 1
    column = len(data[line_start:offset].decode("utf-8", errors="replace")) + 1
    return line, column


def load_text(source: Source) -> tuple[str | None, Diagnostic | None]:
    data, problem = source.read_bytes()
    if problem is not None:
        return None, problem
    assert data is not None
    return decode_text(source.path, data)
