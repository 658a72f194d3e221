"""Measure `ctxfst report` at scale: the time to write it, its size, and how long headless
Chromium takes to open it (navigation to the first full drawing) and to draw a frame.

    .venv/bin/python benchmarks/report_speed.py [--entities 1000 10000] [--no-browser]

Each knowledge base is generated here: documents of ten entities each, every chunk
linking three of its document's entities and one of another document's, built with the
deterministic hash embedder (`hash-256`).
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # (tests.browser)

from ctxfst.cli import main as ctxfst  # noqa: E402
from ctxfst.pipeline.runner import run_build  # noqa: E402

TYPES = ["concept", "tool", "framework", "state", "action", "evidence", "platform", "skill"]
PER_DOCUMENT = 10
WORDS = ["latency", "cache", "deploy", "index", "retry", "queue"]


def write_kb(root: Path, entities: int, seed: int = 0) -> None:
    rng = random.Random(seed)
    (root / "content").mkdir(parents=True)
    (root / "skills").mkdir()
    (root / "ctxfst.toml").write_text('content_dir = "content"\nskills_dir = "skills"\n'
                                      'embedding_model = "hash-256"\n')
    documents = max(1, entities // PER_DOCUMENT)
    for doc in range(documents):
        own = [doc * PER_DOCUMENT + n for n in range(PER_DOCUMENT)]
        foreign = [rng.randrange(documents * PER_DOCUMENT) for _ in range(3)]
        declared = sorted(set(own + foreign))
        lines = ["---", f'title: "Topic {doc}"', "entities:"]
        for number in declared:
            lines += [f"  - id: entity:e{number:06d}", f"    name: Entity {number}",
                      f"    type: {TYPES[number % len(TYPES)]}"]
        lines.append("chunks:")
        bodies = []
        for chunk in range(5):
            linked = rng.sample(own, 3) + [rng.choice(foreign)]
            chunk_id = f"c:d{doc:05d}-{chunk}"
            names = ", ".join(f"Entity {n}" for n in linked)
            lines += [f"  - id: {chunk_id}",
                      f'    context: "How {names} fit together in topic {doc}"',
                      f"    entities: [{', '.join(f'entity:e{n:06d}' for n in linked)}]"]
            words = " ".join(rng.choice(WORDS) for _ in range(40))
            bodies.append(f'<Chunk id="{chunk_id}">\nNotes on {names}: {words}.\n</Chunk>\n')
        path = root / "content" / f"{doc // 500:03d}" / f"topic-{doc:05d}.ctxfst.md"
        path.parent.mkdir(exist_ok=True)
        path.write_text("\n".join(lines) + "\n---\n\n" + "\n".join(bodies), encoding="utf-8")


def open_in_chromium(page: Path) -> dict:
    from tests.browser import Chromium, chromium_path, file_url

    executable = chromium_path()
    if executable is None:
        return {"browser": "no chromium"}
    with Chromium(executable) as browser:
        opened = browser.open(file_url(page), timeout=300)
        opened.wait_for("window.ctxfstReport && window.ctxfstReport.ready "
                        "&& window.ctxfstReport.openMs !== null", timeout=300)
        state = opened.evaluate("({open: ctxfstReport.openMs, nodes: ctxfstReport.drawnNodes, "
                                "edges: ctxfstReport.drawnEdges})")
        frames = sorted(opened.evaluate("ctxfstReport.redraw()") for _ in range(7))
        search = sorted(opened.evaluate(
            "(function () { var t = performance.now(); ctxfstReport.search('Entity 42'); "
            "return performance.now() - t; })()") for _ in range(7))[3]
        return {"open_ms": state["open"], "drawn_nodes": state["nodes"],
                "drawn_edges": state["edges"], "frame_ms": round(frames[3], 1),
                "search_ms": round(search, 1), "errors": opened.console_errors()}


def measure(entities: int, browser: bool) -> dict:
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder) / "kb"
        write_kb(root, entities)
        assert run_build(root, [], quiet=True) == 0
        import os

        here = os.getcwd()
        os.chdir(root)
        try:
            timings = {}
            for name, extra in (("report_s", []), ("report_no_lint_s", ["--no-lint"])):
                started = time.perf_counter()
                assert ctxfst(["report", "-q", *extra]) == 0
                timings[name] = round(time.perf_counter() - started, 2)
        finally:
            os.chdir(here)
        import json

        graph = json.loads((root / "build" / "entity-graph.json").read_text())
        page = root / "build" / "report.html"
        result = {"entities": len(graph["nodes"]), "edges": len(graph["edges"]),
                  "bytes": page.stat().st_size, **timings}
        if browser:
            result.update(open_in_chromium(page))
        return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entities", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--no-browser", action="store_true")
    args = parser.parse_args()
    print("| entities | edges | report size | write (with lint) | write (--no-lint) | open "
          "in Chromium | one frame | search |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for count in args.entities:
        r = measure(count, not args.no_browser)
        print(f"| {r['entities']:,} | {r['edges']:,} | {r['bytes'] / 1e6:.1f} MB | "
              f"{r['report_s']:.2f} s | {r['report_no_lint_s']:.2f} s | "
              f"{r.get('open_ms', '-')} ms | {r.get('frame_ms', '-')} ms | "
              f"{r.get('search_ms', '-')} ms |", flush=True)
        if r.get("errors"):
            print(f"console errors: {r['errors']}", file=sys.stderr)


if __name__ == "__main__":
    main()
