"""Which embedding model should a knowledge base use? Each model builds each evaluation
set, then every retrieval mode is scored on the set's queries (`ctxfst eval`'s metrics).

    .venv/bin/python benchmarks/model_eval.py [--models minilm use-multilingual e5-small]
        [--sets ch22 zhtw] [--k 3]

Sets: `ch22` (the public benchmark: 6 zh-TW queries over one mixed-language document),
`zhtw` (tests/fixtures/zhtw: our own held-out zh-TW knowledge base with graded queries,
many needing a graph hop), or the path of any project folder holding content/ and
queries.yaml. Prints one table row per set, model and mode. Load times and throughput:
benchmarks/embedders.py (a model loaded here may have been loaded already, as the
query bridge).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

import yaml

from ctxfst.pipeline.runner import run_build
from ctxfst.retrieval.evaluate import evaluate, load_queries
from ctxfst.workspace import Workspace

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures"
MODES = ["vector", "lexical", "graph", "hybrid"]


def make_project(name: str, root: Path) -> Path:
    """A copy of the set as a project in root; returns its queries file."""
    if name == "ch22":
        (root / "content").mkdir(parents=True)
        shutil.copy(FIXTURES / "ch22" / "benchmark.ctxfst.md", root / "content")
        shutil.copy(FIXTURES / "ch22" / "queries.yaml", root / "queries.yaml")
    else:
        source = FIXTURES / name if (FIXTURES / name).is_dir() else Path(name)
        shutil.copytree(source / "content", root / "content")
        shutil.copy(source / "queries.yaml", root / "queries.yaml")
    (root / "skills").mkdir(exist_ok=True)
    return root / "queries.yaml"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", nargs="+", default=["minilm", "use-multilingual",
                                                        "e5-small"])
    parser.add_argument("--sets", nargs="+", default=["ch22", "zhtw"])
    parser.add_argument("--k", type=int, default=3)
    args = parser.parse_args()
    print(f"| set | model | mode | Hit@{args.k} | P@{args.k} | recall@{args.k} | MRR | "
          f"nDCG@{args.k} |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for set_name in args.sets:
        for model in args.models:
            root = Path(tempfile.mkdtemp(prefix="ctxfst-model-eval-"))
            try:
                queries_file = make_project(set_name, root)
                (root / "ctxfst.toml").write_text(
                    'content_dir = "content"\nskills_dir = "skills"\nbuild_dir = "build"\n'
                    f'embedding_model = "{model}"\n', encoding="utf-8")
                if run_build(root, [], quiet=True) != 0:
                    sys.exit(f"{set_name} with {model}: the build failed")
                workspace = Workspace.open(root)
                queries = load_queries(yaml.safe_load(queries_file.read_text("utf-8")))
                report = evaluate(workspace.index, queries, MODES, args.k, workspace.embed,
                                  bridge_for=lambda text: workspace.bridge_for(  # noqa: B023 (called in this iteration)
                                      text, "use-multilingual"))
                n = report["queries"]
                for mode, m in report["modes"].items():
                    print(f"| {set_name} | {model} | {mode} | "
                          f"{m['hit_at_k']}/{n} | {m['precision_at_k']:.2f} | "
                          f"{m['recall_at_k']:.2f} | {m['mrr']:.2f} | {m['ndcg']:.2f} |",
                          flush=True)
            finally:
                shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
