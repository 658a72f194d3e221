"""Finding input files. Kept free of heavy imports: doit loads it on every run."""

from __future__ import annotations

import os
from pathlib import Path

# Folders never searched for documents.
SKIP_DIRS = {".git", ".venv", "venv", "node_modules", "__pycache__", ".ctxfst", "build",
             ".pytest_cache", ".hypothesis", ".mypy_cache", ".tox"}


def walk(directory: Path, suffixes: tuple[str, ...] = (".md",),
         follow_links: bool = False) -> list[Path]:
    """Files below directory ending in one of suffixes, in a stable order."""
    found = []
    for current, dirs, files in os.walk(directory, followlinks=follow_links):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.startswith("."))
        found.extend(Path(current) / name for name in files if name.endswith(suffixes))
    return sorted(found)


def display_path(path: Path) -> str:
    """A path as diagnostics show it: as given, or relative to the working directory
    when it is an absolute path inside it."""
    if path.is_absolute():
        cwd = Path.cwd()
        if cwd in path.parents:
            return path.relative_to(cwd).as_posix()
    return path.as_posix()


def project_relative(root: Path, path, fallback: str | None = None) -> str:
    """A file's POSIX path relative to the project root. A link that leaves the project
    keeps the name it has inside it (or `fallback`, the path as given, when there is one)."""
    try:
        return Path(path).resolve().relative_to(root.resolve()).as_posix()
    except (ValueError, TypeError):
        if fallback is not None:
            return Path(fallback).as_posix()
        return Path(os.path.relpath(Path(path).absolute(), root.absolute())).as_posix()


def project_files(config) -> list[Path]:
    """Every input of a project (a Config): documents, skills, and extra-edge files."""
    files: list[Path] = []
    if config.content_dir.is_dir():
        files.extend(walk(config.content_dir))
    if config.skills_dir.is_dir():
        # Skill folders may be links; only those inside the project are read.
        root = config.root.resolve()
        files.extend(path for path in walk(config.skills_dir, follow_links=True)
                     if root in path.resolve().parents)
    if config.content_dir.is_dir():
        files.extend(sorted({path for pattern in config.build.extra_edges
                             for path in config.content_dir.glob(pattern) if path.is_file()}))
    runtime_edges = config.root / ".ctxfst" / "runtime.edges.json"
    if runtime_edges.is_file():  # outcomes the agent loop recorded, merged on the next build
        files.append(runtime_edges)
    return files
