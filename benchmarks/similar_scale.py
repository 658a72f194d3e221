"""SIMILAR edges for many entities: the exact kNN against the HNSW index.

    .venv/bin/python benchmarks/similar_scale.py [--entities 100000 1000000]
        [--exact-up-to 50000] [--dim 256]

Generates entity profiles with neighbourhoods (families of six entities that share most
of their words, and words of their own), embeds them with the hash embedder, and times
the graph stage's SIMILAR step (`similar_edges`) with the index, printing its recall
against the exact neighbours (measured on 1,000 entities, as a build records it). Up to
--exact-up-to entities the exact kNN is timed too.
"""

from __future__ import annotations

import argparse
import resource
import time

import numpy as np

from ctxfst.compile.embed import get_embedder
from ctxfst.compile.graph import similar_edges

FAMILY = 6


def profiles(count: int, seed: int = 0) -> list[str]:
    """A profile a generated entity: its name, 7 of its family's 10 words, 3 of 50,000."""
    rng = np.random.default_rng(seed)
    family_words = rng.integers(0, 10, size=(count, 7))
    other_words = rng.integers(0, 50_000, size=(count, 3))
    return [" ".join([f"entity{row}"]
                     + [f"family{row // FAMILY}word{word}" for word in family_words[row]]
                     + [f"word{word}" for word in other_words[row]])
            for row in range(count)]


def run(count: int, dim: int, exact: bool) -> None:
    started = time.perf_counter()
    matrix = get_embedder(f"hash-{dim}").encode(profiles(count), 4096, False)
    ids = [f"entity:{row:08d}" for row in range(count)]
    print(f"{count:,} entities: profiles embedded in {time.perf_counter() - started:.1f} s",
          flush=True)
    limit = count if exact else count - 1
    started = time.perf_counter()
    edges, report = similar_edges(ids, matrix, 5, 0.35, {}, limit)
    took = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"  {report['method']}: {took:.1f} s, {len(edges):,} SIMILAR edges, "
          f"peak RSS {peak:,.0f} MB"
          + (f", recall@5 {report['recall_at_k']:.3f}, edges' recall "
             f"{report['edge_recall']:.3f} (sample {report['sample']:,})"
             if report["method"] != "exact" else ""), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--entities", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--exact-up-to", type=int, default=50_000)
    parser.add_argument("--dim", type=int, default=256)
    args = parser.parse_args()
    for count in args.entities:
        if count <= args.exact_up_to:
            run(count, args.dim, exact=True)
        run(count, args.dim, exact=False)


if __name__ == "__main__":
    main()
