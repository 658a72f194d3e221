"""Rows of the parse cache: a document's syntax pass as plain JSON, checked on read.

The cache ships with the knowledge base, so a row may come from a stranger who knows its
key (a hash of the path and bytes). It holds data only, and a row of any other shape than
the one written here is a miss: the document is parsed again. Paths are not stored; the
reading file's own path is used. What YAML can hold in a frontmatter is already JSON
(yamlpos keeps dates as text, keys as text, refuses nan, inf and binary), so values need
no tags; only the checks JSON does not make are made here: nesting depth, finite numbers
and no lone surrogates.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from ..artifacts.io import is_sha256
from ..diagnostics import diagnostics_from_rows
from .model import ChunkBody, ParsedDocument
from .yamlpos import MAX_DEPTH, SourceMap

# A \u escape of a lone surrogate: no file can hold one, and output would fail on it.
# (The encoder writes text as UTF-8, so a literal "\\ud8" in a text is the only false
# alarm: a miss.)
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
# ParsedDocument fields a row holds, and those the typing pass fills later (empty here);
# a test fails when the model gains a field, so that the row format is told about it.
ROW_FIELDS = ("frontmatter", "source_map", "bodies", "diagnostics", "text_sha256")
READER_FIELDS = ("path", "fs_path")  # the reading file's own
TYPED_FIELDS = ("title", "entities", "chunks", "facts", "text")
_SYNTAXES = ("tag", "marker")
_CONTAINERS = (dict, list)
_BODY_TYPES = (str, str, int, int, int, str, int)


def row_limit(file_bytes: int) -> int:
    """The most bytes a row for a file of that size may hold (frontmatter twice, as data
    and as its source text, the chunk bodies, diagnostics), aliases included."""
    return 8 * file_bytes + 65_536


def encode(doc: ParsedDocument, limit: int) -> bytes | None:
    """The syntax pass of doc as a row, or None when it is not worth caching (positions
    already computed: a rare error case) or would exceed limit bytes."""
    smap = doc.source_map
    pending = smap._pending  # noqa: SLF001 (the deferred source: its YAML text)
    if pending is None and (smap._keys or smap._values):  # noqa: SLF001
        return None
    if (any(getattr(doc, name) for name in TYPED_FIELDS)
            or any(d.path != doc.path for d in doc.diagnostics)
            or (pending is not None and pending[1] != doc.path)):
        return None  # not a syntax pass of this path: nothing to cache
    fm_text, line_offset = (pending[0], pending[2]) if pending is not None else (None, 0)
    # Aliases share values that JSON writes out again: bound that before writing.
    if doc.frontmatter is not None and "*" in (fm_text or "") \
            and _expanded_size(doc.frontmatter, limit) > limit:
        return None
    row = [doc.frontmatter, fm_text, line_offset,
           [[b.id, b.content, b.line, b.column, b.end_line, b.syntax, b.offset]
            for b in doc.bodies.values()],
           [[d.line, d.column, d.code, d.message, d.severity.value] for d in doc.diagnostics],
           doc.text_sha256, smap.packed_marks]
    try:
        blob = json.dumps(row, ensure_ascii=False, separators=(",", ":"),
                          allow_nan=False).encode("utf-8")
    except (TypeError, ValueError):  # a value YAML made that JSON cannot hold
        return None
    return blob if len(blob) <= limit else None


def decode(blob: bytes, path: str, fs_path: Any) -> ParsedDocument | None:
    """The syntax pass a row holds, for the file at path; None for anything but a row
    encode() wrote."""
    if _SURROGATE_ESCAPE.search(blob):
        return None
    try:
        row = json.loads(blob, parse_constant=_refuse, parse_float=_finite)
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        return None
    if type(row) is not list or len(row) != 7:
        return None
    frontmatter, fm_text, line_offset, bodies, found, text_sha256, marks = row
    if not (is_sha256(text_sha256) and type(line_offset) is int and type(bodies) is list
            and type(found) is list and (marks is None or type(marks) is str)):
        return None
    if not (fm_text is None or type(fm_text) is str):
        return None
    if frontmatter is not None and not (type(frontmatter) is dict and fm_text is not None
                                        and _shallow(frontmatter)):
        return None  # (YAML that did not load leaves text and no frontmatter)
    chunk_bodies = _bodies(bodies)
    diagnostics = diagnostics_from_rows(found, path)
    if chunk_bodies is None or diagnostics is None:
        return None
    # (marks that do not fit the value or the text are not used: SourceMap)
    smap = SourceMap.deferred(fm_text, path, line_offset, marks, frontmatter) \
        if fm_text is not None else SourceMap()
    return ParsedDocument(path, fs_path, frontmatter, smap, bodies=chunk_bodies,
                          diagnostics=diagnostics, text_sha256=text_sha256)


def _refuse(name: str) -> Any:
    raise ValueError(f"{name} is not a finite number")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e999 reads as inf
        raise ValueError(f"{text} is not a finite number")
    return value


def _shallow(value: Any) -> bool:
    """Whether value nests no deeper than YAML may (JSON reads ~1,000 levels, and deeper
    data would exhaust the stack of code that walks it)."""
    level = [value]
    for _ in range(MAX_DEPTH):
        inner = []
        for item in level:
            for child in (item.values() if type(item) is dict else item):
                if type(child) in _CONTAINERS:
                    inner.append(child)
        if not inner:
            return True
        level = inner
    return False


def _expanded_size(value: Any, limit: int) -> int:
    """About how many bytes JSON writes for value, counting shared values each time they
    occur; stops counting past limit."""
    size = 0
    pending = [value]
    while pending and size <= limit:
        item = pending.pop()
        if type(item) is dict:
            size += 2 + sum(len(key) + 4 for key in item)
            pending.extend(item.values())
        elif type(item) is list:
            size += 2 + len(item)
            pending.extend(item)
        else:
            size += len(item) + 2 if type(item) is str else 8
    return size


def _bodies(rows: list) -> dict[str, ChunkBody] | None:
    bodies: dict[str, ChunkBody] = {}
    for row in rows:
        if type(row) is not list or tuple(map(type, row)) != _BODY_TYPES:
            return None
        chunk_id, content, line, column, end_line, syntax, offset = row
        if not (syntax in _SYNTAXES and 1 <= line <= end_line and column >= 1
                and offset >= 0 and chunk_id not in bodies):
            return None
        bodies[chunk_id] = ChunkBody(chunk_id, content, line, column, end_line, syntax, offset)
    return bodies
