"""Parts of an edit's stages timed in one process on a built knowledge base, where the
whole-process figures of edit_timeline.py say a stage is slow but not which of its
steps: the entity profiles made again (and the share of their per-entity work), the
compile record read back, the facts memo read and written, embed's read of
chunks.parquet to key its row groups, and (a first build's) hash-256 vectors of every
chunk's text in one process.

    .venv/bin/python benchmarks/stage_parts.py PROJECT [--runs 3]

PROJECT is a knowledge base built by `doit` (its build/.staging and .ctxfst/ are read,
nothing is written). Prints each part's best and median seconds over --runs.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path


def _timed(runs: int, work: Callable[[], object]) -> tuple[float, float]:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        work()
        times.append(time.perf_counter() - started)
    return min(times), statistics.median(times)


def _per_entity(profiles_module) -> dict[str, float]:
    """Wraps the per-entity steps of build_profiles (their texts, keywords, excerpts) to
    add up their seconds; returns the totals, filled as it runs."""
    totals = {"per-entity": 0.0}
    for name in ("_quoted", "tokens", "truncate_words", "_top_words"):
        real = getattr(profiles_module, name)

        def wrapper(*args, _real=real, **kwargs):
            started = time.perf_counter()
            try:
                return _real(*args, **kwargs)
            finally:
                totals["per-entity"] += time.perf_counter() - started

        setattr(profiles_module, name, wrapper)
    return totals


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("project", type=Path)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()

    import pyarrow.parquet as pq

    import ctxfst.compile.profiles as profiles
    from ctxfst.artifacts.io import compact_json, read_regular
    from ctxfst.artifacts.parquet_splice import group_spans
    from ctxfst.artifacts.reader import parse_json
    from ctxfst.facts.build import FACT_GROUP_ROWS, HEAVY_EVIDENCE
    from ctxfst.facts.memo import RECORD, LedgerMemo
    from ctxfst.pipeline.chunk_rows import load_compiled
    from ctxfst.pipeline.units import UnitStore

    root = args.project.resolve()
    staging = root / "build" / ".staging"
    store = UnitStore(root / ".ctxfst" / "cache" / "units.sqlite")
    results: list[tuple[str, float, float]] = []

    catalog = parse_json((staging / "catalog.json").read_bytes())
    chunks = pq.ParquetFile(staging / "chunks.parquet")
    totals = _per_entity(profiles)
    best, median = _timed(args.runs, lambda: profiles.build_profiles(catalog, chunks))
    results.append(("profiles: build_profiles, every entity", best, median))
    results.append(("  of which per-entity work (texts, keywords, excerpts), mean",
                    totals["per-entity"] / args.runs, totals["per-entity"] / args.runs))

    results.append(("compile: load_compiled (the compile record read back)",
                    *_timed(args.runs, lambda: load_compiled(store))))

    memo = store.value(RECORD)
    ledger = root / ".ctxfst" / "facts"
    if isinstance(memo, dict) and (ledger / "semantic_fact_evidence.parquet").is_file():
        data = (ledger / "semantic_facts.parquet").read_bytes()
        evidence = (ledger / "semantic_fact_evidence.parquet").read_bytes()

        def read_memo():
            return LedgerMemo.read(json.loads(compact_json(memo)), data, memo["facts_sha256"],
                                   memo["runs_sha256"], evidence, memo["evidence_sha256"],
                                   FACT_GROUP_ROWS, HEAVY_EVIDENCE)

        read = read_memo()
        if read is not None:
            results.append((f"facts: the memo decoded and read ({len(read.keys)} groups)",
                            *_timed(args.runs, read_memo)))
            results.append(("facts: the memo encoded again",
                            *_timed(args.runs, lambda: compact_json(read.as_data()))))

    def key_groups():
        data = read_regular(staging / "chunks.parquet", follow_links=False)[0]
        view = memoryview(data)
        return [hashlib.sha256(view[start:start + size]).hexdigest()
                for start, size, _ in group_spans(data)]

    results.append(("embed: chunks.parquet read, its groups found and hashed",
                    *_timed(args.runs, key_groups)))

    from ctxfst.compile.embed import HashEmbedder, chunk_text

    texts = [chunk_text(row) for row in chunks.read(columns=["context", "content"]).to_pylist()]
    results.append((f"embed: hash-256 vectors of every chunk's text ({len(texts)}), "
                    "one process", *_timed(args.runs, lambda: HashEmbedder(256)._encode(texts))))
    store.close()
    width = max(len(name) for name, _, _ in results)
    print(f"{root} ({args.runs} runs: best / median seconds)")
    for name, best, median in results:
        print(f"  {name:<{width}}  {best:.3f} / {median:.3f}")


if __name__ == "__main__":
    main()
