"""The knowledge-base view: many documents and skills, one entity catalog."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from ..diagnostics import Diagnostic
from ..skills.model import ParsedSkill
from ..skills.parse import SKILL_FILE, parse_skill
from .model import Entity, ParsedDocument
from .parse import looks_like_ctxfst, parse_document
from .source import Source

# Folders never searched for documents.
_SKIP_DIRS = {".git", ".venv", "venv", "node_modules", "__pycache__", ".ctxfst", "build",
              ".pytest_cache", ".hypothesis", ".mypy_cache", ".tox"}


@dataclass
class KnowledgeBase:
    root: Path
    documents: list[ParsedDocument] = field(default_factory=list)
    skills: list[ParsedSkill] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    @property
    def file_count(self) -> int:
        return len(self.documents) + len(self.skills)

    def parse_diagnostics(self) -> list[Diagnostic]:
        found: list[Diagnostic] = []
        for item in (*self.documents, *self.skills):
            found.extend(item.diagnostics)
        return found


def display_path(path: Path) -> str:
    """A path as diagnostics show it: as given, or relative to the working directory
    when it is an absolute path inside it."""
    if path.is_absolute():
        cwd = Path.cwd()
        if cwd in path.parents:
            return path.relative_to(cwd).as_posix()
    return path.as_posix()


def walk(directory: Path) -> list[Path]:
    """Markdown files below directory, in a stable order, skipping tool folders."""
    found = []
    for current, dirs, files in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS and not d.startswith("."))
        found.extend(Path(current) / name for name in files if name.endswith(".md"))
    return sorted(found)


@dataclass(frozen=True)
class Input:
    """A file to load, and whether the user named it (named files must be CtxFST)."""

    source: Source
    explicit: bool


def inputs_for(paths: list[Path], explicit_files: bool = True) -> list[Input]:
    result: list[Input] = []
    seen: set[Path] = set()
    for path in paths:
        files = walk(path) if path.is_dir() else [path]
        for file in files:
            resolved = file.resolve()
            if resolved in seen:
                continue
            seen.add(resolved)
            result.append(Input(Source(display_path(file), file),
                                explicit=explicit_files and not path.is_dir()))
    return result


def load_kb(root: Path, inputs: list[Input]) -> KnowledgeBase:
    kb = KnowledgeBase(root=root)
    for item in inputs:
        if Path(item.source.path).name == SKILL_FILE:
            kb.skills.append(parse_skill(item.source))
            continue
        doc = parse_document(item.source)
        if (not item.explicit and doc.frontmatter is None and doc.text
                and not looks_like_ctxfst(doc.text)):
            kb.skipped.append(item.source.path)  # plain Markdown beside the documents
            continue
        kb.documents.append(doc)
    return kb


@dataclass
class Declaration:
    """Where an entity was declared: the document and its index in entities[]."""

    doc: ParsedDocument
    index: int

    def location(self) -> str:
        pos = self.doc.source_map.value(("entities", self.index, "id"))
        return f"{self.doc.path}:{pos.line}:{pos.column}"


@dataclass
class CatalogEntry:
    entity: Entity
    declarations: list[Declaration]


def merge_entities(first: Entity, other: Entity) -> Entity:
    """Merge an identical re-declaration: lists are unioned, first value wins otherwise."""
    data = first.model_dump(exclude_none=True)
    for key, value in other.model_dump(exclude_none=True).items():
        if key not in data:
            data[key] = value
        elif isinstance(data[key], list) and isinstance(value, list):
            data[key] = data[key] + [item for item in value if item not in data[key]]
    return Entity.model_validate(data)
