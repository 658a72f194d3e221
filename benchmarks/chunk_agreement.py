"""How `ctxfst chunk` drafts of the ch22 notes agree with the benchmark's hand-made CtxFST
document: chunk boundaries and entity links (the hand-made document's entities as the
catalog). Prints the figures docs/authoring.md quotes.

    .venv/bin/python benchmarks/chunk_agreement.py [--set tests/fixtures/ch22]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from ctxfst.authoring.agreement import compare
from ctxfst.authoring.chunk import Options
from ctxfst.authoring.convert import convert
from ctxfst.document.kb import inputs_for
from ctxfst.kb import load_kb

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--set", type=Path, default=REPO / "tests" / "fixtures" / "ch22",
                        help="a folder with notes/ and benchmark.ctxfst.md")
    parser.add_argument("--max-tokens", type=int, default=Options.max_tokens)
    args = parser.parse_args()
    reference = args.set / "benchmark.ctxfst.md"
    with tempfile.TemporaryDirectory() as out:
        result = convert([args.set / "notes"], Path(out), Options(max_tokens=args.max_tokens),
                         catalog_paths=[reference])
        assert not result.failed, result.diagnostics
        drafts = load_kb(Path(out), inputs_for([Path(out)], False)).documents
        ref = load_kb(reference.parent, inputs_for([reference])).documents
        agreement = compare(drafts, ref)
    print(f"notes: {len(result.drafts)}, draft chunks: {agreement.draft_chunks}, "
          f"hand-made chunks: {agreement.reference_chunks}")
    print(f"boundaries: {agreement.same_boundaries}/{agreement.reference_chunks} hand-made "
          f"chunks are one draft chunk; without a counterpart in the notes: "
          f"{', '.join(agreement.without_counterpart) or 'none'}")
    for ref_id, draft_id, score in agreement.pairs:
        print(f"  {ref_id:32} ~ {draft_id:28} words Jaccard {score:.2f}")
    print(f"entity links on matched chunks: {agreement.links_agreed} agreed of "
          f"{agreement.links_drafted} drafted and {agreement.links_reference} hand-made: "
          f"precision {agreement.precision:.2f}, recall {agreement.recall:.2f}")


if __name__ == "__main__":
    main()
