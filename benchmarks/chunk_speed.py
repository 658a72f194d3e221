"""How fast `ctxfst chunk` drafts a folder of notes: N notes made from this repository's
own docs (real Markdown: headings, lists, tables, code), drafted into a fresh project
whose catalog is the example knowledge base's entities. Prints notes/s and MB/s.

    .venv/bin/python benchmarks/chunk_speed.py --notes 1000
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

from ctxfst.authoring.chunk import Options
from ctxfst.authoring.convert import convert

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--notes", type=int, nargs="+", default=[100, 1000])
    args = parser.parse_args()
    sources = sorted((REPO / "docs").glob("*.md"))
    for count in args.notes:
        with tempfile.TemporaryDirectory() as folder:
            root = Path(folder)
            (root / "ctxfst.toml").write_text('content_dir = "content"\n'
                                              'skills_dir = "skills"\n')
            shutil.copytree(REPO / "content", root / "content")
            notes = root / "notes"
            notes.mkdir()
            size = 0
            for index in range(count):
                text = sources[index % len(sources)].read_text(encoding="utf-8")
                (notes / f"note-{index:05}.md").write_text(text, encoding="utf-8")
                size += len(text.encode())
            started = time.perf_counter()
            result = convert([notes], root / "content" / "notes", Options())
            seconds = time.perf_counter() - started
            assert not result.failed, result.diagnostics[:3]
            chunks = sum(len(d.chunks) for d in result.drafts)
            print(f"{count:,} notes ({size / 1e6:.1f} MB, {chunks:,} chunks): {seconds:.2f} s, "
                  f"{count / seconds:,.0f} notes/s, {size / 1e6 / seconds:.2f} MB/s")


if __name__ == "__main__":
    main()
