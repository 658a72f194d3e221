"""`ctxfst build`: run the doit task graph in-process, without doit on the PATH."""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path

from ..config import ConfigError, find_project


def run_build(root: Path, doit_args: list[str], quiet: bool = False,
              engine: str | None = None) -> int:
    """Build the project at root (doit_args: doit's command line); engine: "local" or
    "ray" instead of the `engine` setting."""
    from doit.cmd_base import ModuleTaskLoader
    from doit.doit_cmd import DoitMain

    from .tasks import build_lock, check_build_folder, namespace

    config = find_project(root)  # settings and paths are checked before anything is touched
    if config is None:
        raise ConfigError(f"{root}: no ctxfst project (no ctxfst.toml or [tool.ctxfst])")
    if engine is not None:
        config = dataclasses.replace(config, engine=engine)
    check_build_folder(config)
    previous = Path.cwd()
    os.chdir(config.root)  # as doit does for a dodo.py: its relative paths start here
    try:
        config.tool_dir.mkdir(exist_ok=True)
        from .publish import recover

        with build_lock(config):
            recover(config)
            tasks = namespace(config, quiet)
            # doit binds its default output stream when imported; use the current one.
            tasks["DOIT_CONFIG"] = {**tasks["DOIT_CONFIG"], "outfile": sys.stdout}
            result = DoitMain(ModuleTaskLoader(tasks)).run(list(doit_args))
        return 0 if result is None else int(result)  # some doit commands return None
    finally:
        os.chdir(previous)
