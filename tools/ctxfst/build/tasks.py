"""doit tasks for a ctxfst project. dodo.py re-exports every task_* defined here."""

from __future__ import annotations

from pathlib import Path

from ..config import find_project
from ..document.kb import walk

DOIT_CONFIG = {"default_tasks": ["validate"], "verbosity": 2}

__all__ = ["DOIT_CONFIG", "task_validate"]


def _sources() -> list[str]:
    config = find_project(Path.cwd())
    if config is None:
        return []
    files = []
    for folder in config.source_dirs:
        if folder.is_dir():
            files.extend(str(path) for path in walk(folder))
    if config.config_file is not None:
        files.append(str(config.config_file))
    return files


def _validate() -> bool:
    import sys

    from ..diagnostics import render_text
    from ..validation import check_paths

    report = check_paths([])
    sys.stdout.write(render_text(report.diagnostics, report.summary))
    return report.exit_code() == 0


def task_validate():
    """Validate the knowledge base (content/ and skills/): the build's first stage."""
    from doit.tools import config_changed

    sources = _sources()
    # file_dep alone misses a deleted file; the list itself is part of the state.
    return {"actions": [_validate], "file_dep": sources,
            "uptodate": [config_changed("\n".join(sources))], "verbosity": 2}
