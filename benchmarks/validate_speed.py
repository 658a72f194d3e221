"""Measure `ctxfst validate`, `ctxfst lint` and the git-hook check as whole processes.

    .venv/bin/python benchmarks/validate_speed.py [--docs 1000] [--runs 5]

Generates a mock knowledge base (ctxfst.mock, deterministic) in a temporary folder,
then times each command as a separate process (start-up and imports included) and
prints the median and best wall time of several runs.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ctxfst.mock import generate

GIT_ENV = {"GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "bench@example.invalid",
           "GIT_COMMITTER_NAME": "bench", "GIT_COMMITTER_EMAIL": "bench@example.invalid"}


def timed(command: list[str], cwd: Path, runs: int, expect: int = 0) -> list[float]:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        proc = subprocess.run(command, cwd=cwd, capture_output=True, text=True,
                              env={**os.environ, **GIT_ENV})
        times.append(time.perf_counter() - started)
        if proc.returncode != expect:
            sys.exit(f"{' '.join(command)} exited {proc.returncode}:\n{proc.stdout[-2000:]}"
                     f"{proc.stderr[-2000:]}")
    return times


def report(label: str, times: list[float]) -> None:
    print(f"{label:<48} median {statistics.median(times):6.3f} s   "
          f"best {min(times):6.3f} s   ({len(times)} runs)")


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                   env={**os.environ, **GIT_ENV})


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--docs", type=int, nargs="+", default=[1000])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    ctxfst = [sys.executable, "-m", "ctxfst"]
    repo = Path(__file__).resolve().parents[1]
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores")
    report("validate example KB (content/ + skills/)",
           timed([*ctxfst, "validate"], repo, args.runs))
    for count in args.docs:
        work = Path(tempfile.mkdtemp(prefix=f"ctxfst-bench-{count}-"))
        try:
            generate(work, count, seed=1)
            size = sum(p.stat().st_size for p in (work / "content").rglob("*.md"))
            print(f"-- mock KB: {count} documents, {size / 1e6:.1f} MB, "
                  f"{count * 7} chunks")
            report(f"validate {count} documents", timed([*ctxfst, "validate"], work, args.runs))
            report(f"lint {count} documents",
                   timed([*ctxfst, "lint"], work, max(1, args.runs // 2)))
            git(work, "init", "-q")
            git(work, "add", "-A")
            git(work, "commit", "-qm", "base", "--no-verify")
            for index in range(3):
                target = next((work / "content").rglob(f"notes-{index:05d}.ctxfst.md"))
                target.write_text(target.read_text().replace("version: 1", "version: 2", 1))
                git(work, "add", str(target))
            report(f"hook: validate --staged, 3 staged of {count}",
                   timed([*ctxfst, "validate", "--staged"], work, args.runs))
        finally:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
