"""The SKILL.md frontmatter record (CtxFST v2 dialect, extension fields at top level)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any

from pydantic import Field

from ..diagnostics import Diagnostic
from ..document.model import StringList, WorldModelFields
from ..document.yamlpos import SourceMap

# The Agent Skills naming rule: lowercase letters, digits and single hyphens.
SKILL_NAME_PATTERN = r"^[a-z0-9]+(-[a-z0-9]+)*$"


class SkillRecord(WorldModelFields):
    """Frontmatter of skills/<name>/SKILL.md."""

    name: Annotated[str, Field(strict=True, min_length=1, max_length=64)]
    description: Annotated[str, Field(strict=True, min_length=1, max_length=1024)]
    related_nodes: StringList = Field(default_factory=list, description="Graph anchors.")


@dataclass
class ParsedSkill:
    path: str
    fs_path: Any
    frontmatter: dict[str, Any] | None
    source_map: SourceMap
    directory_name: str | None
    record: SkillRecord | None = None
    body: str = ""
    diagnostics: list[Diagnostic] = field(default_factory=list)
