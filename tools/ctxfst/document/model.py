"""Typed records of a CtxFST document: entities, chunk declarations, the frontmatter.

Unknown fields are kept (extra="allow") so every upstream version passes through
unchanged. The JSON Schemas in schemas/ are generated from these models.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, field_validator

from ..diagnostics import Diagnostic, diag
from .ids import ID_PATTERN
from .yamlpos import SourceMap

SCHEMA_VERSION = "1.0.0"

ENTITY_ID_PREFIXES = ("entity", "state", "action", "goal", "agent", "evidence")

EntityType = Literal[
    "skill", "tool", "library", "framework", "platform", "database", "architecture",
    "protocol", "concept", "domain", "product",
    "state", "action", "goal", "agent", "evidence",
]
Priority = Literal["low", "medium", "high", "critical"]
ChunkType = Literal["text", "image", "video", "audio"]
CostLevel = Literal["low", "medium", "high"]
# The build stores numbers in Parquet int32/int64/float64 columns and JSON: a value
# that does not fit is a validation error, never a failed build.
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
Cost = CostLevel | Annotated[float, Field(gt=0, strict=True, allow_inf_nan=False)]
Identifier = Annotated[str, Field(pattern=ID_PATTERN, min_length=1, max_length=256)]
StringList = list[Annotated[str, Field(strict=True)]]


def iso_8601(value: Any) -> Any:
    """Accept a YAML date/datetime (unquoted) or an ISO 8601 string (quoted), as text."""
    if isinstance(value, (_dt.date, _dt.datetime)):
        return value.isoformat()
    if isinstance(value, str):
        try:
            _dt.datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            raise ValueError(f"{value!r} is not an ISO 8601 date or date-time such as "
                             "2026-03-12") from None
    return value


NAME_MAX = 255   # bytes in one file name (most file systems)
PATH_MAX = 4096  # bytes in a whole path (Linux)


def path_problem(value: str) -> str | None:
    """Why value cannot name a file on any common system, or None when it can.

    Checked before the OS sees the path: it raises on a NUL byte, and on a name that is
    too long only on some file systems; validation must not depend on either.
    """
    if "\x00" in value:
        return "contains a NUL byte"
    size = len(value.encode("utf-8", "surrogatepass"))
    if size > PATH_MAX:
        return f"is {size:,} bytes long; a path has at most {PATH_MAX:,}"
    for name in value.replace("\\", "/").split("/"):
        size = len(name.encode("utf-8", "surrogatepass"))
        if size > NAME_MAX:
            return f"has a name of {size:,} bytes; a file name has at most {NAME_MAX}"
    return None


class _Record(BaseModel):
    model_config = ConfigDict(extra="allow", str_strip_whitespace=False)

    def extra_fields(self) -> dict[str, Any]:
        return dict(self.__pydantic_extra__ or {})

    def field_value(self, name: str) -> Any:
        """A field's value, declared or extra; None where the record has no such field.
        (getattr(record, name, None) takes 2 µs for an absent one, pydantic building
        the AttributeError it drops: 240,000 such lookups at 10,000 documents.)"""
        value = self.__dict__.get(name)
        if value is None and self.__pydantic_extra__:
            return self.__pydantic_extra__.get(name)
        return value


class WorldModelFields(_Record):
    """Fields of the world model, shared by entities and chunk declarations."""

    preconditions: StringList = Field(default_factory=list, description=(
        "State ids that must hold; 'NOT <id>' for a state that must not hold."))
    postconditions: StringList = Field(default_factory=list, description=(
        "State (or goal) ids produced; 'NOT <id>' for a state removed."))
    related_skills: StringList = Field(default_factory=list, description=(
        "Names of skills (skills/<name>/SKILL.md) associated with this record."))
    cost: Cost | None = Field(default=None, description="low, medium, high or a positive number.")
    idempotent: StrictBool | None = None


class Entity(WorldModelFields):
    """One node of the entity catalog."""

    id: Identifier
    name: Annotated[str, Field(strict=True)]
    type: EntityType
    aliases: StringList = Field(default_factory=list)


class ChunkRecord(WorldModelFields):
    """A chunk as declared in the frontmatter `chunks[]` list."""

    id: Identifier
    context: Annotated[str, Field(strict=True)] = ""
    tags: StringList = Field(default_factory=list)
    entities: StringList = Field(default_factory=list, description="Entity ids mentioned.")
    state_refs: StringList = Field(default_factory=list)
    created_at: str | None = Field(default=None, description="ISO 8601 date or date-time.")
    version: Annotated[StrictInt, Field(ge=1, le=INT64_MAX)] | None = None
    priority: Priority | None = None
    dependencies: StringList = Field(default_factory=list, description=(
        "Chunk ids (anywhere in the knowledge base) to read before this one."))
    type: ChunkType | None = None
    content_path: Annotated[str, Field(strict=True, min_length=1)] | None = None
    source: str | None = None

    _iso_date = field_validator("created_at", mode="before")(lambda cls, v: iso_8601(v))


class Frontmatter(_Record):
    """The YAML frontmatter of a CtxFST document."""

    title: Annotated[str, Field(strict=True)] | None = None
    entities: list[Entity] = Field(default_factory=list)
    chunks: list[ChunkRecord] = Field(default_factory=list)


@dataclass
class ChunkBody:
    """A chunk passage found in the document body."""

    id: str
    content: str
    line: int          # line of the opening tag
    column: int
    end_line: int      # line of the closing tag
    syntax: str        # "tag" for <Chunk>, "marker" for %% chunk-start %%
    offset: int = -1   # character offset of content in the document text


@dataclass
class ParsedDocument:
    """One parsed CtxFST document with positions and its own diagnostics."""

    path: str
    fs_path: Any
    frontmatter: dict[str, Any] | None
    source_map: SourceMap
    title: str | None = None
    entities: list[tuple[int, Entity]] = field(default_factory=list)
    chunks: list[tuple[int, ChunkRecord]] = field(default_factory=list)
    bodies: dict[str, ChunkBody] = field(default_factory=dict)
    diagnostics: list[Diagnostic] = field(default_factory=list)
    text: str = ""
    text_sha256: str = ""  # of the parsed text, kept when the text is dropped
    # Valid `facts:` entries by record: ("document",), ("entities", i), ("chunks", i).
    facts: dict[tuple, list] = field(default_factory=dict)

    def location(self, path: tuple) -> str:
        pos = self.source_map.value(path)
        return f"{self.path}:{pos.line}:{pos.column}"


def diagnostic_at(item: Any, path: tuple, code: str, message: str) -> Diagnostic:
    """A diagnostic located at a frontmatter path of a parsed document or skill."""
    pos = item.source_map.value(path)
    return diag(code, message, item.path, pos.line, pos.column)


def strip_not(reference: str) -> tuple[bool, str]:
    """Split a condition into (negated, id): 'NOT state:a' -> (True, 'state:a')."""
    if reference.startswith("NOT "):
        return True, reference[4:].strip()
    return False, reference.strip()
