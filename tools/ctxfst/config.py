"""Project discovery and the [tool.ctxfst] / ctxfst.toml settings."""

from __future__ import annotations

import hashlib
import json
import re
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path

CONFIG_FILE = "ctxfst.toml"
DEFAULT_MODEL = "minilm"  # the bundled offline all-MiniLM-L6-v2 (see compile/embed.py)
DEFAULT_EXTRA_EDGES = ("**/*.edges.json", "**/*.edges.yaml", "**/*.edges.yml")
DEFAULT_TENANT = "default"
_TENANT = re.compile(r"[A-Za-z0-9_-]+")
_FACT_NAME = re.compile(r"[a-z0-9][a-z0-9_.-]*")
_FACTS_KNOWN = {"tenants", "complete", "extractors", "fallback_limit", "fallback_scan"}


class ConfigError(Exception):
    """A configuration file that cannot be used (bad TOML, wrong types)."""


@dataclass(frozen=True)
class BuildSettings:
    """Settings that shape the artifacts; each stage hashes the ones it depends on."""

    embedding_model: str = DEFAULT_MODEL
    similar_top_k: int = 5
    similar_min_score: float = 0.35
    extra_edges: tuple[str, ...] = DEFAULT_EXTRA_EDGES
    embed_batch_size: int = 32
    # [facts]: folder -> tenant, entity type -> keys declared complete ("namespace/key"),
    # extra extractors ("module:factory"), and the bounds of the lexical fallback.
    facts_tenants: tuple[tuple[str, str], ...] = ()
    facts_complete: tuple[tuple[str, tuple[str, ...]], ...] = ()
    facts_extractors: tuple[str, ...] = ()
    facts_fallback_limit: int = 5
    facts_fallback_scan: int = 10_000

    def tenant_for(self, relative_path: str) -> str:
        """The tenant of a project-relative path by the longest matching folder setting."""
        best, tenant = -1, DEFAULT_TENANT
        for folder, name in self.facts_tenants:
            if (relative_path == folder or relative_path.startswith(folder + "/")) and \
                    len(folder) > best:
                best, tenant = len(folder), name
        return tenant

    def complete_keys(self, entity_type: str) -> tuple[str, ...]:
        return dict(self.facts_complete).get(entity_type, ())

    def digest(self, *keys: str) -> str:
        """A stable hash of the named settings (all of them when none are named)."""
        data = asdict(self)
        chosen = {key: data[key] for key in (keys or sorted(data))}
        return hashlib.sha256(json.dumps(chosen, sort_keys=True).encode()).hexdigest()


@dataclass(frozen=True)
class Config:
    root: Path
    content_dir: Path
    skills_dir: Path
    build_dir: Path
    config_file: Path | None
    build: BuildSettings = field(default_factory=BuildSettings)

    @property
    def source_dirs(self) -> list[Path]:
        return [self.content_dir, self.skills_dir]

    @property
    def cache_dir(self) -> Path:
        """Caches that outlive `doit clean` (embeddings): beside the build, not in it."""
        return self.root / ".ctxfst" / "cache"


def _settings_in(directory: Path) -> tuple[dict, Path] | None:
    dedicated = directory / CONFIG_FILE
    if dedicated.is_file():
        return _read_toml(dedicated), dedicated
    pyproject = directory / "pyproject.toml"
    if pyproject.is_file():
        data = _read_toml(pyproject)
        tool = data.get("tool", {})
        if isinstance(tool, dict) and "ctxfst" in tool:
            section = tool["ctxfst"]
            if not isinstance(section, dict):
                raise ConfigError(f"{pyproject}: [tool.ctxfst] must be a table")
            return section, pyproject
    return None


def _read_toml(path: Path) -> dict:
    try:
        with open(path, "rb") as handle:
            return tomllib.load(handle)
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise ConfigError(f"{path}: {error}") from None


def find_project(start: Path) -> Config | None:
    """The nearest enclosing ctxfst project of start (a file or directory), if any."""
    start = start.resolve()
    directory = start if start.is_dir() else start.parent
    for candidate in (directory, *directory.parents):
        found = _settings_in(candidate)
        if found is not None:
            settings, config_file = found
            return load_config(candidate, settings, config_file)
    return None


_KNOWN = {"content_dir", "skills_dir", "build_dir", "embedding_model", "similar_top_k",
          "similar_min_score", "extra_edges", "embed_batch_size", "facts"}


def _facts_settings(section, config_file) -> dict:
    """The [facts] table: tenants by folder, complete keys, extractors, fallback bounds."""
    if section is None:
        return {}
    where = f"{config_file}: [facts]"
    if not isinstance(section, dict):
        raise ConfigError(f"{where} must be a table")
    unknown = sorted(set(section) - _FACTS_KNOWN)
    if unknown:
        raise ConfigError(f"{where}: unknown setting(s) {', '.join(unknown)}; known: "
                          f"{', '.join(sorted(_FACTS_KNOWN))}")
    out: dict = {}
    tenants = section.get("tenants", {})
    if not isinstance(tenants, dict):
        raise ConfigError(f"{where}: 'tenants' must be a table of folder = \"tenant\"")
    pairs = []
    for folder, tenant in sorted(tenants.items()):
        if not isinstance(tenant, str) or not _TENANT.fullmatch(tenant):
            raise ConfigError(f"{where}: tenant {tenant!r} for folder {folder!r} is not a "
                              "tenant id: use letters A-Z a-z, digits, '_' or '-'")
        clean = folder.strip().strip("/").removeprefix("./")
        if not clean or ".." in clean.split("/"):
            raise ConfigError(f"{where}: folder {folder!r} must be a path inside the project")
        pairs.append((clean, tenant))
    out["facts_tenants"] = tuple(pairs)
    complete = section.get("complete", {})
    if not isinstance(complete, dict):
        raise ConfigError(f"{where}: 'complete' must be a table of entity type = "
                          "[\"namespace/key\", ...]")
    entries = []
    for entity_type, keys in sorted(complete.items()):
        if not _FACT_NAME.fullmatch(entity_type):  # types are lowercase: "Document" never matches
            raise ConfigError(f"{where}: complete.{entity_type}: an entity type is a lowercase "
                              "name such as document, chunk, entity or skill")
        if not isinstance(keys, list) or not all(
                isinstance(k, str) and k.count("/") == 1
                and all(_FACT_NAME.fullmatch(part) for part in k.split("/")) for k in keys):
            raise ConfigError(f"{where}: complete.{entity_type} must be a list of "
                              "\"namespace/key\" strings (lowercase names)")
        entries.append((entity_type, tuple(sorted(set(keys)))))
    out["facts_complete"] = tuple(entries)
    extractors = section.get("extractors", [])
    if not isinstance(extractors, list) or not all(
            isinstance(e, str) and re.fullmatch(r"[\w.]+:[\w.]+", e) for e in extractors):
        raise ConfigError(f"{where}: 'extractors' must be a list of \"module:factory\" "
                          "names")
    out["facts_extractors"] = tuple(extractors)
    for key, default, high in (("fallback_limit", 5, 100), ("fallback_scan", 10_000, 10**7)):
        value = section.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= high:
            raise ConfigError(f"{where}: '{key}' must be an integer from 0 to {high}")
        out[f"facts_{key}"] = value
    return out


def load_config(root: Path, settings: dict, config_file: Path | None) -> Config:
    unknown = sorted(set(settings) - _KNOWN)
    if unknown:
        raise ConfigError(f"{config_file}: unknown setting(s) {', '.join(unknown)}; "
                          f"known: {', '.join(sorted(_KNOWN))}")

    def text(key: str, default: str) -> str:
        value = settings.get(key, default)
        if not isinstance(value, str) or not value:
            raise ConfigError(f"{config_file}: '{key}' must be a non-empty string")
        return value

    def number(key: str, default, kind, low, high):
        value = settings.get(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float) if kind is float else int):
            raise ConfigError(f"{config_file}: '{key}' must be a {kind.__name__}")
        if not low <= value <= high:
            raise ConfigError(f"{config_file}: '{key}' must be between {low} and {high}")
        return kind(value)

    model = text("embedding_model", DEFAULT_MODEL)
    if model.startswith("hash") and not re.fullmatch(r"hash(-[1-9][0-9]{0,4})?", model):
        raise ConfigError(f"{config_file}: 'embedding_model' {model!r}: the hash embedder "
                          "is 'hash' or 'hash-N' with N dimensions")
    patterns = settings.get("extra_edges", list(DEFAULT_EXTRA_EDGES))
    if not isinstance(patterns, list) or not all(isinstance(p, str) and p for p in patterns):
        raise ConfigError(f"{config_file}: 'extra_edges' must be a list of glob patterns")
    build = BuildSettings(
        embedding_model=model,
        similar_top_k=number("similar_top_k", 5, int, 0, 1000),
        similar_min_score=number("similar_min_score", 0.35, float, -1.0, 1.0),
        extra_edges=tuple(patterns),
        embed_batch_size=number("embed_batch_size", 32, int, 1, 4096),
        **_facts_settings(settings.get("facts"), config_file),
    )
    return Config(root=root, content_dir=(root / text("content_dir", "content")).resolve(),
                  skills_dir=(root / text("skills_dir", "skills")).resolve(),
                  build_dir=(root / text("build_dir", "build")).resolve(),
                  config_file=config_file, build=build)
