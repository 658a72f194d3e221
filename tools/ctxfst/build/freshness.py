"""Is build/ up to date with the sources? Readers of the artifacts (query, facts) ask
before answering, so an answer never silently comes from an older knowledge base."""

from __future__ import annotations

from typing import Any

from ..config import Config


def changed_inputs(config: Config, manifest: dict[str, Any]) -> list[str]:
    """Source files (and the settings file) added, removed or edited since the build (by
    size, then hash). Hashes are remembered with each file's size and mtime in the cache
    folder, so a query on a large knowledge base hashes only files touched since."""
    from ..files import project_files, project_relative
    from .io import sha256_file

    recorded = {i["path"]: i for i in manifest.get("inputs", [])}
    root = config.root.resolve()
    known = _read_stat_cache(config)
    seen_stats: dict[str, list] = {}
    changed: list[str] = []
    seen: set[str] = set()
    sources = list(project_files(config))
    if config.config_file is not None:  # settings (tenants, models) shape the artifacts too
        sources.append(config.config_file)
    for path in sources:
        relative = project_relative(root, path)
        seen.add(relative)
        entry = recorded.get(relative)
        stat = path.stat()
        if entry is None or entry.get("bytes") != stat.st_size:
            changed.append(relative)
            continue
        cached = known.get(relative)
        if isinstance(cached, list) and len(cached) == 3 and \
                cached[:2] == [stat.st_size, stat.st_mtime_ns]:
            digest = cached[2]
        else:
            digest = sha256_file(path)
        seen_stats[relative] = [stat.st_size, stat.st_mtime_ns, digest]
        if entry.get("sha256") != digest:
            changed.append(relative)
    changed += [p for p in recorded if p not in seen and not (root / p).exists()]
    if seen_stats != known:
        _write_stat_cache(config, seen_stats)
    return sorted(changed)


def _stat_cache_path(config: Config):
    return config.cache_dir / "freshness.json"


def _read_stat_cache(config: Config) -> dict[str, list]:
    import json

    try:
        data = json.loads(_stat_cache_path(config).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_stat_cache(config: Config, stats: dict[str, list]) -> None:
    from .io import write_json

    try:  # a cache: a read-only folder only makes later checks slower
        write_json(_stat_cache_path(config), stats, compact=True)
    except OSError:
        pass


def stale_message(changed: list[str]) -> str:
    return (f"the build is older than the sources ({len(changed)} changed, e.g. "
            f"{changed[0]}): run `doit`")


def read_manifest(build_dir) -> dict[str, Any] | None:
    """A build's manifest.json (None when nothing was published); ValueError when it is
    unreadable or not a manifest."""
    import json

    path = build_dir / "manifest.json"
    if not path.is_file():
        return None
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
        if not (isinstance(manifest, dict) and isinstance(manifest.get("artifacts"), list)
                and isinstance(manifest.get("inputs", []), list)):
            raise ValueError("not a ctxfst manifest")
        artifact_digests(manifest)
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ValueError(f"{path}: unreadable ({error})") from None
    return manifest


def artifact_digests(manifest: dict[str, Any]) -> dict[str, str]:
    """Artifact path -> the sha256 the manifest records for it."""
    return {str(a["path"]): str(a["sha256"]) for a in manifest["artifacts"]}


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
