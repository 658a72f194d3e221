"""Is build/ up to date with the sources? Readers of the artifacts (query, facts) ask
before answering, so an answer never silently comes from an older knowledge base."""

from __future__ import annotations

import os
import stat
from typing import Any

from .artifacts.reader import DigestCache, read_manifest
from .config import Config
from .files import WalkMemory


def changed_inputs(config: Config, manifest: dict[str, Any], walks: WalkMemory | None = None
                   ) -> list[str]:
    """Source files (and the settings file) added, removed or edited since the build (by
    size, then hash). Hashes are remembered by each file's identity in the cache folder,
    so a query on a large knowledge base hashes only files touched since; walks: the
    project's listings, when the caller asks again and again (a server)."""
    from .files import (
        RACY_NS,
        ProjectRelative,
        inside,
        plain_relative,
        project_relative,
        scan_project,
    )

    recorded = {i["path"]: i for i in manifest.get("inputs", [])}
    root = config.root.resolve()
    digests = DigestCache(config.input_digests, RACY_NS)
    changed: list[str] = []
    scan = scan_project(config, walks)
    sources = list(scan.paths)
    if config.config_file is not None:  # settings (tenants, models) shape the artifacts too
        sources.append(str(config.config_file))
    # One lstat a file: a regular file's stat is its identity for the digest cache, and
    # its relative path comes from its folder (a link takes the exact way, and a stat).
    found: dict[str, os.stat_result | None] = {}
    for path in sources:
        try:
            found[path] = os.lstat(path)
        except OSError:  # gone since the walk: validation now fails
            found[path] = None
    regular = {path: info for path, info in found.items()
               if info is not None and stat.S_ISREG(info.st_mode)}
    relative_to_root = ProjectRelative(root, regular)
    relative = {path: relative_to_root(path) for path in found}
    # content_path files the build read, wherever they are (the walk lists content/ only)
    scanned = set(relative.values())
    for extra in recorded:
        if extra not in scanned and plain_relative(extra) and (root / extra).is_file() \
                and inside(root, root / extra):
            path = str(root / extra)
            found[path], relative[path] = None, extra  # (stat below: it may be a link)
    seen: set[str] = set()
    for path, info in found.items():
        name = relative[path]
        seen.add(name)
        entry = recorded.get(name)
        try:
            if info is None or not stat.S_ISREG(info.st_mode):
                info = os.stat(path)
            if entry is None or entry.get("bytes") != info.st_size:
                changed.append(name)
                continue
            digest = digests.sha256_and_size(name, path, info)[0]
        except OSError:  # a dangling link, a FIFO, a file gone: validation now fails
            changed.append(name)
            continue
        if entry.get("sha256") != digest:
            changed.append(name)
    # A recorded input gone from the sources; one that could not be a project file (the
    # manifest is untrusted: absolute, `..`) is never looked up outside the project.
    changed += [p for p in recorded if p not in seen and (
        not plain_relative(p) or not (root / p).exists())]
    # What the walk refused (a link out of the project, an unreadable folder) is a change
    # the build never saw: validation now fails.
    changed += [project_relative(root, problem.path) for problem in scan.problems]
    digests.keep_only(seen)
    digests.save()
    return sorted(changed)


def stale_message(changed: list[str]) -> str:
    return (f"the build is older than the sources ({len(changed)} changed, e.g. "
            f"{changed[0]}): run `doit`")


def stale_reason(config: Config, build_dir, walks: WalkMemory | None = None) -> str | None:
    """Why the project's build folder does not reflect its sources, or None."""
    try:
        manifest = read_manifest(build_dir)
    except ValueError as error:
        return f"{error}: run `doit`"
    if manifest is None:
        return None  # nothing published: readers report the missing artifacts themselves
    changed = changed_inputs(config, manifest, walks)
    return stale_message(changed) if changed else None
