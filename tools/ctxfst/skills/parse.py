"""Parse skills/<name>/SKILL.md into a typed skill record with located diagnostics."""

from __future__ import annotations

import re
from pathlib import PurePosixPath

from ..diagnostics import diag
from ..document.parse import load_frontmatter, validate_record
from ..document.source import Source, load_text
from ..document.yamlpos import SourceMap
from .model import SKILL_NAME_PATTERN, ParsedSkill, SkillRecord

SKILL_FILE = "SKILL.md"
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
    record = validate_record(skill, SkillRecord, data, (), "skill",
                             0, ("name", "description"))
    skill.record = record
    name = data.get("name")
    if isinstance(name, str) and name:
        pos = skill.source_map.value(("name",))
        if not _NAME.match(name) or len(name) > 64:
            skill.diagnostics.append(diag(
                "CTX401", f"skill name {name!r} must be 1-64 lowercase letters, digits and "
                "single hyphens, not starting or ending with a hyphen", source.path,
                pos.line, pos.column))
        elif directory and name != directory:
            skill.diagnostics.append(diag(
                "CTX402", f"skill name '{name}' differs from its directory '{directory}'",
                source.path, pos.line, pos.column))
    return skill
