"""Query latency per mode on a large build, excluding the query's own embedding.

    .venv/bin/python benchmarks/query_speed.py [--docs 14300] [--queries 40]

Builds a mock knowledge base (7 chunks a document: 14,300 documents is about 100,000
chunks) with the deterministic hash-256 embedder, loads the artifacts once (timed),
then runs each mode on the same queries with precomputed query vectors.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from ctxfst.compile.embed import get_embedder
from ctxfst.mock import generate
from ctxfst.pipeline.runner import run_build
from ctxfst.retrieval.search import Index, search

QUERIES = ["latency of the queue worker", "Kubernetes rollout with retry budget",
           "PostgreSQL index migration", "Go gRPC service under load", "vector search cache",
           "Telegram Bot API webhook", "部署 延遲 快取", "React and TypeScript tests",
           "event sourcing with Redis", "observability metrics and alerts"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--docs", type=int, default=14_300)
    parser.add_argument("--queries", type=int, default=40)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="ctxfst-query-"))
    try:
        generate(root, args.docs, seed=5)
        (root / "ctxfst.toml").write_text('embedding_model = "hash-256"\n')
        started = time.perf_counter()
        if run_build(root, []) != 0:
            sys.exit("build failed")
        print(f"build of {args.docs} documents: {time.perf_counter() - started:.1f} s")
        started = time.perf_counter()
        cache = root / ".ctxfst" / "cache"
        index = Index(root / "build", "hash-256", cache)
        print(f"artifact load: {time.perf_counter() - started:.2f} s, "
              f"{len(index.chunk_ids):,} chunks, {len(index.entity_ids):,} entities")
        started = time.perf_counter()
        _ = index.bm25  # built on the first lexical query, then kept in the cache folder
        print(f"lexical index built (first lexical query ever): "
              f"{time.perf_counter() - started:.2f} s")
        started = time.perf_counter()
        _ = Index(root / "build", "hash-256", cache).bm25
        print(f"artifact load + cached lexical index (a later process): "
              f"{time.perf_counter() - started:.2f} s")
        texts = [QUERIES[i % len(QUERIES)] for i in range(args.queries)]
        vectors = get_embedder("hash-256").encode(texts, 32, False)
        for mode in ("vector", "lexical", "graph", "hybrid"):
            times = []
            for text, vector in zip(texts, vectors, strict=True):
                started = time.perf_counter()
                search(index, text, vector, mode, 10, 2)
                times.append(time.perf_counter() - started)
            times.sort()
            p95 = times[min(len(times) - 1, int(0.95 * len(times)))]
            print(f"{mode:<8} p50 {1000 * statistics.median(times):7.1f} ms   "
                  f"p95 {1000 * p95:7.1f} ms   ({len(times)} queries, top 10)")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
