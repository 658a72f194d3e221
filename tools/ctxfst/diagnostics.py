"""Diagnostics as data: stable codes, severities, locations, and their renderings."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from enum import StrEnum


class Severity(StrEnum):
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


@dataclass(frozen=True)
class Rule:
    code: str
    severity: Severity
    title: str


# The registry of every code ctxfst emits. Codes are stable: never renumber, only add.
# docs/rules.md documents each one (a test keeps the two in step).
_RULES = [
    # Reading the file (CTX00x)
    Rule("CTX001", Severity.ERROR, "file cannot be read"),
    Rule("CTX002", Severity.ERROR, "file is not valid UTF-8"),
    Rule("CTX003", Severity.ERROR, "file is binary"),
    Rule("CTX004", Severity.ERROR, "file is too large"),
    Rule("CTX005", Severity.ERROR, "file is empty"),
    # Frontmatter and YAML (CTX01x)
    Rule("CTX010", Severity.ERROR, "missing frontmatter"),
    Rule("CTX011", Severity.ERROR, "frontmatter is not closed"),
    Rule("CTX012", Severity.ERROR, "YAML syntax error"),
    Rule("CTX013", Severity.ERROR, "frontmatter is not a mapping"),
    Rule("CTX014", Severity.ERROR, "duplicate YAML key"),
    Rule("CTX015", Severity.ERROR, "YAML too large or recursive after alias expansion"),
    Rule("CTX016", Severity.ERROR, "tab used for YAML indentation"),
    Rule("CTX017", Severity.ERROR, "unsupported YAML key"),
    Rule("CTX018", Severity.ERROR, "not a CtxFST document"),
    # Fields (CTX1xx)
    Rule("CTX101", Severity.ERROR, "required field missing"),
    Rule("CTX102", Severity.ERROR, "field has the wrong type"),
    Rule("CTX103", Severity.ERROR, "value not allowed"),
    Rule("CTX104", Severity.ERROR, "invalid id"),
    Rule("CTX105", Severity.ERROR, "invalid field value"),
    Rule("CTX106", Severity.WARNING, "chunk has no context"),
    # References across the knowledge base (CTX2xx)
    Rule("CTX201", Severity.ERROR, "duplicate entity id in a document"),
    Rule("CTX202", Severity.ERROR, "conflicting entity declarations"),
    Rule("CTX203", Severity.ERROR, "duplicate chunk id"),
    Rule("CTX204", Severity.ERROR, "reference to an undeclared entity"),
    Rule("CTX205", Severity.ERROR, "condition names an entity that is not a state"),
    Rule("CTX206", Severity.ERROR, "dependency names an unknown chunk"),
    Rule("CTX207", Severity.ERROR, "dependency cycle"),
    Rule("CTX208", Severity.WARNING, "related skill not found"),
    # Body (CTX3xx)
    Rule("CTX301", Severity.ERROR, "body chunk not declared in the frontmatter"),
    Rule("CTX302", Severity.ERROR, "frontmatter chunk has no body"),
    Rule("CTX303", Severity.ERROR, "nested chunk"),
    Rule("CTX304", Severity.ERROR, "unclosed chunk"),
    Rule("CTX305", Severity.ERROR, "closing chunk tag without an opening one"),
    Rule("CTX306", Severity.ERROR, "chunk tag without an id"),
    Rule("CTX307", Severity.ERROR, "chunk id repeated in the body"),
    Rule("CTX308", Severity.ERROR, "content_path escapes the knowledge base"),
    Rule("CTX309", Severity.ERROR, "content_path does not exist"),
    Rule("CTX310", Severity.ERROR, "chunk has both a body and a content_path"),
    Rule("CTX311", Severity.ERROR, "content_path cannot name a file"),
    Rule("CTX312", Severity.ERROR, "evidence excerpts too costly to check"),
    # Skills (CTX4xx)
    Rule("CTX401", Severity.ERROR, "invalid skill name"),
    Rule("CTX402", Severity.ERROR, "skill name differs from its directory"),
    Rule("CTX403", Severity.ERROR, "duplicate skill name"),
    Rule("CTX404", Severity.WARNING, "skill condition names no declared entity"),
    Rule("CTX406", Severity.ERROR, "related node is not an entity"),
    Rule("CTX407", Severity.ERROR, "related skill does not exist"),
    Rule("CTX408", Severity.WARNING, "skill changes nothing"),
    Rule("CTX409", Severity.WARNING, "precondition nothing can produce"),
    Rule("CTX410", Severity.ERROR, "skill folder without SKILL.md"),
    Rule("CTX411", Severity.ERROR, "skill folder links outside the knowledge base"),
    Rule("CTX412", Severity.ERROR, "skill field given twice"),
    Rule("CTX413", Severity.ERROR, "field not allowed by the Agent Skills specification"),
    Rule("CTX414", Severity.ERROR, "skill script is not a path inside its folder"),
    # Extra edges (CTX6xx)
    Rule("CTX601", Severity.ERROR, "extra-edges file is not a list"),
    Rule("CTX602", Severity.ERROR, "extra edge is not a mapping"),
    Rule("CTX604", Severity.ERROR, "extra edge names an unknown node"),
    Rule("CTX605", Severity.WARNING, "duplicate extra edge"),
    # Declared facts and tenants (CTX7xx)
    Rule("CTX701", Severity.ERROR, "malformed facts list or entry"),
    Rule("CTX702", Severity.ERROR, "fact misses namespace, key or value"),
    Rule("CTX703", Severity.ERROR, "invalid fact namespace or key"),
    Rule("CTX704", Severity.ERROR, "fact confidence outside 0-1"),
    Rule("CTX705", Severity.ERROR, "unknown fact value type"),
    Rule("CTX706", Severity.ERROR, "fact value does not fit its type"),
    Rule("CTX707", Severity.ERROR, "unknown field in a fact"),
    Rule("CTX708", Severity.ERROR, "fact evidence not found in the text"),
    Rule("CTX709", Severity.ERROR, "invalid tenant"),
    Rule("CTX710", Severity.WARNING, "fact declared twice"),
    # Settings and project paths (CTX8xx); all but CTX809 and CTX811 stop the command
    # (exit 2)
    Rule("CTX801", Severity.ERROR, "settings file cannot be read or is not valid TOML"),
    Rule("CTX802", Severity.ERROR, "unknown setting"),
    Rule("CTX803", Severity.ERROR, "setting has the wrong type or value"),
    Rule("CTX804", Severity.ERROR, "path leads outside the project"),
    Rule("CTX805", Severity.ERROR, "build folder would hold or replace the sources"),
    Rule("CTX806", Severity.ERROR, "tenant folder is no folder of the project"),
    Rule("CTX807", Severity.ERROR, "tenant folder holds no source"),
    Rule("CTX808", Severity.ERROR, "output path is not a folder"),
    Rule("CTX809", Severity.ERROR, "input file links outside the project"),
    Rule("CTX810", Severity.ERROR, "output path would write over the sources"),
    Rule("CTX811", Severity.ERROR, "input file or folder name is not UTF-8"),
    # Authoring (CTX9xx): `ctxfst chunk` drafting notes
    Rule("CTX901", Severity.ERROR, "note is CtxFST already"),
    Rule("CTX902", Severity.WARNING, "block over the token budget"),
    Rule("CTX903", Severity.ERROR, "draft would replace a file"),
    Rule("CTX904", Severity.ERROR, "two notes give one draft"),
    Rule("CTX907", Severity.ERROR, "code fence never closed"),
    # `ctxfst contextualize` and `ctxfst lint --fix` editing documents
    Rule("CTX905", Severity.ERROR, "provider failed for chunks of a document"),
    Rule("CTX906", Severity.ERROR, "edit cannot be made cleanly"),
    # Quality lint (CTX5xx), reported by `ctxfst lint` only
    Rule("CTX501", Severity.WARNING, "near-duplicate chunks"),
    Rule("CTX502", Severity.WARNING, "context too short"),
    Rule("CTX503", Severity.INFO, "context too long"),
    Rule("CTX504", Severity.WARNING, "context repeats the content"),
    Rule("CTX505", Severity.INFO, "over-broad tags"),
    Rule("CTX506", Severity.WARNING, "identical tag sets"),
    Rule("CTX507", Severity.WARNING, "id naming"),
    Rule("CTX508", Severity.WARNING, "generic entity name"),
    Rule("CTX509", Severity.WARNING, "duplicate entity name or alias"),
    Rule("CTX510", Severity.WARNING, "too many entities in a chunk"),
    Rule("CTX511", Severity.INFO, "chunk links no entities"),
    Rule("CTX512", Severity.WARNING, "context is empty"),
    Rule("CTX513", Severity.WARNING, "noqa comment that cannot apply"),
]
RULES: dict[str, Rule] = {rule.code: rule for rule in _RULES}


@dataclass(frozen=True, order=True)
class Diagnostic:
    path: str
    line: int
    column: int
    code: str
    message: str
    severity: Severity

    def to_dict(self) -> dict:
        data = asdict(self)
        data["severity"] = self.severity.value
        return {key: data[key] for key in ("code", "severity", "message", "path", "line", "column")}


def diag(code: str, message: str, path: str, line: int = 1, column: int = 1,
         severity: Severity | None = None) -> Diagnostic:
    """Build a diagnostic whose severity defaults to its rule's."""
    rule = RULES[code]
    return Diagnostic(path=path, line=max(1, line), column=max(1, column), code=code,
                      message=message, severity=severity or rule.severity)


_SEVERITY_NAMES = {severity.value: severity for severity in Severity}
_ROW_TYPES = (int, int, str, str, str)


def diagnostics_from_rows(rows: list, path: str | None = None) -> list[Diagnostic] | None:
    """Diagnostics a cache kept as rows: [line, column, code, message, severity] for the
    file at path, or [path, line, ...] when no path is given; None when any row is of
    another shape or names an unknown code or severity."""
    found: list[Diagnostic] = []
    for row in rows:
        if type(row) is not list:
            return None
        if path is None:
            if not row or type(row[0]) is not str:
                return None
            where, row = row[0], row[1:]
        else:
            where = path
        if tuple(map(type, row)) != _ROW_TYPES:
            return None
        line, column, code, message, severity = row
        if not (line >= 1 and column >= 1 and code in RULES and severity in _SEVERITY_NAMES):
            return None
        found.append(Diagnostic(where, line, column, code, message, _SEVERITY_NAMES[severity]))
    return found


def ordered(diagnostics: Iterable[Diagnostic]) -> list[Diagnostic]:
    """Deduplicated, in Diagnostic order. A key tuple compares in C; the dataclass's own
    comparison builds two tuples per call in Python (slow for 100,000s of diagnostics)."""
    return sorted(set(diagnostics), key=lambda d: (d.path, d.line, d.column, d.code,
                                                   d.message, d.severity))


def summarize(diagnostics: Iterable[Diagnostic], files: int) -> dict:
    counts = {severity.value: 0 for severity in Severity}
    for item in diagnostics:
        counts[item.severity.value] += 1
    return {"files": files, "errors": counts["error"], "warnings": counts["warning"],
            "infos": counts["info"]}


# Characters that would let a crafted id or path start a new output line, or drive the
# terminal: C0, DEL, C1, and the Unicode line and paragraph separators.
# C0, DEL, C1, line/paragraph separators, and the bidirectional controls (U+202E makes
# a terminal show text in another order than it is).
# And lone surrogates: a file name that is not UTF-8 holds them, and no terminal or UTF-8
# stream can take them raw.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069"
                      "\ud800-\udfff]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _visible(match: re.Match) -> str:
    char = match.group()
    if char in _NAMED:
        return _NAMED[char]
    return f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}"


def escape(value: object) -> str:
    """Text safe to print on one line: control characters as visible escapes (\\n, \\x1b,
    \\u2028). Every text output of ids, paths or messages from a knowledge base goes
    through it."""
    return _CONTROL.sub(_visible, str(value))


def escape_lines(lines: list[str]) -> str:
    """Lines of output joined, each escaped first: a newline inside one (an id, a value,
    an excerpt from the KB) shows as \\n and cannot forge another line."""
    return "\n".join(escape(line) for line in lines)


# ANSI styles for a terminal: severity in its colour, the code bold
_STYLE = {Severity.ERROR: "\033[1;31m", Severity.WARNING: "\033[1;33m",
          Severity.INFO: "\033[1;36m"}
_BOLD, _RESET = "\033[1m", "\033[0m"


def text_line(d: Diagnostic, color: bool = False) -> str:
    """One diagnostic as `path:line:column: severity CODE: message`, on one line."""
    severity, code = d.severity.value, escape(d.code)
    if color:  # (after escaping: the KB's text can hold no escape sequence of its own)
        severity, code = f"{_STYLE[d.severity]}{severity}{_RESET}", f"{_BOLD}{code}{_RESET}"
    return f"{escape(d.path)}:{d.line}:{d.column}: {severity} {code}: {escape(d.message)}"


def render_text(diagnostics: list[Diagnostic], summary: dict | None,
                color: bool = False) -> str:
    """The text lines, then the summary line (none where summary is None: --quiet)."""
    lines = [text_line(d, color) for d in diagnostics]
    if summary is not None:
        lines.append(summary_line(summary))
    return "".join(line + "\n" for line in lines)


def summary_line(summary: dict) -> str:
    return (f"{summary['files']} file(s) checked: {summary['errors']} error(s), "
            f"{summary['warnings']} warning(s), {summary['infos']} info(s)")


# json.dumps escapes C0 itself; with ensure_ascii=False (readable non-ASCII text) it keeps
# DEL, C1, U+2028/U+2029 and the bidi controls raw: they become \u escapes, which decode
# to the same text.
_JSON_RAW = re.compile("[\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff]")


def json_text(payload: object) -> str:
    """Indented JSON for output, every control character escaped."""
    return _JSON_RAW.sub(lambda m: f"\\u{ord(m.group()):04x}",
                         json.dumps(payload, ensure_ascii=False, indent=2))


# The version of every `--format json` output's shape; each has a schema in schemas/
# (docs/cli.md lists which). A field added is a minor step, one renamed or removed major.
OUTPUT_SCHEMA_VERSION = "1.1.0"


def output_json(data: dict) -> str:
    """A `--format json` output: its schema_version first (a world state keeps its own)."""
    return json_text({"schema_version": OUTPUT_SCHEMA_VERSION, **data})


def render_json(diagnostics: list[Diagnostic], summary: dict, color: bool = False) -> str:
    payload = {"diagnostics": [d.to_dict() for d in diagnostics], "summary": summary}
    return output_json(payload) + "\n"


def _escape_data(value: str) -> str:
    # The workflow-command escapes for %, CR and LF; other controls made visible.
    return escape(value.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A"))


def _escape_property(value: str) -> str:
    return _escape_data(value).replace(":", "%3A").replace(",", "%2C")


_GITHUB_LEVEL = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "notice"}


def render_github(diagnostics: list[Diagnostic], summary: dict | None,
                  color: bool = False) -> str:
    """GitHub Actions workflow commands, one annotation per diagnostic."""
    lines = []
    for d in diagnostics:
        props = (f"file={_escape_property(d.path)},line={d.line},col={d.column},"
                 f"title={_escape_property(d.code)}")
        lines.append(f"::{_GITHUB_LEVEL[d.severity]} {props}::{_escape_data(d.message)}")
    if summary is not None:
        lines.append(summary_line(summary))
    return "".join(line + "\n" for line in lines)


RENDERERS = {"text": render_text, "json": render_json, "github": render_github}
