"""When each stage of one edit's build runs, in the doit process and in the process the
facts stage forks (pipeline/beside.py): what lies on the critical path, and what runs
beside it.

    .venv/bin/python benchmarks/edit_timeline.py --docs 10000 [--edits 3] [--kind edit]

Generates a knowledge base (hash-256 embedder), builds it, settles it with a no-op, then
times `--edits` changes of one document (`edit`: a sentence added; `add`, `delete`: one
document), printing each stage's start and end in seconds from the process start (the
interpreter's own start-up excluded, doit's task load included) and the process's end.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from build_speed import DOIT_ENV, _edit_once, doit, make_project

# Runs doit in this interpreter with each stage's start and end written to stderr (the
# forked facts process inherits the wrapper and writes its own lines).
TIMED_DOIT = """
import os, sys, time
started = time.perf_counter()
import ctxfst.pipeline.stages as stages
import ctxfst.pipeline.tasks as tasks

real = stages.run_stage

def run_stage(config, stage, *args, **kwargs):
    begin = time.perf_counter()
    try:
        return real(config, stage, *args, **kwargs)
    finally:
        name = getattr(stage, "name", stage)
        os.write(2, f"{os.getpid()} {name} {begin - started:.2f} "
                    f"{time.perf_counter() - started:.2f}\\n".encode())

stages.run_stage = tasks.run_stage = run_stage
import atexit
atexit.register(lambda: os.write(2, f"{os.getpid()} end {time.perf_counter() - started:.2f}"
                                    "\\n".encode()))
sys.argv = ["doit"]
from doit.__main__ import main
sys.exit(main())
"""


def timeline(root: Path) -> list[str]:
    proc = subprocess.run([sys.executable, "-c", TIMED_DOIT], cwd=root, capture_output=True,
                          text=True, env=DOIT_ENV)
    if proc.returncode != 0:
        sys.exit(f"doit failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    lines = [line.split() for line in proc.stderr.splitlines()
             if len(line.split()) in (3, 4) and line.split()[0].isdigit()]
    parent = next(pid for pid, name, *_ in lines if name == "end")
    shown = []
    for pid, name, *times in lines:
        where = "" if pid == parent else " (beside)"
        shown.append(f"{name}{where} {'-'.join(times)}" if len(times) == 2
                     else f"end {times[0]}")
    return shown


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=10000)
    parser.add_argument("--edits", type=int, default=3)
    parser.add_argument("--kind", choices=("edit", "add", "delete"), default="edit")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="ctxfst-timeline-"))
    try:
        make_project(root, args.docs, "hash-256")
        doit(root)
        doit(root)  # (settled: the first no-op after a build may still hash)
        target = next((root / "content").rglob("notes-00042.ctxfst.md"))
        print(f"{args.docs} documents, one {args.kind} per build (seconds from start):")
        for number in range(args.edits):
            added = target.with_name(f"notes-timeline-{number}.ctxfst.md")
            if args.kind == "edit":
                _edit_once(target, f"Timed{number}")
            elif args.kind == "add":
                added.write_text(target.read_text().replace("n00042", f"ntimeline{number}"))
            else:  # one added (and built) first, then deleted
                added.write_text(target.read_text().replace("n00042", f"ntimeline{number}"))
                doit(root)
                added.unlink()
            print("  " + ", ".join(timeline(root)))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
