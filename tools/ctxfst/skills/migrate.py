"""`ctxfst skills migrate`: CtxFST v2 SKILL.md files into the Agent Skills form.

Top-level extension fields move into `metadata` as strings (lists space-separated,
"NOT <id>" kept); the body is kept byte for byte. Nothing is lost: the skill index
entry of a migrated file equals the original's.
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import yaml

from ..document.parse import split_frontmatter
from ..document.yamlpos import load_yaml
from .model import LIST_FIELDS, SPEC_FIELDS, join_words

_ORDER = ("name", "description", "license", "compatibility", "allowed-tools")


class MigrationError(Exception):
    pass


def _as_metadata_string(key: str, value: Any) -> str:
    if key in LIST_FIELDS and isinstance(value, list):
        return join_words([str(item) for item in value])
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if value.is_integer():
            return str(int(value))
        return format(Decimal(repr(value)), "f")  # never exponent notation
    if isinstance(value, (str, int, float)):
        return str(value)
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


def comment_lines(fm_text: str) -> list[int]:
    """The frontmatter lines (1-based) holding a YAML comment: a `#` outside every
    scalar's span (so not one in a quoted string or a block scalar), after white space
    or at a line's start."""
    spans = [(token.start_mark.index, token.end_mark.index)
             for token in yaml.scan(fm_text) if isinstance(token, yaml.ScalarToken)]
    found, span = [], 0
    for index, char in enumerate(fm_text):
        if char != "#" or (index and not fm_text[index - 1].isspace()):
            continue
        while span < len(spans) and spans[span][1] <= index:
            span += 1
        if span < len(spans) and spans[span][0] <= index:
            continue  # inside a scalar
        line = fm_text.count("\n", 0, index) + 1
        if not found or found[-1] != line:
            found.append(line)
    return found


def migrate_text(text: str, path: str = "SKILL.md",
                 drop_comments: bool = False) -> tuple[str, bool]:
    """(new text, changed). Raises MigrationError when the file cannot be migrated, or
    when its frontmatter has comments a rewrite would drop and drop_comments is off."""
    if text.startswith("\ufeff"):
        text = text[1:]
    newline = "\r\n" if "\r\n" in text else "\n"
    text = text.replace("\r\n", "\n")
    fm_text, body_start, problem = split_frontmatter(text, path)
    if problem is not None or fm_text is None:
        raise MigrationError(problem.message if problem else "no frontmatter")
    loaded = load_yaml(fm_text, path, 1)
    if not loaded.ok or not isinstance(loaded.value, dict):
        raise MigrationError("the frontmatter is not a valid YAML mapping; run "
                             "`ctxfst validate` for details")
    data = loaded.value
    extensions = [key for key in data if key not in SPEC_FIELDS]
    if not extensions:
        return text.replace("\n", newline), False
    metadata = data.get("metadata") or {}
    if not isinstance(metadata, dict):
        raise MigrationError("'metadata' must be a mapping")
    clashes = [key for key in extensions if key in metadata]
    if clashes:
        raise MigrationError(f"{', '.join(clashes)} given both at the top level and in "
                             "metadata")
    try:
        commented = comment_lines(fm_text)
    except yaml.YAMLError as error:  # (the loader took it; PyYAML's scanner did not)
        raise MigrationError(f"the frontmatter cannot be scanned as YAML: {error}") from None
    if commented and not drop_comments:
        raise MigrationError(f"the frontmatter has YAML comments (line "
                             f"{', '.join(str(n + 1) for n in commented[:5])}) that the "
                             "rewrite would drop; move them into the body, or pass "
                             "--drop-comments")
    migrated: dict[str, Any] = {key: data[key] for key in _ORDER if key in data}
    new_metadata = {key: _as_metadata_string(key, value) for key, value in metadata.items()}
    for key in extensions:
        new_metadata[key] = _as_metadata_string(key, data[key])
    migrated["metadata"] = new_metadata
    front = yaml.safe_dump(migrated, sort_keys=False, allow_unicode=True, width=10_000,
                           default_flow_style=False)
    body = "\n".join(text.split("\n")[body_start:])
    return f"---\n{front}---\n{body}".replace("\n", newline), True
