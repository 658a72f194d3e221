"""Library entry points behind `ctxfst validate` and `ctxfst lint`.

Which knowledge base does a path belong to? A path inside a ctxfst project (a folder
with ctxfst.toml or [tool.ctxfst]) is checked in the context of that project's whole
knowledge base, and only its own diagnostics are reported. Any other path is a
knowledge base of its own (a folder and everything below it, or a single file).
"""

from __future__ import annotations

import fnmatch
import os
import sqlite3
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from .collector import collector_paused
from .config import Config, config_from_text, find_project
from .diagnostics import Diagnostic, Severity, ordered, summarize
from .document.kb import Input, inputs_for
from .document.source import Source, load_text
from .document.tree import WORK_TREE, TreeFiles
from .files import Walk, display_path, inside, not_utf8, scan_project, utf8_name
from .kb import KnowledgeBase, load_kb, validate
from .rule_selection import RuleSelection
from .silence import apply as apply_selection


class UsageError(Exception):
    """Bad arguments: reported on stderr with exit code 2."""


@dataclass
class Report:
    diagnostics: list[Diagnostic] = field(default_factory=list)
    files: int = 0
    hidden: int = 0  # warnings and infos the [lint] settings and noqa comments hid

    @property
    def summary(self) -> dict:
        return summarize(self.diagnostics, self.files)

    def exit_code(self, strict: bool = False) -> int:
        failing = {Severity.ERROR, Severity.WARNING} if strict else {Severity.ERROR}
        return 1 if any(d.severity in failing for d in self.diagnostics) else 0


@dataclass
class _Plan:
    root: Path
    inputs: list[Input]
    only: set[Path] | None  # report only diagnostics in these files (None: all)
    skills_dir: Path | None = None
    cache_dir: Path | None = None  # a project's parse cache, when there is a project
    refused: list[Diagnostic] = field(default_factory=list)  # see project_inputs
    selection: RuleSelection = field(default_factory=RuleSelection)  # the project's [lint]
    files: TreeFiles = WORK_TREE  # where passages and skill folders are read


def _is_under(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def project_inputs(config: Config, refused: list[Diagnostic] | None = None,
                   walk: Walk | None = None) -> list[Input]:
    """The project's inputs, from walk (scan_project's, when the caller took one) or a
    walk now; what the walk refused (unreadable folders, links out of the project) is
    added to refused."""
    scan = walk if walk is not None else scan_project(config)
    if refused is not None:
        refused.extend(scan.problems)
    cwd = os.getcwd()  # (display paths are relative to it)
    # (file paths as the walk's strings: 10,000 Path objects took 0.1 s)
    return [Input(Source(display_path(path, cwd), path), explicit=False)
            for path in scan.paths]


def plan_paths(paths: list[Path], cwd: Path) -> list[_Plan]:
    if not paths:
        config = find_project(cwd)
        if config is None:
            raise UsageError("no ctxfst project here (no ctxfst.toml or [tool.ctxfst] in "
                             "pyproject.toml); name the files or folders to check")
        refused: list[Diagnostic] = []
        return [_Plan(config.root, project_inputs(config, refused), None, config.skills_dir,
                      config.cache_dir, refused, config.lint)]
    plans: list[_Plan] = []
    by_project: dict[Path, _Plan] = {}
    for path in paths:
        if not path.exists():
            raise UsageError(f"{path}: no such file or directory")
        resolved = path.resolve()
        config = find_project(resolved)
        if config is not None and any(_is_under(resolved, d) for d in config.source_dirs):
            plan = by_project.get(config.root)
            if plan is None:
                refused = []
                plan = _Plan(config.root, project_inputs(config, refused), set(),
                             config.skills_dir, config.cache_dir, refused, config.lint)
                by_project[config.root] = plan
                plans.append(plan)
            assert plan.only is not None
            named = inputs_for([path])
            plan.only.update(Path(item.source.fs_path).resolve() for item in named)
            known = {Path(item.source.fs_path).resolve() for item in plan.inputs}
            plan.inputs.extend(item for item in named  # never a link out of the project
                               if Path(item.source.fs_path).resolve() not in known
                               and inside(config.root, item.source.fs_path))
            continue
        root = resolved if resolved.is_dir() else resolved.parent
        plans.append(_Plan(root, inputs_for([path]), None))
    return plans


def _run(plans: list[_Plan], with_lint: bool, strict_spec: bool = False,
         use_cache: bool = True, select: list[str] | None = None,
         ignore: list[str] | None = None) -> Report:
    report = Report()
    for plan in plans:
        with collector_paused():  # a parsed KB is large, long-lived and acyclic
            kb = _load(plan, use_cache)
            kb.skills_dir, kb.files = plan.skills_dir, plan.files
            found = check_kb(kb, with_lint, strict_spec) + plan.refused
        if plan.only is not None:
            found = [d for d in found if _resolved(d.path) in plan.only]
        sources = {item.source.path: item.source for item in plan.inputs}
        before = set(found)
        found = ordered(apply_selection(found, plan.selection.with_options(select, ignore),
                                        plan.root, lambda path: _text_of(sources.get(path))))  # noqa: B023 (called in this iteration)
        if plan.only is not None:
            report.files += sum(1 for item in (*kb.documents, *kb.skills)
                                if _resolved(item.path) in plan.only)
        else:
            report.files += kb.file_count
        report.hidden += len(before.difference(found))
        report.diagnostics.extend(found)
    return report


def _text_of(source: Source | None) -> str | None:
    return load_text(source)[0] if source is not None else None


def _load(plan: _Plan, use_cache: bool = True) -> KnowledgeBase:
    """Load a plan's files; in a project, unchanged documents come from the parse cache
    (shared with the build), so a hook on a large KB re-parses only what changed.
    Without use_cache (or with CTXFST_NO_CACHE=1) a cache shipped with the KB is ignored."""
    from .artifacts.cache import ParseCache, caches_disabled

    if plan.cache_dir is None or not use_cache or caches_disabled():
        return load_kb(plan.root, plan.inputs)

    try:
        cache = ParseCache(plan.cache_dir / "parse.sqlite")
    except (OSError, sqlite3.Error):
        return load_kb(plan.root, plan.inputs)  # a read-only checkout: validate without it
    try:
        return load_kb(plan.root, plan.inputs, cache)
    finally:
        cache.close()


def _resolved(path: str) -> Path:
    return Path(path).resolve()


def check_kb(kb: KnowledgeBase, with_lint: bool = False, strict_spec: bool = False
             ) -> list[Diagnostic]:
    validation = validate(kb, strict_spec)
    if not with_lint:
        return validation.diagnostics
    from .document.lint import lint

    # Lint reports file-level problems too, or an unreadable file would pass silently.
    unreadable = [d for d in validation.diagnostics if d.code < "CTX100"]
    return ordered(unreadable + lint(kb, validation))


def check_paths(paths: list[Path], cwd: Path | None = None, lint: bool = False,
                strict_spec: bool = False, use_cache: bool = True,
                select: list[str] | None = None, ignore: list[str] | None = None) -> Report:
    """select / ignore: codes or prefixes, as --select (replacing [lint] select) and
    --ignore (added to [lint] ignore); RuleSettingError for one that is no code."""
    return _run(plan_paths(paths, cwd or Path.cwd()), lint, strict_spec, use_cache,
                select, ignore)


def _git(repo: Path, *args: str, data: bytes | None = None) -> bytes:
    # Literal pathspecs: a folder the settings name is a folder, never git's pathspec
    # magic (":(exclude)content" would make the hook check nothing).
    result = subprocess.run(["git", "--literal-pathspecs", *args], cwd=repo, input=data,
                            capture_output=True, check=False)
    if result.returncode != 0:
        raise UsageError(f"git {' '.join(args)} failed: "
                         f"{result.stderr.decode(errors='replace').strip()}")
    return result.stdout


def _staged_settings(top: Path, config_file: Path) -> tuple[str | None, bool]:
    """The settings file as the index holds it (None: not in the index), and whether
    the commit changes it."""
    relative = str(config_file.resolve().relative_to(top))
    listing = _git(top, "ls-files", "-s", "-z", "--", relative).split(b"\0")
    blob = next((line.split()[1] for line in listing if line), None)
    changed = bool(_git(top, "diff", "--cached", "--name-only", "-z", "--", relative)
                   .strip(b"\0"))
    if blob is None:
        return None, changed
    data = _git(top, "cat-file", "blob", blob.decode())
    try:
        return data.decode("utf-8"), changed
    except UnicodeDecodeError:
        raise UsageError(f"{relative} in the index is not UTF-8") from None


def _staged_edges(name: str, content: str | None, config) -> bool:
    """Whether an index entry is an extra-edges file the settings' patterns name."""
    from .document.edges import is_edge_file

    if content is None or not is_edge_file(name.rsplit("/", 1)[-1]):
        return False
    prefix = "" if content == "." else content + "/"
    if not name.startswith(prefix):
        return False
    relative = name[len(prefix):]
    return any(fnmatch.fnmatch(relative, pattern) or (
        pattern.startswith("**/") and fnmatch.fnmatch(relative.rsplit("/", 1)[-1], pattern[3:]))
        for pattern in config.build.extra_edges)


def check_staged(cwd: Path | None = None, lint: bool = False,
                 strict_spec: bool = False, use_cache: bool = True,
                 select: list[str] | None = None, ignore: list[str] | None = None) -> Report:
    """Check the knowledge base exactly as the git index holds it (what a commit gets)."""
    cwd = cwd or Path.cwd()
    top = Path(_git(cwd, "rev-parse", "--show-toplevel").decode().strip())
    config = find_project(cwd)
    if config is None:
        raise UsageError("no ctxfst project here (no ctxfst.toml or [tool.ctxfst])")
    settings_changed = False
    if config.config_file is not None and _is_under(config.config_file, top):
        # The commit's settings, not the work tree's: a staged ctxfst.toml may move the
        # content folder, or out of the project.
        staged, settings_changed = _staged_settings(top, config.config_file)
        if staged is not None:
            config = config_from_text(config.root, config.config_file, staged) or config
    folders = [str(folder.relative_to(top)) for folder in config.source_dirs
               if _is_under(folder, top)]
    if not folders:
        return Report()
    changed = _git(top, "diff", "--cached", "--name-only", "-z", "--", *folders)
    if not changed.strip(b"\0") and not settings_changed:
        return Report()  # nothing staged in the knowledge base: nothing to check
    tree = IndexTree(top)  # (the rules read passages and skill folders through it too)
    content = str(config.content_dir.resolve().relative_to(top)) \
        if _is_under(config.content_dir.resolve(), top) else None
    entries = []
    refused: list[Diagnostic] = []  # (names no artifact can hold, as the build refuses)
    for name, (mode, sha) in tree.entries_under(folders):
        # Files only: a gitlink (a submodule, 160000) or a link (120000) named *.md is
        # no document of the commit.
        if mode in (b"100644", b"100755") and (
                name.endswith(".md") or _staged_edges(name, content, config)):
            if utf8_name(name):
                entries.append((sha, name))
            else:
                refused.append(not_utf8(top / name, "file"))
    batch = _git(top, "cat-file", "--batch",
                 data="".join(f"{sha}\n" for sha, _ in entries).encode())
    inputs = []
    offset = 0
    for _sha, name in entries:
        header_end = batch.index(b"\n", offset)
        header = batch[offset:header_end].split()
        if len(header) != 3 or header[1] != b"blob":  # ("missing": not in this repository)
            offset = header_end + 1
            continue
        size = int(header[2])
        blob = batch[header_end + 1: header_end + 1 + size]
        offset = header_end + 1 + size + 1
        absolute = top / name
        inputs.append(Input(Source(display_path(absolute), absolute, blob), explicit=False))
    return _run([_Plan(config.root, inputs, None, config.skills_dir, config.cache_dir,
                       refused, selection=config.lint, files=tree)],
                lint, strict_spec, use_cache, select, ignore)


class IndexTree(TreeFiles):
    """The files as the git index holds them: what the commit gets, whatever the work
    tree holds. Links are the index's links (followed as the kernel would, within the
    repository), never the work tree's."""

    MAX_LINKS = 40  # the kernel's limit on links followed in one path

    def __init__(self, top: Path) -> None:
        self.top = top
        self._entries: dict[str, tuple[bytes, str]] | None = None  # path -> (mode, blob)
        self._children: dict[str, set[str]] = {}  # folder ("" the top) -> its names
        self._blobs: dict[str, bytes] = {}

    def _index(self) -> dict[str, tuple[bytes, str]]:
        if self._entries is None:
            self._entries = {}
            for line in _git(self.top, "ls-files", "-s", "-z").split(b"\0"):
                if not line:
                    continue
                meta, name = line.split(b"\t", 1)
                mode, sha = meta.split()[:2]
                path = os.fsdecode(name)
                self._entries[path] = (mode, sha.decode())
                parts = path.split("/")
                for end in range(len(parts)):
                    self._children.setdefault("/".join(parts[:end]), set()).add(parts[end])
        return self._entries

    def entries_under(self, folders: list[str]) -> list[tuple[str, tuple[bytes, str]]]:
        """(path, (mode, blob)) of every entry in these folders (relative to the top; "."
        is all of it), in the index's order. A name that is not UTF-8 is kept as the
        file system keeps it (surrogate escapes), as the work tree's walk does."""
        if "." in folders:
            return list(self._index().items())
        prefixes = tuple(f"{folder}/" for folder in folders)
        return [(path, entry) for path, entry in self._index().items()
                if path in folders or path.startswith(prefixes)]

    def _entry(self, path: Path) -> tuple[bytes, str] | None:
        relative = self._relative(path)
        return None if relative is None else self._index().get(relative)

    def _relative(self, path: Path) -> str | None:
        if path == self.top:
            return ""
        try:
            return path.relative_to(self.top).as_posix()
        except ValueError:
            return None

    def _blob(self, sha: str) -> bytes:
        if sha not in self._blobs:
            self._blobs[sha] = _git(self.top, "cat-file", "blob", sha)
        return self._blobs[sha]

    def resolve(self, path: Path) -> Path:
        resolved, pending, links = Path(path.anchor), list(path.parts[1:]), 0
        while pending:
            part = pending.pop(0)
            if part in ("", "."):
                continue
            if part == "..":
                resolved = resolved.parent
                continue
            entry = self._entry(resolved / part)
            if entry is None or entry[0] != b"120000":
                resolved = resolved / part
                continue
            links += 1
            if links > self.MAX_LINKS:
                raise RuntimeError(f"{path}: too many links")
            target = Path(os.fsdecode(self._blob(entry[1])))
            if target.is_absolute():
                resolved = Path(target.anchor)
            pending[:0] = target.parts[1:] if target.is_absolute() else target.parts
        return resolved

    def inside(self, root: Path, path: Path) -> bool:
        try:
            return self.resolve(path).is_relative_to(root)
        except RuntimeError:
            return False

    def size(self, path: Path) -> int | None:
        try:
            entry = self._entry(self.resolve(path))
        except RuntimeError:
            return None
        if entry is None or entry[0] not in (b"100644", b"100755"):
            return None
        return len(self._blob(entry[1]))

    def exists(self, path: Path) -> bool:
        try:
            resolved = self.resolve(path)
        except RuntimeError:
            return False
        relative = self._relative(resolved)
        return relative is not None and (relative in self._index()
                                         or relative in self._children)

    def text(self, path: Path) -> str | None:
        entry = self._entry(self.resolve(path))
        if entry is None:
            return None
        return load_text(Source(str(path), path, self._blob(entry[1])))[0]

    def folders(self, folder: Path) -> list[tuple[str, bool]]:
        relative = self._relative(self.resolve(folder))
        if relative is None:
            return []
        self._index()
        found = []
        for name in sorted(self._children.get(relative, ())):
            child = (f"{relative}/{name}" if relative else name)
            entry = self._entries.get(child)
            if entry is None:  # a folder of the index
                found.append((name, False))
            elif entry[0] == b"120000":  # a link: to a folder of the index, or outside
                try:
                    target = self._relative(self.resolve(folder / name))
                except RuntimeError:
                    continue
                if target is None or target in self._children:
                    found.append((name, True))
        return found
