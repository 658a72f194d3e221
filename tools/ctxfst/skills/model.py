"""The skill model: SKILL.md frontmatter in either dialect, as one typed record.

- CtxFST v2: world-model fields at the top level of the frontmatter.
- Agent Skills: only name, description, license, compatibility, metadata (string to
  string) and allowed-tools at the top level; the world-model fields go in `metadata`
  as strings, lists space-separated ("state:a NOT state:b").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any

from pydantic import Field

from ..diagnostics import Diagnostic
from ..document.model import StringList, WorldModelFields, strip_not
from ..document.yamlpos import SourceMap

# The Agent Skills naming rule: lowercase letters, digits and single hyphens.
SKILL_NAME_PATTERN = r"^[a-z0-9]+(-[a-z0-9]+)*$"
SPEC_FIELDS = ("name", "description", "license", "compatibility", "metadata", "allowed-tools")
WORLD_MODEL_FIELDS = ("preconditions", "postconditions", "related_nodes", "related_skills",
                      "cost", "idempotent")
LIST_FIELDS = ("preconditions", "postconditions", "related_nodes", "related_skills")
COST_LEVELS = {"low": 1.0, "medium": 2.0, "high": 3.0}


class SkillRecord(WorldModelFields):
    """A skill's frontmatter, normalised (extension fields at the top level)."""

    name: Annotated[str, Field(strict=True, min_length=1, max_length=64)]
    description: Annotated[str, Field(strict=True, min_length=1, max_length=1024)]
    license: Annotated[str, Field(strict=True)] | None = None
    compatibility: Annotated[str, Field(strict=True, max_length=500)] | None = None
    metadata: dict[str, Annotated[str, Field(strict=True)]] | None = None
    related_nodes: StringList = Field(default_factory=list, description="Graph anchors.")

    def cost_number(self) -> float:
        """low=1, medium=2, high=3, or the number given; 1 when unset."""
        if self.cost is None:
            return 1.0
        return COST_LEVELS[self.cost] if isinstance(self.cost, str) else float(self.cost)

    def split_conditions(self) -> dict[str, list[str]]:
        """Positive/negative preconditions and add/delete effects."""
        out: dict[str, list[str]] = {"pre_positive": [], "pre_negative": [], "add": [],
                                     "delete": []}
        for reference in self.preconditions:
            negated, state = strip_not(reference)
            out["pre_negative" if negated else "pre_positive"].append(state)
        for reference in self.postconditions:
            negated, state = strip_not(reference)
            out["delete" if negated else "add"].append(state)
        return out


@dataclass
class ParsedSkill:
    path: str
    fs_path: Any
    frontmatter: dict[str, Any] | None
    source_map: SourceMap
    directory_name: str | None
    record: SkillRecord | None = None
    dialect: str = "ctxfst-v2"
    body: str = ""
    diagnostics: list[Diagnostic] = field(default_factory=list)

    def location(self, path: tuple) -> str:
        pos = self.source_map.value(path)
        return f"{self.path}:{pos.line}:{pos.column}"


def split_words(text: str) -> list[str]:
    """A metadata list ("state:a NOT state:b") as items (["state:a", "NOT state:b"])."""
    items: list[str] = []
    words = text.split()
    index = 0
    while index < len(words):
        if words[index] == "NOT" and index + 1 < len(words):
            items.append(f"NOT {words[index + 1]}")
            index += 2
        else:
            items.append(words[index])
            index += 1
    return items


def join_words(items: list[str]) -> str:
    return " ".join(items)
