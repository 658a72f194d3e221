"""Parse a CtxFST document: frontmatter, typed records, and chunk passages in the body."""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ValidationError

from ..diagnostics import Diagnostic, diag
from .ids import ID_HINT
from .model import ChunkBody, ChunkRecord, Entity, ParsedDocument
from .source import Source, load_text
from .yamlpos import Path, SourceMap, load_yaml


def split_frontmatter(text: str, path: str) -> tuple[str | None, int, Diagnostic | None]:
    """Return (frontmatter text, index of the first body line, problem)."""
    lines = text.split("\n")
    if lines[0].rstrip() != "---":
        return None, 0, diag("CTX010", "no YAML frontmatter: a CtxFST document starts "
                             "with a '---' line", path)
    for index in range(1, len(lines)):
        if lines[index].rstrip() in ("---", "..."):
            return "\n".join(lines[1:index]), index + 1, None
    return None, 0, diag("CTX011", "frontmatter opened on line 1 is never closed by a "
                         "'---' line", path)


def looks_like_ctxfst(text: str) -> bool:
    """True for text that claims to be CtxFST (frontmatter or chunk markers)."""
    lowered = text[:1_000_000].lower()
    return text.startswith("---") or "<chunk" in lowered or "chunk-start" in lowered


def parse_document(source: Source, typed: bool = True) -> ParsedDocument:
    text, problem = load_text(source)
    if problem is not None:
        return ParsedDocument(source.path, source.fs_path, None, SourceMap(),
                              diagnostics=[problem])
    assert text is not None
    return parse_text(text, source.path, source.fs_path, typed)


def load_frontmatter(text: str, path: str, diagnostics: list[Diagnostic]
                     ) -> tuple[dict | None, SourceMap, int]:
    """The frontmatter mapping, its source map and the first body line index.

    Problems go to diagnostics; the mapping is None when there is none to use.
    """
    fm_text, body_start, problem = split_frontmatter(text, path)
    if problem is not None:
        diagnostics.append(problem)
        return None, SourceMap(), body_start
    assert fm_text is not None
    loaded = load_yaml(fm_text, path, line_offset=1)
    diagnostics.extend(loaded.diagnostics)
    if not loaded.ok:
        return None, loaded.source_map, body_start
    data = loaded.value
    if not isinstance(data, dict):
        found = "nothing" if data is None else f"a {_yaml_kind(data)}"
        diagnostics.append(diag("CTX013", f"frontmatter must be a mapping of fields, "
                                f"found {found}", path, 2, 1))
        return None, loaded.source_map, body_start
    return data, loaded.source_map, body_start


def parse_text(text: str, path: str, fs_path: Any = None, typed: bool = True) -> ParsedDocument:
    """Parse a document. With typed=False only the syntax pass runs (plain data, cheap
    to send between processes); type_document() then builds the typed records."""
    doc = ParsedDocument(path, fs_path, None, SourceMap(), text=text)
    data, doc.source_map, body_start = load_frontmatter(text, path, doc.diagnostics)
    if data is None:
        return doc
    doc.frontmatter = data
    if "chunks" not in data and "entities" not in data:
        doc.diagnostics.append(diag("CTX018", "frontmatter declares neither 'chunks' nor "
                                    "'entities'", path, 1, 1))
    _scan_body(doc, text, body_start)
    if typed:
        type_document(doc)
    return doc


def type_document(doc: ParsedDocument) -> None:
    """Validate the frontmatter records into typed models, reporting bad fields."""
    data = doc.frontmatter
    if data is None:
        return
    path = doc.path
    title = data.get("title")
    if title is not None and not isinstance(title, str):
        wrong_type(doc, ("title",), "title", "a string", title)
    else:
        doc.title = title
    doc.entities = _records(doc, data, "entities", Entity, ("id", "name", "type"))
    doc.chunks = _records(doc, data, "chunks", ChunkRecord, ("id",))
    for index, chunk in doc.chunks:
        if "context" not in (data["chunks"][index] or {}):
            pos = doc.source_map.value(("chunks", index))
            doc.diagnostics.append(diag("CTX106", f"chunk '{chunk.id}' has no 'context'; "
                                        "retrieval works best with one", path, pos.line,
                                        pos.column))
    from .facts import check_document

    check_document(doc)


def _yaml_kind(value: Any) -> str:
    if isinstance(value, list):
        return "list"
    if isinstance(value, dict):
        return "mapping"
    return f"{type(value).__name__} value"


def wrong_type(doc: Any, path: Path, label: str, expected: str, value: Any) -> None:
    pos = doc.source_map.value(path)
    doc.diagnostics.append(diag("CTX102", f"{label} must be {expected}, found "
                                f"{_yaml_kind(value)} {short_repr(value)}", doc.path,
                                pos.line, pos.column))


def short_repr(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _records(doc: ParsedDocument, data: dict, key: str, model: type[BaseModel],
             required: tuple[str, ...]) -> list[tuple[int, Any]]:
    items = data.get(key)
    if items is None:
        return []
    if not isinstance(items, list):
        wrong_type(doc, (key,), f"'{key}'", "a list", items)
        return []
    kind = {"entities": "entity", "chunks": "chunk"}[key]
    records = []
    for index, item in enumerate(items):
        path = (key, index)
        if not isinstance(item, dict):
            wrong_type(doc, path, f"{kind} #{index + 1}", "a mapping", item)
            continue
        record = validate_record(doc, model, item, path, kind, index, required)
        if record is not None:
            records.append((index, record))
    return records


# Messages for fields whose pydantic errors (unions, validators) read poorly.
_FIELD_HINTS = {
    "cost": "must be low, medium, high or a positive number",
    "version": "must be a positive integer (at most 2^63 - 1)",
    "idempotent": "must be true or false",
    "priority": "must be one of low, medium, high, critical",
}
_CODE_BY_ERROR = {
    "missing": "CTX101",
    "literal_error": "CTX103",
    "enum": "CTX103",
    "string_pattern_mismatch": "CTX104",
    "value_error": "CTX105",
    "finite_number": "CTX105",
    "greater_than": "CTX105",
    "greater_than_equal": "CTX105",
    "less_than": "CTX105",
    "less_than_equal": "CTX105",
    "string_too_short": "CTX105",
    "string_too_long": "CTX105",
}


def validate_record(doc: Any, model: type[BaseModel], item: dict, path: Path,
                     kind: str, index: int, required: tuple[str, ...]) -> Any:
    """Validate one record; report each bad field and keep the record without it.

    Returns None when a required field is missing or bad.
    """
    try:
        return model.model_validate(item)
    except ValidationError as error:
        errors = error.errors(include_url=False)
    name = item.get("id", item.get("name"))
    label = f"{kind} '{name}'" if isinstance(name, str) else f"{kind} #{index + 1}"
    reported: set = set()
    for err in errors:
        field_name = err["loc"][0] if err["loc"] else None
        if field_name in reported:
            continue  # one message per field, even for union alternatives
        reported.add(field_name)
        doc.diagnostics.append(_field_diagnostic(doc, err, item, path, label))
    broken = {err["loc"][0] for err in errors if err["loc"]}
    if broken & set(required):
        return None
    cleaned = {key: value for key, value in item.items() if key not in broken}
    try:
        return model.model_validate(cleaned)
    except ValidationError:
        return None


def _field_diagnostic(doc: Any, err: dict, item: dict, path: Path,
                      label: str) -> Diagnostic:
    loc = [part for part in err["loc"] if isinstance(part, int) or part in item
           or part == err["loc"][0]]
    field_name = str(err["loc"][0]) if err["loc"] else ""
    error_type = err["type"]
    code = _CODE_BY_ERROR.get(error_type, "CTX102")
    if error_type == "missing":
        pos = doc.source_map.value(path)
        return diag(code, f"{label}: missing required field '{field_name}'", doc.path,
                    pos.line, pos.column)
    field_path = path + tuple(_real_path(item, loc))
    pos = doc.source_map.value(field_path)
    value = item.get(field_name)
    if code == "CTX104":
        message = f"{label}: id {value!r} is invalid; use {ID_HINT}"
    elif code == "CTX103":
        expected = err.get("ctx", {}).get("expected", "")
        message = f"{label}: {field_name} {value!r} is not allowed; expected {expected}"
    elif field_name in _FIELD_HINTS:
        code = "CTX105" if code == "CTX102" and field_name == "version" else code
        if field_name == "cost":
            code = "CTX103"
        message = (f"{label}: {field_name} {_FIELD_HINTS[field_name]}, found "
                   f"{short_repr(value)}")
    else:
        reason = err["msg"].removeprefix("Value error, ")
        bad = err.get("input")
        message = (f"{label}: {'.'.join(str(p) for p in loc)}: {reason} "
                   f"(found {short_repr(bad)})")
    return diag(code, message, doc.path, pos.line, pos.column)


def _real_path(item: Any, loc: list) -> list:
    """The longest prefix of loc that exists in the data (drops union branch names)."""
    real: list = []
    current = item
    for part in loc:
        if isinstance(current, dict) and part in current:
            current = current[part]
        elif isinstance(current, list) and isinstance(part, int) and part < len(current):
            current = current[part]
        else:
            break
        real.append(part)
    return real


# --- Body -------------------------------------------------------------------------
# The body is scanned in one left-to-right pass per line. A single alternation regex
# with lazy `[^>]*?` / `.*?` parts rescans the rest of the line from every unclosed
# opener (a line of `<Chunk id="` repeated took minutes); here each opener looks up the
# next `>` or `%%`, remembered across openers, so every character is read a bounded
# number of times.

_CANDIDATE = re.compile(r"</?chunk|%%", re.IGNORECASE)
_TAG_OPEN = re.compile(r"<chunk\b", re.IGNORECASE)
_TAG_CLOSE = re.compile(r"</chunk\s*>", re.IGNORECASE)
_MARKER_OPEN = re.compile(r"%%\s*chunk-start\b", re.IGNORECASE)
_MARKER_CLOSE = re.compile(r"%%\s*chunk-end\s*%%", re.IGNORECASE)
# The lookbehind keeps a long run of name characters from being retried at each of its
# positions (quadratic).
_ATTR = re.compile(r"""(?<![\w-])([A-Za-z_][\w-]*+)\s*+=\s*+(?:"([^"]*+)"|'([^']*+)')""")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")


class _Token:
    """A chunk tag or marker on one line: kind is open or close."""

    __slots__ = ("start", "end", "text", "opens", "syntax", "attrs", "self_close")

    def __init__(self, line: str, start: int, end: int, opens: bool, syntax: str,
                 attrs: str = "", self_close: bool = False) -> None:
        self.start, self.end, self.text = start, end, line[start:end]
        self.opens, self.syntax, self.attrs, self.self_close = opens, syntax, attrs, self_close


def _line_tokens(line: str):
    """The chunk tags and markers of a line, left to right (regex finditer semantics:
    a failed candidate is retried one character on, a token resumes after its end)."""
    next_gt = line.find(">")
    next_marks = line.find("%%")
    pos = 0
    while True:
        found = _CANDIDATE.search(line, pos)
        if found is None:
            return
        start = found.start()
        token = None
        if line[start] == "%":
            opener = _MARKER_OPEN.match(line, start)
            if opener is not None:
                if 0 <= next_marks < opener.end():
                    next_marks = line.find("%%", opener.end())
                if next_marks >= 0:
                    token = _Token(line, start, next_marks + 2, True, "marker",
                                   line[opener.end():next_marks])
            else:
                closer = _MARKER_CLOSE.match(line, start)
                if closer is not None:
                    token = _Token(line, start, closer.end(), False, "marker")
        elif line[start + 1] == "/":
            closer = _TAG_CLOSE.match(line, start)
            if closer is not None:
                token = _Token(line, start, closer.end(), False, "tag")
        else:
            opener = _TAG_OPEN.match(line, start)
            if opener is not None:
                if 0 <= next_gt < opener.end():
                    next_gt = line.find(">", opener.end())
                if next_gt >= 0:
                    attrs = line[opener.end():next_gt]
                    self_close = attrs.endswith("/")
                    token = _Token(line, start, next_gt + 1, True, "tag",
                                   attrs[:-1] if self_close else attrs, self_close)
        if token is None:
            pos = start + 1
            continue
        yield token
        pos = token.end


class _Open:
    __slots__ = ("id", "line", "column", "content_start", "content_end", "syntax")

    def __init__(self, chunk_id, line, column, content_start, syntax):
        self.id, self.line, self.column = chunk_id, line, column
        self.content_start, self.syntax = content_start, syntax
        self.content_end: int | None = None  # set where a (wrongly) nested chunk opens


def _scan_body(doc: ParsedDocument, text: str, body_start: int) -> None:
    lines = text.split("\n")
    offset = sum(len(line) + 1 for line in lines[:body_start])
    if "chunk" not in text[offset:].lower():
        return
    stack: list[_Open] = []
    fence: str | None = None
    for index in range(body_start, len(lines)):
        line = lines[index]
        line_offset = offset
        offset += len(line) + 1
        fence_match = _FENCE.match(line) if ("`" in line or "~" in line) else None
        if fence_match:
            marker = fence_match.group(1)
            if fence is None:
                fence = marker
                continue
            if line.strip() == fence[0] * len(line.strip()) and len(line.strip()) >= len(fence):
                fence = None
                continue
        if fence is not None or "hunk" not in line.lower():
            continue
        ticks = counted = 0
        for token in _line_tokens(line):
            ticks += line.count("`", counted, token.start)
            counted = token.start
            if ticks % 2:
                continue  # inside an inline code span
            _token(doc, token, index + 1, line_offset, stack, text)
    for open_chunk in stack:
        label = f"chunk '{open_chunk.id}'" if open_chunk.id else "chunk"
        doc.diagnostics.append(diag("CTX304", f"{label} is never closed", doc.path,
                                    open_chunk.line, open_chunk.column))


def _token(doc: ParsedDocument, token: _Token, line_no: int, line_offset: int,
           stack: list[_Open], text: str) -> None:
    column = token.start + 1
    if not token.opens:
        if not stack:
            doc.diagnostics.append(diag("CTX305", f"'{token.text}' closes no open chunk",
                                        doc.path, line_no, column))
            return
        opened = stack.pop()
        end = line_offset + token.start if opened.content_end is None else opened.content_end
        _finish(doc, opened, text[opened.content_start:end], line_no)
        return
    attrs = {m.group(1).lower(): (m.group(2) if m.group(2) is not None else m.group(3))
             for m in _ATTR.finditer(token.attrs)}
    chunk_id = attrs.get("id")
    if chunk_id is None or not chunk_id.strip():
        doc.diagnostics.append(diag("CTX306", f"'{token.text}' has no id attribute",
                                    doc.path, line_no, column))
        chunk_id = None
    if stack:
        outer = stack[-1]
        outer_label = f"'{outer.id}'" if outer.id else "a chunk"
        doc.diagnostics.append(diag(
            "CTX303", f"chunk '{chunk_id or '?'}' opened inside {outer_label} (opened at line "
            f"{outer.line}); chunks cannot nest", doc.path, line_no, column))
        if outer.content_end is None:
            # The outer passage ends here: passages never overlap, so nesting N deep
            # copies the text once, not N times.
            outer.content_end = line_offset + token.start
    opened = _Open(chunk_id, line_no, column, line_offset + token.end, token.syntax)
    if token.self_close:
        _finish(doc, opened, "", line_no)
        return
    stack.append(opened)


def _finish(doc: ParsedDocument, opened: _Open, content: str, end_line: int) -> None:
    if opened.id is None:
        return
    if opened.id in doc.bodies:
        first = doc.bodies[opened.id]
        doc.diagnostics.append(diag("CTX307", f"chunk '{opened.id}' appears twice in the "
                                    f"body (first at line {first.line})", doc.path,
                                    opened.line, opened.column))
        return
    leading = len(content) - len(content.lstrip())
    doc.bodies[opened.id] = ChunkBody(opened.id, content.strip(), opened.line,
                                      opened.column, end_line, opened.syntax,
                                      opened.content_start + leading)
