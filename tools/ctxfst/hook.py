"""`ctxfst install-hook`: a plain git pre-commit hook that validates the staged KB."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

MARKER = "# installed by ctxfst install-hook"


class HookError(Exception):
    pass


def hooks_dir(repo: Path) -> Path:
    result = subprocess.run(["git", "rev-parse", "--git-path", "hooks"], cwd=repo,
                            capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise HookError("not inside a git repository")
    path = Path(result.stdout.strip())
    return path if path.is_absolute() else (repo / path)


def hook_script(python: str) -> str:
    # The interpreter that installed the hook runs it, so no virtualenv needs activating.
    # -P: `-m` would put the repository first on the import path, and a KB's own
    # yaml.py or ctxfst/ folder would then run on every commit.
    return (f"#!/bin/sh\n{MARKER}\n"
            f"exec {shlex.quote(python)} -P -m ctxfst validate --staged \"$@\"\n")


def install_hook(repo: Path, force: bool = False) -> Path:
    directory = hooks_dir(repo)
    target = directory / "pre-commit"
    if target.exists() and not force:
        existing = target.read_text(errors="replace")
        if MARKER not in existing:
            raise HookError(f"{target} exists and was not written by ctxfst; "
                            "use --force to replace it")
    directory.mkdir(parents=True, exist_ok=True)
    target.write_text(hook_script(sys.executable))
    target.chmod(0o755)
    return target
