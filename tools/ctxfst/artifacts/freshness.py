"""Is build/ up to date with the sources? Readers of the artifacts (query, facts) ask
before answering, so an answer never silently comes from an older knowledge base."""

from __future__ import annotations

from typing import Any

from ..config import Config
from .reader import DigestCache, read_manifest


def changed_inputs(config: Config, manifest: dict[str, Any]) -> list[str]:
    """Source files (and the settings file) added, removed or edited since the build (by
    size, then hash). Hashes are remembered by each file's identity in the cache folder,
    so a query on a large knowledge base hashes only files touched since."""
    from ..files import (RACY_NS, ProjectRelative, inside, plain_relative, project_relative,
                         scan_project)

    recorded = {i["path"]: i for i in manifest.get("inputs", [])}
    root = config.root.resolve()
    digests = DigestCache(config.input_digests, RACY_NS)
    relative_to_root = ProjectRelative(root)
    changed: list[str] = []
    seen: set[str] = set()
    scan = scan_project(config)
    sources = list(scan.files)
    if config.config_file is not None:  # settings (tenants, models) shape the artifacts too
        sources.append(config.config_file)
    # content_path files the build read, wherever they are (the walk lists content/ only)
    scanned = {relative_to_root(path) for path in sources}
    sources += [root / p for p in recorded if p not in scanned and plain_relative(p)
                and (root / p).is_file() and inside(root, root / p)]
    for path in sources:
        relative = relative_to_root(path)
        seen.add(relative)
        entry = recorded.get(relative)
        try:
            stat = path.stat()
            if entry is None or entry.get("bytes") != stat.st_size:
                changed.append(relative)
                continue
            digest = digests.sha256(relative, path)
        except OSError:  # a dangling link, a FIFO, a file gone: validation now fails
            changed.append(relative)
            continue
        if entry.get("sha256") != digest:
            changed.append(relative)
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


def stale_reason(config: Config, build_dir) -> str | None:
    """Why the project's build folder does not reflect its sources, or None."""
    try:
        manifest = read_manifest(build_dir)
    except ValueError as error:
        return f"{error}: run `doit`"
    if manifest is None:
        return None  # nothing published: readers report the missing artifacts themselves
    changed = changed_inputs(config, manifest)
    return stale_message(changed) if changed else None
