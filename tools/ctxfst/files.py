"""Finding input files. Kept free of heavy imports: doit loads it on every run."""

from __future__ import annotations

import heapq
import os
import stat
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

# Folders never searched for documents.
SKIP_DIRS = {".git", ".venv", "venv", "node_modules", "__pycache__", ".ctxfst", "build",
             ".pytest_cache", ".hypothesis", ".mypy_cache", ".tox"}


class UnreadableFolder(Exception):
    """A folder that cannot be listed: its files would silently go unchecked."""


def file_identity(info: os.stat_result) -> list[int]:
    """What replacing a file changes: its size, mtime and inode. (Linking it elsewhere
    moves only its ctime: a stage's record of a file it wrote keeps this.)"""
    return [info.st_size, info.st_mtime_ns, info.st_ino]


def file_stamp(info: os.stat_result) -> tuple[int, int, int, int]:
    """What any change to a file changes, as git's index keeps it: size, mtime, ctime and
    inode (utime() moves ctime: an edit that puts size and mtime back is seen)."""
    return info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino


def is_real_folder(path) -> bool:
    """Whether path is a folder itself (not a link to one, not missing)."""
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def inside(root: Path, path) -> bool:
    """Whether path, links resolved, is the (resolved) project root or below it. A path
    the OS cannot even name (a NUL byte) is not inside anything."""
    try:
        return Path(path).resolve().is_relative_to(root)
    except (OSError, ValueError, RuntimeError):  # RuntimeError: a link loop (Python 3.11)
        return False


@dataclass
class Walk:
    """What a walk found, and what it refused (as diagnostics, when asked to collect them)."""

    paths: list[str] = field(default_factory=list)  # the files, in Path order
    problems: list = field(default_factory=list)
    # (folder, mtime, ctime, inode) of every folder listed: a listing changes only with
    # them (utime() moves ctime: a put-back mtime is seen)
    folders: list[tuple[str, int, int, int]] = field(default_factory=list)

    @property
    def files(self) -> list[Path]:
        # (Paths made when asked: at 100,000 files, making them is most of a walk)
        return [Path(path) for path in self.paths]


def path_order(path: str) -> str:
    """A key that sorts paths as strings as Path objects sort (by their parts): the
    separator made NUL, below every character a name can hold (comparing lists of parts
    was most of a 100,000-file walk)."""
    return path.replace(os.sep, "\0")


def walk(directory: Path, suffixes: tuple[str, ...] = (".md",),
         follow_links: bool = False) -> list[Path]:
    """Files below directory ending in one of suffixes, in a stable order. An unreadable
    folder raises UnreadableFolder (os.walk would skip it without a word)."""
    return _walk(directory, suffixes, follow_links, None, None).files


def _walk(directory: Path, suffixes: tuple[str, ...], follow_links: bool,
          root: Path | None, problems: list | None) -> Walk:
    """With root: links (files, and followed folders) that leave it are refused; with
    problems: unreadable folders and refused links become diagnostics there. Followed
    folder links are walked after the real folders, in name order, and a folder is walked
    once (a link back up would otherwise repeat the tree, or never end)."""
    from .diagnostics import diag

    result = Walk(problems=problems if problems is not None else [])
    real = Path(directory).resolve() if follow_links else None
    pending: list[tuple[Path, Path | None]] = [(Path(directory), real)]
    links: list[Path] = []  # a heap: followed folder links, in name order
    seen = {real}
    while pending or links:
        if pending:
            current, real = pending.pop()
        else:
            current = heapq.heappop(links)
            real = current.resolve()
            if (root is not None and not real.is_relative_to(root)) or real in seen:
                continue
            seen.add(real)
        try:
            info = os.stat(current)  # before listing: a later change moves its mtime
            result.folders.append((str(current), *file_stamp(info)))
            with os.scandir(current) as listing:
                entries = list(listing)
        except OSError as error:
            message = f"cannot read folder: {error.strerror or error}; its files are not checked"
            if problems is None:
                raise UnreadableFolder(f"{display_path(current)}: {message}") from None
            result.problems.append(diag("CTX001", message, display_path(current)))
            continue
        for entry in entries:
            name = entry.name
            try:
                is_dir = entry.is_dir()
            except OSError:
                is_dir = False
            if is_dir:
                if name in SKIP_DIRS or name.startswith("."):
                    continue
                if problems is not None and not utf8_name(name):
                    result.problems.append(not_utf8(Path(entry.path), "folder"))
                    continue
                if not entry.is_symlink():
                    child = real / name if real is not None else None
                    if child is None or child not in seen:
                        seen.add(child)
                        pending.append((Path(entry.path), child))
                elif follow_links:
                    heapq.heappush(links, Path(entry.path))
                elif root is not None and problems is not None and \
                        not inside(root, entry.path):
                    result.problems.append(_link_out(Path(entry.path)))  # not silently
            elif name.endswith(suffixes):
                if root is not None and entry.is_symlink() and not inside(root, entry.path):
                    if problems is not None:
                        result.problems.append(_link_out(Path(entry.path)))
                    continue
                if problems is not None and not utf8_name(name):
                    result.problems.append(not_utf8(Path(entry.path), "file"))
                    continue
                result.paths.append(entry.path)
    result.paths.sort(key=path_order)
    return result


class WalkMemory:
    """Listings of a project remembered between scans (like git's untracked cache): a
    listing is reused while no folder it listed has changed (an added, removed or renamed
    entry changes its folder's mtime). Whoever scans the same project again and again
    (a server's staleness check) keeps one and passes it to scan_project."""

    def __init__(self) -> None:
        self.walks: dict[tuple, Walk] = {}  # (folder, suffixes, follow_links, root) -> Walk
        # (folder, pattern, root) -> (every folder below with its identity, the files
        # found, what was refused)
        self.globs: dict[tuple, tuple[list, list[Path], list]] = {}


# A file or folder changed this recently may change again within the same clock tick
# and keep its mtime (git's "racy" entries); Linux file times tick in milliseconds.
RACY_NS = 100_000_000


def changed_lately(info: os.stat_result, now_ns: int, racy_ns: int = RACY_NS) -> bool:
    """Whether a file changed within a clock tick of now_ns: it could change again and
    keep its identity (git's "racily clean" entries), so none is remembered for it."""
    return _changed_within(info.st_mtime_ns, info.st_ctime_ns, now_ns, racy_ns)


def _changed_within(mtime_ns: int, ctime_ns: int, now_ns: int, racy_ns: int) -> bool:
    return now_ns - max(mtime_ns, ctime_ns) < racy_ns


def _remembered_walk(directory: Path, suffixes: tuple[str, ...], follow_links: bool,
                     root: Path, memory: WalkMemory | None) -> Walk:
    """_walk with diagnostics, remembered in memory (when given) while no folder it
    listed has changed."""
    if memory is None:
        return _walk(directory, suffixes, follow_links, root, [])
    key = (str(directory), suffixes, follow_links, str(root))
    known = memory.walks.get(key)
    if known is not None and _unchanged(known.folders):
        return Walk(list(known.paths), list(known.problems), known.folders)
    found = _walk(directory, suffixes, follow_links, root, [])
    if _settled(found.folders):
        memory.walks[key] = Walk(list(found.paths), list(found.problems), found.folders)
    else:
        memory.walks.pop(key, None)
    return found


def _unchanged(folders: list[tuple]) -> bool:
    """Whether every folder still has the file_stamp it was listed with (path, *stamp)
    (an unchanged folder has the same entries)."""
    return all(_folder_stamp(path) == tuple(stamp) for path, *stamp in folders)


def _settled(folders: list[tuple]) -> bool:
    """Whether no folder changed within a clock tick of now (else a listing of it is not
    remembered: it could change again and keep its mtime)."""
    import time

    now = time.time_ns()
    return not any(_changed_within(mtime, ctime, now, RACY_NS)
                   for _, _, mtime, ctime, _ in folders)


def _folder_stamp(path: str) -> tuple[int, int, int, int] | None:
    try:
        return file_stamp(os.stat(path))
    except OSError:
        return None


def _link_out(path: Path):
    from .diagnostics import diag

    try:
        target = os.readlink(path)
    except OSError:
        target = "?"
    return diag("CTX809", f"{path.name} is a link to {target} that leaves the project or "
                "never ends; it is not read", display_path(path))


def utf8_name(name: str) -> bool:
    """Whether a name the file system gave is UTF-8 (else it holds surrogate escapes,
    which no artifact, JSON or Parquet, can carry)."""
    if name.isascii():
        return True
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def not_utf8(path: Path, kind: str):
    """CTX811 for a file or folder (kind) whose path is not UTF-8."""
    from .diagnostics import diag

    what = "its files are" if kind == "folder" else "it is"
    return diag("CTX811", f"the {kind} path {ascii(display_path(path))} is not UTF-8 (no "
                f"artifact can name it); {what} not read: rename it", display_path(path))


def display_path(path: Path | str, cwd: str | None = None) -> str:
    """A path as diagnostics show it: as given, or relative to the working directory
    (cwd: os.getcwd(), when the caller asked it already) when it is an absolute path
    inside it."""
    text = os.fspath(path)
    if os.path.isabs(text):
        cwd = cwd or os.getcwd()
        prefix = cwd if cwd.endswith(os.sep) else cwd + os.sep
        if text.startswith(prefix) and len(text) > len(prefix):  # str ops: parents is slow
            return text[len(prefix):].replace(os.sep, "/")
    return Path(text).as_posix()


def plain_relative(relative: str) -> bool:
    """Whether a recorded path (from a manifest or a cache: untrusted) could name a file
    inside the project: relative, no `..`, no NUL."""
    parts = PurePosixPath(relative).parts
    return bool(parts) and not relative.startswith("/") and ".." not in parts \
        and "\0" not in relative


def project_relative(root: Path, path, fallback: str | None = None) -> str:
    """A file's POSIX path relative to the project root. A link that leaves the project
    keeps the name it has inside it (or `fallback`, the path as given, when there is one)."""
    try:
        return Path(path).resolve().relative_to(root.resolve()).as_posix()
    except (ValueError, TypeError):
        if fallback is not None:
            return Path(fallback).as_posix()
        return Path(os.path.relpath(Path(path).absolute(), root.absolute())).as_posix()


class ProjectRelative:
    """project_relative for many files of one root, with the same answers: each folder
    is resolved once and each file only lstat'ed (resolve() costs a syscall per path
    component: 120,000 of them for 10,000 documents)."""

    def __init__(self, root: Path, regular_files: Collection[str] = ()) -> None:
        """regular_files: paths known to be regular files (no link to look for)."""
        self.root = root.resolve()
        self.regular_files = regular_files
        self._folders: dict[str, str | None] = {}  # folder -> its relative path + "/"

    def __call__(self, path, fallback: str | None = None) -> str:
        try:
            text = os.fspath(path)
            if not os.path.isabs(text):
                text = os.path.join(os.getcwd(), text)
            # "." and ".." parts (or a hidden name: rare) take the exact way
            slow = "/." in text or (text not in self.regular_files and os.path.islink(text))
        except (TypeError, ValueError):
            slow = True
        relative = None if slow else self.of_regular(text)
        return relative if relative is not None else project_relative(self.root, path,
                                                                       fallback)

    def of_regular(self, path: str) -> str | None:
        """The relative path of a regular file (no link) the walk found, by its folder
        alone; None when that takes the exact way (__call__)."""
        folder, _, name = path.rpartition(os.sep)
        prefix = self._folders.get(folder, False)
        if prefix is False:
            prefix = self._folders[folder] = self._folder(folder) if (
                os.path.isabs(folder) and "/." not in folder) else None
        return None if prefix is None or name.startswith(".") else prefix + name

    def _folder(self, folder: str) -> str | None:
        try:
            real = Path(folder).resolve()
        except (OSError, RuntimeError):
            return None
        if not real.is_relative_to(self.root):
            return None
        relative = real.relative_to(self.root).as_posix()
        return "" if relative == "." else relative + "/"


def scan_project(config, memory: WalkMemory | None = None) -> Walk:
    """Every input of a project (a Config): documents, skills, and extra-edge files, and
    the diagnostics of what was refused: unreadable folders, files linking out of the
    project (the configured folders themselves are checked inside it by the config).
    memory: listings kept from earlier scans, reused where nothing changed."""
    scan = Walk()
    root = config.root
    content = None
    if config.content_dir.is_dir():
        content = _remembered_walk(config.content_dir, (".md",), False, root, memory)
        scan.paths.extend(content.paths)
        scan.problems.extend(content.problems)
    if config.skills_dir.is_dir():
        # Skill folders may be links; only those inside the project are read (a skill
        # folder linking out is reported by the skill rules, CTX411).
        found = _remembered_walk(config.skills_dir, (".md",), True, root, memory)
        scan.paths.extend(found.paths)
        scan.problems.extend(found.problems)
    if content is not None:  # (globbed anew: a pattern may reach folders the walk skips)
        edges, problems = _extra_edge_files(config, memory)
        scan.paths.extend(edges)
        scan.problems.extend(problems)
    runtime_edges = config.runtime_edges
    if runtime_edges.is_file():  # outcomes the agent loop recorded, merged on the next build
        scan.paths.append(str(runtime_edges))  # .ctxfst links leaving the project: see config
    return scan


def _extra_edge_files(config, memory: WalkMemory | None) -> tuple[list[str], list]:
    edges, problems = set(), []
    patterns = config.build.extra_edges  # relative, no "..": checked by the config
    # "**/<name>" patterns (the default ones) are answered together, by one listing
    names = tuple(pattern[3:] for pattern in patterns if _any_depth_name(pattern))
    if names:
        found, refused = _remembered_names(config.content_dir, names, config.root,
                                           memory)
        edges.update(found)
        problems.extend(refused)
    for pattern in patterns:
        if not _any_depth_name(pattern):
            found, refused = _remembered_glob(config.content_dir, pattern, config.root,
                                              memory)
            edges.update(found)
            problems.extend(refused)
    return [str(path) for path in sorted(edges)], problems


def _any_depth_name(pattern: str) -> bool:
    """Whether a pattern is "**/" and one name with a wildcard: files of such names at
    any depth. (pathlib looks an exact name up instead of listing, which finds it in a
    folder that cannot be listed, and as the file system folds case.)"""
    name = pattern[3:]
    return pattern.startswith("**/") and "/" not in name and "**" not in name \
        and any(char in name for char in "*?[")


def _remembered_names(folder: Path, names: tuple[str, ...], root: Path,
                      memory: WalkMemory | None) -> tuple[list[Path], list]:
    """What folder.glob("**/" + name) finds for each of the names, together (links
    leaving root refused), from one listing of every folder below: as pathlib's glob,
    hidden and skipped folders are listed and folder links are not followed, and a
    name pattern matches as pathlib matches it (fnmatch's syntax, case-sensitive).
    Remembered as _remembered_glob remembers."""
    import fnmatch
    import re

    def search() -> tuple[list, list[tuple[Path, bool]]]:
        # (one pattern for all the names: one match a file, not one a name)
        match = re.compile("|".join(f"(?:{fnmatch.translate(name)})"
                                    for name in names)).fullmatch
        files: list[tuple[str, str, bool]] = []
        folders = _real_folders(folder, files, match)
        return folders, [(Path(path), is_link) for path, _, is_link in files]

    return _remembered((str(folder), names, str(root)), root, search, memory)


def _remembered_glob(folder: Path, pattern: str, root: Path, memory: WalkMemory | None
                     ) -> tuple[list[Path], list]:
    """The files below folder matching pattern (links leaving root refused). A "**"
    pattern reads every folder below, the hidden and skipped ones too, so its answer is
    remembered while none of those folders has changed and it matched no link (a link's
    target can change with no folder changing)."""
    def search() -> tuple[list | None, list[tuple[Path, bool]]]:
        # (the folders are listed only to be remembered)
        folders = _real_folders(folder) if memory is not None and "**" in pattern else None
        real_folder = os.path.realpath(folder)
        # a match that is a link, or reached through a folder link (a component other
        # than "**" follows one): its target can change with no folder here changing
        return folders, [(path, os.path.realpath(path) != os.path.join(
            real_folder, os.path.relpath(path, folder))) for path in folder.glob(pattern)]

    return _remembered((str(folder), pattern, str(root)), root, search, memory)


def _remembered(key: tuple, root: Path, search, memory: WalkMemory | None
                ) -> tuple[list[Path], list]:
    """The files search() matches (links leaving root refused), remembered in memory
    under key while the folders it listed are unchanged: search() gives those folders
    (None: not to be remembered) and each match with whether a link leads to it (one
    does: not remembered, its target can change with no folder changing)."""
    known = memory.globs.get(key) if memory is not None else None
    if known is not None and _unchanged(known[0]):
        return list(known[1]), list(known[2])
    folders, matches = search()
    found, refused = [], []
    for path, linked in matches:
        if path.is_dir() or not path.exists():
            continue  # (a FIFO or device is kept: its reader says it is no regular file)
        if not utf8_name(str(path)):
            refused.append(not_utf8(path, "file"))
        elif not linked or inside(root, path):
            found.append(path)
        else:
            refused.append(_link_out(path))
    if memory is not None:
        if folders is not None and not any(linked for _, linked in matches) \
                and _settled(folders):
            memory.globs[key] = (folders, list(found), list(refused))
        else:
            memory.globs.pop(key, None)
    return found, refused


def _real_folders(folder: Path, files: list[tuple[str, str, bool]] | None = None,
                  wanted: Callable[[str], Any] | None = None
                  ) -> list[tuple]:
    """Every folder a "**" glob lists below folder (folder links are not followed), with
    its file_stamp (path, *stamp), in a stable order; with files, the other entries of
    those folders (whose names `wanted` accepts, when given) are added to it as (path,
    name, whether it is a link)."""
    found, pending = [], [str(folder)]
    while pending:
        current = pending.pop()
        children = []
        try:
            info = os.stat(current)
            with os.scandir(current) as listing:
                for entry in listing:
                    if entry.is_dir(follow_symlinks=False):
                        children.append(entry.path)
                    elif files is not None and (wanted is None or wanted(entry.name)):
                        files.append((entry.path, entry.name, entry.is_symlink()))
        except OSError:
            found.append((current, -1, -1, -1, -1))  # unreadable or gone: never the same
            continue
        found.append((current, *file_stamp(info)))
        pending.extend(sorted(children, reverse=True))
    return found

