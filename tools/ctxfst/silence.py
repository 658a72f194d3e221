"""Silencing: the diagnostics a project's rule selection (rule_selection.py) and its
inline `ctxfst: noqa` comments on a chunk or an entity hide. Errors are never silenced:
the build refuses what they report, so hiding one would only hide why."""

from __future__ import annotations

import bisect
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .diagnostics import RULES, Diagnostic, Severity, diag
from .rule_selection import SILENCEABLE, RuleSelection, did_you_mean

# `# ctxfst: noqa CTX502, CTX503` in YAML, `<!-- ctxfst: noqa CTX511 -->` in a body; no
# codes: every warning and info of that record.
_NOQA = re.compile(r"(?:#|<!--)\s*ctxfst:\s*noqa(?![\w-])(?:[:\s]\s*"
                   r"(?P<codes>[A-Za-z]+\w*(?:[\s,]+[A-Za-z]+\w*)*))?")


@dataclass(frozen=True)
class _Directive:
    line: int
    column: int
    codes: tuple[str, ...]  # empty: all


def noqa_directives(text: str) -> list[_Directive]:
    found = []
    if "ctxfst:" not in text:
        return found
    for number, line in enumerate(text.split("\n"), 1):
        if "ctxfst:" not in line:
            continue
        for match in _NOQA.finditer(line):
            codes = tuple(re.split(r"[\s,]+", match["codes"].strip())) if match["codes"] \
                else ()
            found.append(_Directive(number, match.start() + 1, tuple(c.upper() for c in codes)))
    return found


def project_text_reader(root: Path) -> Callable[[str], str | None]:
    """read_text for apply(): a document's text, for files inside root only (a path may
    come from a cached diagnostic)."""
    from .document.source import Source, load_text
    from .files import inside

    def read_text(path: str) -> str | None:
        absolute = os.path.abspath(path)
        return load_text(Source(path, absolute))[0] if inside(root, absolute) else None

    return read_text


def _record_spans(doc) -> list[tuple[int, int, tuple]]:
    """(first line, last line, record) for each entities[]/chunks[] entry of a parsed
    document's frontmatter, and for each chunk's body (the chunk's record)."""
    smap = doc.source_map
    frontmatter = doc.frontmatter or {}
    starts: list[tuple[int, tuple]] = []
    for name in ("entities", "chunks"):
        items = frontmatter.get(name)
        if isinstance(items, list):
            starts.extend((smap.value((name, index)).line, (name, index))
                          for index in range(len(items)))
    # An entry ends where the next entry or the next top-level key begins.
    bounds = sorted({line for line, _ in starts} | {
        smap.key((key,)).line for key in frontmatter if isinstance(key, str)})
    first_body = min((body.line for body in doc.bodies.values()), default=10**9)
    spans = []
    for line, record in starts:
        after = bisect.bisect_right(bounds, line)
        end = bounds[after] - 1 if after < len(bounds) else first_body - 1
        spans.append((line, max(line, end), record))
    chunk_index = {item.get("id"): index for index, item in
                   enumerate(frontmatter.get("chunks") or []) if isinstance(item, dict)
                   and isinstance(item.get("id"), str)} \
        if isinstance(frontmatter.get("chunks"), list) else {}
    for chunk_id, body in doc.bodies.items():
        if chunk_id in chunk_index:
            spans.append((body.line, body.end_line, ("chunks", chunk_index[chunk_id])))
    return spans


def _record_at(spans, line: int) -> tuple | None:
    for first, last, record in spans:
        if first <= line <= last:
            return record
    return None


def apply(diagnostics: list[Diagnostic], selection: RuleSelection, root: Path,
          read_text: Callable[[str], str | None]) -> list[Diagnostic]:
    """The diagnostics the project wants shown, plus a CTX513 for each noqa comment that
    can silence nothing. read_text(display path) gives a document's text (None: not
    readable); it is asked only for files with a shown warning or info, and a text is
    parsed again only when it holds a noqa comment."""
    from .document.parse import parse_text

    relative: dict[str, str | None] = {}

    def relative_of(path: str) -> str | None:
        if path not in relative:
            absolute = os.path.abspath(path)
            inside = absolute.startswith(str(root) + os.sep)
            relative[path] = Path(os.path.relpath(absolute, root)).as_posix() \
                if inside else None
        return relative[path]

    shown = [d for d in diagnostics if selection.shows(d.code, relative_of(d.path))]
    paths = sorted({d.path for d in shown if d.severity is not Severity.ERROR})
    by_path: dict[str, tuple[list, list[_Directive]]] = {}
    extra: list[Diagnostic] = []
    for path in paths:
        text = read_text(path)
        directives = noqa_directives(text) if text else []
        if not directives:
            continue
        spans = _record_spans(parse_text(text, path, typed=False))
        by_path[path] = (spans, directives)
        for directive in directives:
            bad = [c for c in directive.codes if c not in SILENCEABLE]
            if _record_at(spans, directive.line) is None:
                extra.append(diag("CTX513", "noqa comment outside a chunk or entity entry "
                                  "silences nothing (per_file_ignores in [lint] covers a "
                                  "whole file)", path, directive.line, directive.column))
            for code in bad:
                reason = "is an error, fixed and not silenced" if code in RULES else \
                    f"is no warning or info code{did_you_mean(code, SILENCEABLE)}"
                extra.append(diag("CTX513", f"noqa: {code} {reason}", path, directive.line,
                                  directive.column))
    if not by_path:
        return shown + [d for d in extra if selection.shows(d.code, relative_of(d.path))]
    kept = []
    for item in shown:
        found = by_path.get(item.path) if item.severity is not Severity.ERROR else None
        if found is not None:
            spans, directives = found
            record = _record_at(spans, item.line)
            if record is not None and any(
                    _record_at(spans, d.line) == record and (not d.codes or item.code in d.codes)
                    for d in directives):
                continue
        kept.append(item)
    return kept + [d for d in extra if selection.shows(d.code, relative_of(d.path))]
