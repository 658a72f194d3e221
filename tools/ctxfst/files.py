"""Finding input files. Kept free of heavy imports: doit loads it on every run."""

from __future__ import annotations

import os
from pathlib import Path

# Folders never searched for documents.
SKIP_DIRS = {".git", ".venv", "venv", "node_modules", "__pycache__", ".ctxfst", "build",
             ".pytest_cache", ".hypothesis", ".mypy_cache", ".tox"}


def walk(directory: Path, suffixes: tuple[str, ...] = (".md",)) -> list[Path]:
    """Files below directory ending in one of suffixes, in a stable order."""
    found = []
    for current, dirs, files in os.walk(directory):
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


def project_files(config) -> list[Path]:
    """Every input of a project (a Config): documents, skills, and extra-edge files."""
    files: list[Path] = []
    for folder in config.source_dirs:
        if folder.is_dir():
            files.extend(walk(folder))
    if config.content_dir.is_dir():
        files.extend(sorted({path for pattern in config.build.extra_edges
                             for path in config.content_dir.glob(pattern) if path.is_file()}))
    return files
