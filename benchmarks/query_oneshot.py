"""One-shot `ctxfst query` wall time: a new process each query, as a shell or a script
calls it (imports, the freshness check, loading the index, embedding, searching).

    .venv/bin/python benchmarks/query_oneshot.py [--docs 10000] [--runs 15] [--model hash-256]

Generates a mock knowledge base (7 chunks a document), builds it with the model, then
times the first query after the build (it decodes the vectors and keeps a copy in the
cache folder) and `--runs` later ones, each in its own process.
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
from ctxfst.pipeline.runner import run_build

QUERIES = ["Kubernetes rollout with retry budget", "PostgreSQL index migration",
           "vector search cache", "部署 延遲 快取", "Telegram Bot API webhook"]


def timed_query(root: Path, text: str, mode: str) -> float:
    command = [sys.executable, "-m", "ctxfst", "query", text, "--mode", mode]
    started = time.perf_counter()
    done = subprocess.run(command, cwd=root, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"query failed ({done.returncode}): {done.stderr.strip()}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--docs", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--model", default="hash-256")
    parser.add_argument("--mode", default="graph")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="ctxfst-oneshot-"))
    try:
        generate(root, args.docs, seed=5)
        with (root / "ctxfst.toml").open("a", encoding="utf-8") as settings:
            settings.write(f'embedding_model = "{args.model}"\n')
        started = time.perf_counter()
        if run_build(root, [], quiet=True) != 0:
            sys.exit("build failed")
        print(f"build of {args.docs:,} documents ({args.model}): "
              f"{time.perf_counter() - started:.1f} s", file=sys.stderr)
        first = timed_query(root, QUERIES[0], args.mode)
        times = sorted(timed_query(root, QUERIES[i % len(QUERIES)], args.mode)
                       for i in range(args.runs))
        print(f"one-shot `ctxfst query --mode {args.mode}`, {args.docs:,} documents, "
              f"{args.model}, {os.cpu_count()} CPUs")
        print(f"first after the build: {first:.2f} s")
        print(f"later ({args.runs} runs): p50 {statistics.median(times):.2f} s, "
              f"min {times[0]:.2f} s, max {times[-1]:.2f} s")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
