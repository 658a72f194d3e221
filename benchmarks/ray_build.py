"""The build on the ray engine against the local one: its parsing and its embedding.

    .venv/bin/python benchmarks/ray_build.py [--docs 300] [--model minilm] [--concurrency 0]

Generates a mock knowledge base, then builds two copies from nothing (each its own
caches): one with the local engine, one with `--engine ray` on a local Ray cluster
started for it. Prints each validate stage's time and the documents it parsed (on the
cluster, with ray), each embed stage's time and throughput (texts embedded a second,
the stage's whole time: the cluster's start and the model's load in every actor
included), and whether the artifacts are the same bytes. `--model hash-256` measures
the parsing at sizes a real model would take hours to embed.
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

from build_speed import stage
from ctxfst.mock import generate
from ctxfst.pipeline.table import ARTIFACTS


def build(root: Path, engine: str) -> float:
    env = {name: value for name, value in os.environ.items() if name != "RAY_ADDRESS"}
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "ctxfst", "build", "-q", "--root", str(root),
                    "--engine", engine], check=True, env=env)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--docs", type=int, default=300)
    parser.add_argument("--model", default="minilm")
    parser.add_argument("--concurrency", type=int, default=0,
                        help="ray_concurrency (0: the cluster's CPUs over the threads an "
                             "actor runs)")
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="ctxfst-ray-build-"))
    try:
        roots = {}
        for engine in ("local", "ray"):
            root = roots[engine] = base / engine
            generate(root, args.docs, seed=11)
            (root / "ctxfst.toml").write_text(
                f'embedding_model = "{args.model}"\nray_concurrency = {args.concurrency}\n')
        for engine, root in roots.items():
            whole = build(root, engine)
            parsed = stage(root, "validate")
            record = stage(root, "embed")
            actors = f", {record['ray_actors']} actor(s)" if engine == "ray" else ""
            print(f"{engine:<5} engine: validate stage {parsed['seconds']:.1f} s, "
                  f"{parsed['documents_parsed']:,} files parsed"
                  f" ({parsed.get('ray_parsed', 0):,} on the cluster); embed stage"
                  f"{actors} {record['seconds']:.1f} s for {record['embedded']:,} texts, "
                  f"{record['embedded'] / record['seconds']:.1f} texts/s; whole build "
                  f"{whole:.1f} s", flush=True)
        same = all((roots["local"] / "build" / name).read_bytes()
                   == (roots["ray"] / "build" / name).read_bytes()
                   for name in [*ARTIFACTS, "manifest.json"])
        print(f"{args.docs} documents, {args.model}: artifacts "
              f"{'byte-identical' if same else 'DIFFERENT'}")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
