"""What an edit must spend on the artifacts it rewrites whole, with today's formats: for
each one, read the previous file, hash it (the manifest's sha256), copy it into a new
file by the kernel, and sync it. The figures are a floor under an edit's cost that grows
with the knowledge base, whatever the compiler does in Python.

    .venv/bin/python benchmarks/rewrite_floor.py PROJECT/build [--runs 5]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import time
from pathlib import Path

# Rewritten by every edit's build process (the facts process rewrites its own beside it).
REWRITTEN = ("chunks.json", "chunks.parquet", "chunk_vectors.parquet", "manifest.json")
STEPS = ("read", "hash", "copy", "sync")


def measure(source: Path) -> dict[str, float]:
    """One pass over one file: each step's seconds."""
    copy = source.with_name(source.name + ".floor")
    times = {}
    started = time.perf_counter()
    data = source.read_bytes()
    times["read"] = time.perf_counter() - started
    started = time.perf_counter()
    hashlib.sha256(data).hexdigest()
    times["hash"] = time.perf_counter() - started
    source_fd = os.open(source, os.O_RDONLY)
    target_fd = os.open(copy, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        started = time.perf_counter()
        done = 0
        while done < len(data):
            copied = os.copy_file_range(source_fd, target_fd, len(data) - done, done, done)
            if not copied:
                raise SystemExit(f"{source}: shorter than it was read")
            done += copied
        times["copy"] = time.perf_counter() - started
        started = time.perf_counter()
        os.fsync(target_fd)
        times["sync"] = time.perf_counter() - started
    finally:
        os.close(source_fd)
        os.close(target_fd)
        copy.unlink()
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("build", type=Path, help="a built project's build/ folder")
    parser.add_argument("--runs", type=int, default=5, help="passes per file (median)")
    args = parser.parse_args()
    totals = dict.fromkeys(STEPS, 0.0)
    for name in REWRITTEN:
        path = args.build / name
        runs = [measure(path) for _ in range(args.runs)]
        medians = {step: statistics.median(run[step] for run in runs) for step in STEPS}
        for step in STEPS:
            totals[step] += medians[step]
        print(f"{name:24s} {path.stat().st_size / 1e6:7.1f} MB  " + "  ".join(
            f"{step} {medians[step] * 1000:4.0f} ms" for step in STEPS))
    print(f"{'all':24s} {'':10s} " + "  ".join(
        f"{step} {totals[step] * 1000:4.0f} ms" for step in STEPS))


if __name__ == "__main__":
    main()
