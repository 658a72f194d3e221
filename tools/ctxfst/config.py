"""Project discovery and the [tool.ctxfst] / ctxfst.toml settings."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

CONFIG_FILE = "ctxfst.toml"


class ConfigError(Exception):
    """A configuration file that cannot be used (bad TOML, wrong types)."""


@dataclass(frozen=True)
class Config:
    root: Path
    content_dir: Path
    skills_dir: Path
    build_dir: Path
    config_file: Path | None

    @property
    def source_dirs(self) -> list[Path]:
        return [self.content_dir, self.skills_dir]


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
            return _config(candidate, settings, config_file)
    return None


def _config(root: Path, settings: dict, config_file: Path | None) -> Config:
    def folder(key: str, default: str) -> Path:
        value = settings.get(key, default)
        if not isinstance(value, str) or not value:
            raise ConfigError(f"{config_file}: '{key}' must be a non-empty string")
        return (root / value).resolve()

    return Config(root=root, content_dir=folder("content_dir", "content"),
                  skills_dir=folder("skills_dir", "skills"),
                  build_dir=folder("build_dir", "build"), config_file=config_file)
