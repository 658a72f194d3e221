"""The files the rules read beside the sources they check: the passages content_path
names, the skills' folders and scripts. Validation and the build read them from the
work tree (WORK_TREE); the pre-commit hook reads them as the git index holds them
(validation.IndexTree), so that a commit is checked as it will be, whatever the work
tree holds."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from ..files import inside
from .source import Source, load_text


class TreeFiles:
    """The work tree's files."""

    def resolve(self, path: Path) -> Path:
        """path with every link followed (OSError, or RuntimeError for a link loop)."""
        return path.resolve()

    def inside(self, root: Path, path: Path) -> bool:
        """Whether path, links followed, is the (resolved) root or below it."""
        return inside(root, path)

    def size(self, path: Path) -> int | None:
        """The size of path when it is a regular file (links followed), else None."""
        try:
            info = path.stat()
        except OSError:  # missing, a name too long for this file system, ...
            return None
        return info.st_size if stat.S_ISREG(info.st_mode) else None

    def exists(self, path: Path) -> bool:
        return path.exists()

    def text(self, path: Path) -> str | None:
        """A regular file's text (size-limited, as every source), or None."""
        return load_text(Source(str(path), path))[0]

    def folders(self, folder: Path) -> list[tuple[str, bool]]:
        """(name, whether it is a link) of each folder in folder (links to folders
        included), by name."""
        if not folder.is_dir():
            return []
        return sorted((entry.name, entry.is_symlink()) for entry in os.scandir(folder)
                      if entry.is_dir(follow_symlinks=True))


WORK_TREE = TreeFiles()
