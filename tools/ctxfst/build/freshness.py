"""Is build/ up to date with the sources? Readers of the artifacts (query, facts) ask
before answering, so an answer never silently comes from an older knowledge base."""

from __future__ import annotations

from typing import Any

from ..config import Config


def changed_inputs(config: Config, manifest: dict[str, Any]) -> list[str]:
    """Source files (and the settings file) added, removed or edited since the build (by
    size, then hash)."""
    from ..files import project_files
    from .io import sha256_file

    recorded = {i["path"]: i for i in manifest.get("inputs", [])}
    root = config.root.resolve()
    changed: list[str] = []
    seen: set[str] = set()
    sources = list(project_files(config))
    if config.config_file is not None:  # settings (tenants, models) shape the artifacts too
        sources.append(config.config_file)
    for path in sources:
        relative = path.resolve().relative_to(root).as_posix()
        seen.add(relative)
        entry = recorded.get(relative)
        if entry is None or entry.get("bytes") != path.stat().st_size or \
                entry.get("sha256") != sha256_file(path):
            changed.append(relative)
    changed += [p for p in recorded if p not in seen and not (root / p).exists()]
    return sorted(changed)


def stale_message(changed: list[str]) -> str:
    return (f"the build is older than the sources ({len(changed)} changed, e.g. "
            f"{changed[0]}): run `doit`")


def stale_reason(config: Config, build_dir) -> str | None:
    """Why the project's build folder does not reflect its sources, or None."""
    import json

    manifest_path = build_dir / "manifest.json"
    if not manifest_path.is_file():
        return None  # nothing published: readers report the missing artifacts themselves
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        return f"{manifest_path}: unreadable ({error}): run `doit`"
    changed = changed_inputs(config, manifest if isinstance(manifest, dict) else {})
    return stale_message(changed) if changed else None
