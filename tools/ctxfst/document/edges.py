"""Extra edges: hand-written or runtime edges merged into the entity graph.

Upstream's --extra-edges format, in JSON or YAML: a list of
{source, target, relation, score?, shared_chunk_count?, properties?}.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..diagnostics import Diagnostic, diag
from .model import INT32_MAX, iso_8601
from .parse import validate_record
from .source import Source, load_text
from .yamlpos import SourceMap, load_yaml

EDGE_SUFFIXES = (".edges.json", ".edges.yaml", ".edges.yml")
Relation = Literal["SIMILAR", "REQUIRES", "LEADS_TO", "EVIDENCE", "IMPLIES", "COMPLETED",
                   "BLOCKED_BY"]


class EdgeProperties(BaseModel):
    model_config = ConfigDict(extra="allow")

    timestamp: str | None = Field(default=None, description="ISO 8601 date-time.")
    confidence: Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)] | None = None
    result_summary: str | None = None
    status: Literal["active", "expired", "failed"] | None = None

    _iso = field_validator("timestamp", mode="before")(lambda cls, v: iso_8601(v))


class ExtraEdge(BaseModel):
    """One edge of an extra-edges file."""

    model_config = ConfigDict(extra="allow")

    source: Annotated[str, Field(strict=True, min_length=1)]
    target: Annotated[str, Field(strict=True, min_length=1)]
    relation: Relation
    # JSON's NaN/Infinity and 1e999 arrive as strings that lax float parsing accepts.
    score: Annotated[float, Field(strict=False, allow_inf_nan=False)] | None = None
    shared_chunk_count: Annotated[int, Field(ge=0, le=INT32_MAX, strict=True)] | None = None
    properties: EdgeProperties = Field(default_factory=EdgeProperties)


@dataclass
class EdgeFile:
    path: str
    fs_path: Any
    source_map: SourceMap
    edges: list[tuple[int, ExtraEdge]] = field(default_factory=list)
    diagnostics: list[Diagnostic] = field(default_factory=list)

    def location(self, path: tuple) -> str:
        pos = self.source_map.value(path)
        return f"{self.path}:{pos.line}:{pos.column}"


def is_edge_file(name: str) -> bool:
    return name.endswith(EDGE_SUFFIXES)


def parse_edge_file(source: Source) -> EdgeFile:
    edge_file = EdgeFile(source.path, source.fs_path, SourceMap())
    text, problem = load_text(source)
    if problem is not None:
        edge_file.diagnostics.append(problem)
        return edge_file
    assert text is not None
    loaded = load_yaml(text, source.path)  # JSON is YAML too, so one loader serves both
    edge_file.source_map = loaded.source_map
    edge_file.diagnostics.extend(loaded.diagnostics)
    if not loaded.ok:
        return edge_file
    items = loaded.value
    if not isinstance(items, list):
        edge_file.diagnostics.append(diag("CTX601", "an extra-edges file must be a list of "
                                          "edges {source, target, relation}", source.path))
        return edge_file
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            pos = edge_file.source_map.value((index,))
            edge_file.diagnostics.append(diag("CTX602", f"edge #{index + 1} must be a mapping",
                                              source.path, pos.line, pos.column))
            continue
        edge = validate_record(edge_file, ExtraEdge, item, (index,), "edge", index,
                               ("source", "target", "relation"))
        if edge is not None:
            edge_file.edges.append((index, edge))
    return edge_file
