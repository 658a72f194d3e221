"""When each stage of one edit's build runs, in the doit process and in the process the
facts stage forks (pipeline/beside.py): what lies on the critical path, and what runs
beside it.

    .venv/bin/python benchmarks/edit_timeline.py --docs 10000 [--edits 3] [--kind edit]
        [--project DIR] [--time ctxfst.facts.build:_merge_by_group ...]

Generates a knowledge base (hash-256 embedder), builds it (timed too), settles it with a
no-op, then times `--edits` changes of one document (`edit`: a sentence added; `add`,
`delete`: one document), printing each stage's start and end in seconds from the process
start (the interpreter's own start-up excluded, doit's task load included) and the
process's end, and the megabytes each stage wrote (Linux: /proc/self/io, page-cache
writes included) with the seconds it waited in fsync.
With `--time`, also the total time and calls of each named function in each process
(`module:name`, `module:Class.method`; a function is timed where the module named is
the one its callers look it up in).
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
fsynced = [0.0]  # seconds this process waited in fsync (os.fsync wrapped below)

def written() -> int:
    # the bytes this process has sent to storage so far (page-cache writes included)
    try:
        with open("/proc/self/io") as counters:
            return next(int(line.split()[1]) for line in counters
                        if line.startswith("write_bytes:"))
    except (OSError, StopIteration):
        return 0

real_fsync = os.fsync

def fsync(fd):
    begin = time.perf_counter()
    try:
        return real_fsync(fd)
    finally:
        fsynced[0] += time.perf_counter() - begin

os.fsync = fsync

def run_stage(run, stage, *args, **kwargs):
    begin, bytes_before, fsync_before = time.perf_counter(), written(), fsynced[0]
    try:
        return real(run, stage, *args, **kwargs)
    finally:
        name = getattr(stage, "name", stage)
        os.write(2, f"{os.getpid()} {name} {begin - started:.2f} "
                    f"{time.perf_counter() - started:.2f}\\n".encode())
        os.write(2, f"{os.getpid()} io {name} {(written() - bytes_before) / 1e6:.1f} "
                    f"{fsynced[0] - fsync_before:.3f}\\n".encode())

stages.run_stage = tasks.run_stage = run_stage

import functools, importlib

def timed(function, label):
    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        begin = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            os.write(2, f"{os.getpid()} call {label} "
                        f"{time.perf_counter() - begin:.4f}\\n".encode())
    return wrapper

for label in filter(None, os.environ.get("CTXFST_TIMED", "").split(",")):
    module, _, name = label.partition(":")
    owner = importlib.import_module(module)
    *path, last = name.split(".")
    for part in path:
        owner = getattr(owner, part)
    setattr(owner, last, timed(getattr(owner, last), label))
import atexit
atexit.register(lambda: os.write(2, f"{os.getpid()} end {time.perf_counter() - started:.2f}"
                                    "\\n".encode()))
sys.argv = ["doit"]
from doit.__main__ import main
sys.exit(main())
"""


def timeline(root: Path, timed: list[str] = ()) -> tuple[list[str], list[str]]:
    """Each stage's start and end, what each stage wrote (MB, and seconds waiting in
    fsync), and each timed function's total and calls by process."""
    proc = subprocess.run([sys.executable, "-c", TIMED_DOIT], cwd=root, capture_output=True,
                          text=True, env={**DOIT_ENV, "CTXFST_TIMED": ",".join(timed)})
    if proc.returncode != 0:
        sys.exit(f"doit failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    words = [line.split() for line in proc.stderr.splitlines()
             if line.split() and line.split()[0].isdigit()]
    lines = [line for line in words if len(line) in (3, 4) and line[1] != "call"]
    parent = next(pid for pid, name, *_ in lines if name == "end")
    shown = []
    for pid, name, *times in lines:
        where = "" if pid == parent else " (beside)"
        shown.append(f"{name}{where} {'-'.join(times)}" if len(times) == 2
                     else f"end {times[0]}")
    totals: dict[tuple[str, str], list[float]] = {}
    for pid, _, label, seconds in (line for line in words if len(line) == 4
                                   and line[1] == "call"):
        totals.setdefault((label, "" if pid == parent else " (beside)"), []).append(
            float(seconds))
    calls = [f"{label}{where} {sum(times):.3f} s ({len(times)} calls)"
             for (label, where), times in sorted(totals.items(), key=lambda i: -sum(i[1]))]
    io = [line for line in words if len(line) == 5 and line[1] == "io"]
    total = sum(float(megabytes) for _, _, _, megabytes, _ in io)
    if total:  # (0: no /proc/self/io here)
        calls.insert(0, f"written {total:.0f} MB: " + ", ".join(
            f"{name}{'' if pid == parent else ' (beside)'} {float(megabytes):.0f} MB "
            f"(fsync {float(seconds):.2f} s)" for pid, _, name, megabytes, seconds in io
            if float(megabytes) >= 1))
    return shown, calls


def _show(stages: list[str], calls: list[str]) -> None:
    print("  " + ", ".join(stages))
    for line in calls:
        print(f"    {line}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=10000)
    parser.add_argument("--edits", type=int, default=3)
    parser.add_argument("--kind", choices=("edit", "add", "delete"), default="edit")
    parser.add_argument("--time", nargs="*", default=[], metavar="MODULE:NAME",
                        help="functions to time in every process of the build")
    parser.add_argument("--project", type=Path,
                        help="a knowledge base make_project made (and built) before, "
                             "changed in place: no first build (100,000 documents take "
                             "minutes to generate and build)")
    args = parser.parse_args()
    root = args.project or Path(tempfile.mkdtemp(prefix="ctxfst-timeline-"))
    try:
        if args.project is None:
            make_project(root, args.docs, "hash-256")
            print(f"{args.docs} documents, the first build (seconds from start):")
            _show(*timeline(root, args.time))
        doit(root)  # (settled: the first no-op after a build may still hash)
        target = next((root / "content").rglob("notes-00042.ctxfst.md"))
        size = sum(1 for _ in (root / "content").rglob("*.md"))
        print(f"{size} documents, one {args.kind} per build (seconds from start):")
        # (numbered after the adds of earlier runs on a --project knowledge base)
        first = sum(1 for _ in target.parent.glob("notes-timeline-*.ctxfst.md"))
        for number in range(first, first + args.edits):
            added = target.with_name(f"notes-timeline-{number}.ctxfst.md")
            if args.kind == "edit":
                _edit_once(target, f"Timed{number}")
            elif args.kind == "add":
                added.write_text(target.read_text().replace("n00042", f"ntimeline{number}"))
            else:  # one added (and built) first, then deleted
                added.write_text(target.read_text().replace("n00042", f"ntimeline{number}"))
                doit(root)
                added.unlink()
            _show(*timeline(root, args.time))
    finally:
        if args.project is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
