"""Measure the compiler: no-op and one-edit `doit` at scale, overhead over raw encoding,
and SIMILAR kNN time and memory.

    .venv/bin/python benchmarks/build_speed.py [--docs 1000 10000] [--edits 5]
        [--overhead-docs 60] [--knn 25000 50000] [--no-json-exports]

Scale runs use the deterministic hash embedder (`hash-256`) in place of a model; the
overhead run uses the real bundled all-MiniLM-L6-v2.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ctxfst.mock import generate

# Python's default: modules load from cached bytecode. (Some sandboxes set
# PYTHONDONTWRITEBYTECODE; every build there compiles each module changed since its
# cached bytecode again, some 0.1 s that depends on what was edited last, not on the KB.)
DOIT_ENV = {name: value for name, value in os.environ.items()
            if name != "PYTHONDONTWRITEBYTECODE"}


def doit(root: Path) -> tuple[float, str]:
    elapsed, out, _ = doit_measured(root)
    return elapsed, out


def doit_measured(root: Path) -> tuple[float, str, int]:
    """Wall time and stdout of one `doit` process, and the peak RSS (KB) of the largest
    child process so far (the first, full build is the largest)."""
    import resource

    doit_bin = Path(sys.executable).with_name("doit")
    started = time.perf_counter()
    proc = subprocess.run([str(doit_bin)], cwd=root, capture_output=True, text=True,
                          env=DOIT_ENV)
    elapsed = time.perf_counter() - started
    if proc.returncode != 0:
        sys.exit(f"doit failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return elapsed, proc.stdout, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss


def stage(root: Path, name: str) -> dict:
    results = json.loads((root / "build/run_results.json").read_text())
    return next(s for s in results["stages"] if s["stage"] == name)


def make_project(root: Path, docs: int, model: str, json_exports: bool = True) -> None:
    generate(root, docs, seed=7)
    (root / "ctxfst.toml").write_text(
        f'content_dir = "content"\nskills_dir = "skills"\nembedding_model = "{model}"\n'
        f"json_exports = {str(json_exports).lower()}\n")
    shutil.copy(Path(__file__).resolve().parents[1] / "dodo.py", root / "dodo.py")


STAGE_NAMES = ("validate", "compile", "profiles", "embed", "graph", "facts", "manifest")


def _edit_once(target: Path, word: str) -> None:
    text = target.read_text()
    marker = text.index("<Chunk id=")
    body_line = text.index("\n", text.index("\n", marker) + 1)
    target.write_text(text[:body_line] + f" {word}." + text[body_line:])


def _stages(root: Path, output: str | None = None) -> str:
    """Each stage's recorded time; with the build's output, "-" for a stage that did not
    run in it (run_results.json keeps the last record of every stage)."""
    ran = None if output is None else {line.split()[-1] for line in output.splitlines()
                                       if line.startswith(".  ")}
    return " / ".join(f"{stage(root, name)['seconds']:.2f}" if ran is None or name in ran
                      else "-" for name in STAGE_NAMES)


def _timed(root: Path) -> tuple[float, str]:
    """One build's wall time, and its stages' times ("-": did not run)."""
    elapsed, output = doit(root)
    return elapsed, _stages(root, output)


def published_sizes(root: Path) -> str:
    """The published artifacts' bytes in all, and the JSON exports' among them."""
    from ctxfst.pipeline.table import JSON_EXPORTS

    manifest = json.loads((root / "build/manifest.json").read_text())
    total = sum(item["bytes"] for item in manifest["artifacts"])
    exports = sum(item["bytes"] for item in manifest["artifacts"]
                  if item["path"] in JSON_EXPORTS)
    return f"{total / 1e6:.0f} MB published, {exports / 1e6:.0f} MB of them JSON exports"


def scale(docs: int, edits: int = 5, json_exports: bool = True) -> dict[str, float]:
    """Full build, no-op, and the medians of `edits` one-sentence edits, adds and deletes
    of one document; the figures, for the ratios between sizes."""
    root = Path(tempfile.mkdtemp(prefix="ctxfst-scale-"))
    try:
        make_project(root, docs, "hash-256", json_exports)
        full, _, peak = doit_measured(root)
        print(f"full build, {docs} documents (hash-256 embedder, json_exports = "
              f"{str(json_exports).lower()})      {full:8.2f} s, peak RSS {peak / 1024:.0f} MB, "
              f"{published_sizes(root)}")
        print(f"  {' / '.join(STAGE_NAMES)}: {_stages(root)} s")
        noops = sorted(doit(root)[0] for _ in range(5))
        print(f"no-op doit, {docs} documents: median {noops[2]:.3f} s, best {noops[0]:.3f} s")
        target = next((root / "content").rglob("notes-00042.ctxfst.md"))
        timed = []
        for number in range(edits):
            _edit_once(target, f"Edited{number}")
            timed.append(_timed(root))
        timed.sort()
        middle = timed[len(timed) // 2]
        embed = stage(root, "embed")
        print(f"one edited document of {docs}: median {middle[0]:.2f} s wall of {edits} "
              f"(best {timed[0][0]:.2f} s); last embedded {embed['embedded']} text(s), "
              f"{embed['cache_hits']} from the cache, {embed.get('unchanged', 0)} copied "
              "with their row groups")
        print(f"  {' / '.join(STAGE_NAMES)}: {middle[1]} s")
        added = target.with_name("notes-added.ctxfst.md")
        adds, deletes = [], []
        for number in range(edits):
            added.write_text(target.read_text().replace("n00042", f"nadded{number}"))
            adds.append(_timed(root))
            added.unlink()
            deletes.append(_timed(root))
        adds.sort()
        deletes.sort()
        add, delete = adds[len(adds) // 2], deletes[len(deletes) // 2]
        print(f"one added document: median {add[0]:.2f} s wall of {len(adds)} ({add[1]} s)")
        print(f"one deleted document: median {delete[0]:.2f} s wall of {len(deletes)} "
              f"({delete[1]} s)")
        return {"full": full, "edit": middle[0], "add": add[0], "delete": delete[0]}
    finally:
        shutil.rmtree(root, ignore_errors=True)


RAW_ENCODE = """
import json, sys, time
started = time.perf_counter()
from ctxfst.compile.embed import get_embedder
texts = json.load(open(sys.argv[1]))
get_embedder("minilm").encode(texts, 32, False)
print(time.perf_counter() - started)
"""


def overhead(docs: int) -> None:
    """A full build (fresh cache) against a process that only loads the model and
    encodes the same texts; both pay interpreter start-up and model import."""
    root = Path(tempfile.mkdtemp(prefix="ctxfst-overhead-"))
    try:
        make_project(root, docs, "minilm")
        build, _ = doit(root)
        embed = stage(root, "embed")
        from ctxfst.compile.embed import chunk_text

        chunks = json.loads((root / "build/chunks.json").read_text())["chunks"]
        profiles = json.loads((root / "build/entity-profiles.json").read_text())["entities"]
        texts = sorted({chunk_text(c) for c in chunks} | {p["representation"] for p in profiles})
        listing = root / "texts.json"
        listing.write_text(json.dumps(texts))
        proc = subprocess.run([sys.executable, "-c", RAW_ENCODE, str(listing)],
                              capture_output=True, text=True, check=True)
        raw = float(proc.stdout.strip().splitlines()[-1])
        print(f"full build with all-MiniLM-L6-v2, {docs} documents, {embed['embedded']} "
              f"texts: {build:.2f} s; raw load+encode of the same texts: {raw:.2f} s; "
              f"overhead {100 * (build - raw) / raw:+.1f}%")
    finally:
        shutil.rmtree(root, ignore_errors=True)


KNN = """
import resource, sys, time
import numpy as np
from ctxfst.compile.graph import knn
count = int(sys.argv[1])
rng = np.random.default_rng(0)
matrix = rng.standard_normal((count, 384), dtype=np.float32)
matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
started = time.perf_counter()
knn(matrix, 5)
elapsed = time.perf_counter() - started
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(elapsed, before, after)
"""


def knn_scale(counts: list[int]) -> None:
    for count in counts:
        proc = subprocess.run([sys.executable, "-c", KNN, str(count)], capture_output=True,
                              text=True, check=True)
        elapsed, before, after = proc.stdout.split()
        print(f"SIMILAR kNN, {count} entities x 384 dims, top 5: {float(elapsed):.1f} s, "
              f"peak RSS {int(after) / 1024:.0f} MB (vectors alone "
              f"{count * 384 * 4 / 1e6:.0f} MB; kNN added "
              f"{(int(after) - int(before)) / 1024:.0f} MB)")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--docs", type=int, nargs="+", default=[10_000],
                        help="sizes to measure; with several, the edit, add and delete "
                             "costs of the largest over the smallest are printed too")
    parser.add_argument("--edits", type=int, default=5, help="edits measured (median)")
    parser.add_argument("--overhead-docs", type=int, default=60)
    parser.add_argument("--knn", type=int, nargs="*", default=[25_000, 50_000])
    parser.add_argument("--skip", nargs="*", default=[], choices=["scale", "overhead", "knn"])
    parser.add_argument("--no-json-exports", action="store_true",
                        help="build with json_exports = false (no chunks.json, "
                             "entity-profiles.json)")
    args = parser.parse_args()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores")
    if "scale" not in args.skip:
        figures = {docs: scale(docs, args.edits, not args.no_json_exports)
                   for docs in args.docs}
        if len(figures) > 1:
            small, large = min(figures), max(figures)
            print(f"cost at {large} over cost at {small} documents: " + ", ".join(
                f"{name} {figures[large][name] / figures[small][name]:.2f}x"
                for name in ("edit", "add", "delete")))
    if "overhead" not in args.skip:
        overhead(args.overhead_docs)
    if "knn" not in args.skip:
        knn_scale(args.knn)


if __name__ == "__main__":
    main()
