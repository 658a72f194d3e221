"""Parse skills/<name>/SKILL.md (either dialect) into a typed skill record."""

from __future__ import annotations

import re
from pathlib import PurePosixPath
from typing import Any

from ..diagnostics import Diagnostic, diag
from ..document.model import path_problem
from ..document.parse import load_frontmatter, short_repr, validate_record, wrong_type
from ..document.source import Source, load_text
from ..document.yamlpos import SourceMap
from .model import (
    LIST_FIELDS,
    SKILL_NAME_PATTERN,
    WORLD_MODEL_FIELDS,
    ParsedSkill,
    SkillRecord,
    split_words,
)

_NAME = re.compile(SKILL_NAME_PATTERN)


def parse_skill(source: Source) -> ParsedSkill:
    directory = PurePosixPath(source.path).parent.name or None
    skill = ParsedSkill(source.path, source.fs_path, None, SourceMap(), directory)
    text, problem = load_text(source)
    if problem is not None:
        skill.diagnostics.append(problem)
        return skill
    assert text is not None
    data, skill.source_map, body_start = load_frontmatter(text, source.path, skill.diagnostics)
    if data is None:
        return skill
    skill.frontmatter = data
    skill.body = "\n".join(text.split("\n")[body_start:])
    normalized = _from_metadata(skill, data)
    allowed_tools = data.get("allowed-tools")
    if allowed_tools is not None and not isinstance(allowed_tools, str):
        wrong_type(skill, ("allowed-tools",), "allowed-tools", "a space-separated string",
                   allowed_tools)
    skill.record = validate_record(skill, SkillRecord, normalized, (), "skill", 0,
                                   ("name", "description"))
    _check_name(skill, data)
    _check_script(skill, data)
    if "tenant" in data:  # facts from this skill belong to that tenant (see docs/facts.md)
        from ..document.facts import tenant_problem
        from ..document.model import diagnostic_at

        problem = tenant_problem(data["tenant"])
        if problem is not None:
            skill.diagnostics.append(diagnostic_at(skill, ("tenant",), "CTX709",
                                                   f"tenant {problem}"))
    return skill


def _from_metadata(skill: ParsedSkill, data: dict) -> dict:
    """Lift world-model fields written as metadata strings to the top level."""
    metadata = data.get("metadata")
    top = [key for key in WORLD_MODEL_FIELDS if key in data]
    if not isinstance(metadata, dict):
        skill.dialect = "ctxfst-v2" if top else "agent-skills"
        return data
    lifted = [key for key in WORLD_MODEL_FIELDS if key in metadata]
    skill.dialect = "ctxfst-v2" if top and not lifted else (
        "agent-skills" if lifted and not top else ("mixed" if top else "agent-skills"))
    normalized = dict(data)
    for key in lifted:
        path = ("metadata", key)
        if key in top:
            skill.diagnostics.append(_at(skill, path, "CTX412",
                                         f"'{key}' is given both at the top level and in "
                                         "metadata; keep one"))
            continue
        value = metadata[key]
        if not isinstance(value, str):
            continue  # reported as a non-string metadata value by the record check
        converted = _convert(skill, key, value, path)
        if converted is not None:
            normalized[key] = converted
            skill.source_map.alias((key,), path)  # errors on it point into metadata
    return normalized


def _convert(skill: ParsedSkill, key: str, value: str, path: tuple) -> Any:
    text = value.strip()
    if key in LIST_FIELDS:
        return split_words(text)
    if key == "idempotent":
        if text.lower() in ("true", "false"):
            return text.lower() == "true"
        skill.diagnostics.append(_at(skill, path, "CTX103",
                                     f"metadata idempotent {value!r} must be \"true\" or "
                                     "\"false\""))
        return None
    if key == "cost":
        try:
            return float(text)
        except ValueError:
            return text  # a level word, or an error the record check reports
    return text


def _at(skill: ParsedSkill, path: tuple, code: str, message: str) -> Diagnostic:
    pos = skill.source_map.value(path)
    return diag(code, message, skill.path, pos.line, pos.column)


def _check_name(skill: ParsedSkill, data: dict) -> None:
    name = data.get("name")
    if not isinstance(name, str) or not name:
        return
    pos = skill.source_map.value(("name",))
    if not _NAME.match(name) or len(name) > 64:
        skill.diagnostics.append(diag(
            "CTX401", f"skill name {name!r} must be 1-64 lowercase letters, digits and "
            "single hyphens, not starting or ending with a hyphen", skill.path,
            pos.line, pos.column))
    elif skill.directory_name and name != skill.directory_name:
        skill.diagnostics.append(diag(
            "CTX402", f"skill name '{name}' differs from its directory "
            f"'{skill.directory_name}'", skill.path, pos.line, pos.column))


def _check_script(skill: ParsedSkill, data: dict) -> None:
    """`script` (top level or metadata): a relative file path inside the skill's folder,
    which the `command` executor runs."""
    metadata = data.get("metadata") if isinstance(data.get("metadata"), dict) else {}
    if "script" in data:
        path, value = ("script",), data["script"]
    elif "script" in metadata:
        path, value = ("metadata", "script"), metadata["script"]
    else:
        return
    if not isinstance(value, str):
        if len(path) == 1:  # a metadata value that is no string is reported as such
            wrong_type(skill, path, "script", "a file path inside the skill's folder", value)
        return
    if not value:
        return  # no script: the command executor says so when asked to run it
    problem = path_problem(value)
    if problem is None and (PurePosixPath(value).is_absolute() or _climbs_out(value)):
        problem = "is not inside the skill's folder"
    if problem is not None:
        skill.diagnostics.append(_at(skill, path, "CTX414",
                                     f"script {short_repr(value)} {problem}"))


def _climbs_out(value: str) -> bool:
    depth = 0
    for part in value.replace("\\", "/").split("/"):
        depth += -1 if part == ".." else 0 if part in ("", ".") else 1
        if depth < 0:
            return True
    return False
