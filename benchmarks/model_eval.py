"""Retrieval quality of every model and mode on the evaluation suite, each set's dev half
and test half apart (`ctxfst eval --half`'s split: a seeded hash of each question id).

    .venv/bin/python benchmarks/model_eval.py [--models minilm use-multilingual e5-small]
        [--sets ch22 zhtw ...] [--k 3] [--builds DIR] [--save FILE] [--against FILE]

A ranking change is chosen on the dev halves and judged on the test halves
(docs/retrieval.md says the rule). Sets: the names in SETS (folders of tests/fixtures/
holding content/ and queries.yaml; ch22 is one document beside its queries), or the path
of any such folder. Prints one row per set, model, mode and half, then each model's
relevant@k summed over the sets' halves. --builds DIR keeps each set's build there
(DIR/<set>-<model>) and builds it again incrementally on the next run, so that a ranking
change is scored in seconds. --save FILE writes each question's relevant@k by set, model,
half and mode; --against FILE (one saved before the change) then applies the rule of
docs/retrieval.md to graph mode: the change is kept when it raises the dev halves' summed
relevant@k and no test half loses more than one question (a question with a relevant
chunk in the top k before and none after). Load times and throughput:
benchmarks/embedders.py.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import yaml

from ctxfst.pipeline.runner import run_build
from ctxfst.retrieval.evaluate import HALVES, evaluate, load_queries
from ctxfst.workspace import Workspace

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures"
SETS = ["ch22", "zhtw", "en-ops", "zhtw-hiking"]
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


def score_set(set_name: str, model: str, k: int, builds: Path | None = None
              ) -> dict[str, dict]:
    """{half: ctxfst eval's report} of one set built with one model (in builds, kept,
    when given)."""
    kept = builds / f"{Path(set_name).name}-{model}" if builds is not None else None
    root = kept or Path(tempfile.mkdtemp(prefix="ctxfst-model-eval-"))
    try:
        if kept is not None and kept.exists():
            shutil.rmtree(kept / "content")  # (the set as it is now; the build catches up)
        queries_file = make_project(set_name, root)
        (root / "ctxfst.toml").write_text(
            'content_dir = "content"\nskills_dir = "skills"\nbuild_dir = "build"\n'
            f'embedding_model = "{model}"\n', encoding="utf-8")
        if run_build(root, [], quiet=True) != 0:
            sys.exit(f"{set_name} with {model}: the build failed")
        workspace = Workspace.open(root)
        queries = load_queries(yaml.safe_load(queries_file.read_text("utf-8")))

        def bridge_for(text: str):
            return workspace.bridge_for(text, "use-multilingual")

        return {half: evaluate(workspace.index, queries, MODES, k, workspace.embed,
                               bridge_for=bridge_for, half=half) for half in HALVES}
    finally:
        if kept is None:
            shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", nargs="+", default=["minilm", "use-multilingual",
                                                        "e5-small"])
    parser.add_argument("--sets", nargs="+", default=SETS)
    parser.add_argument("--k", type=int, default=3)
    parser.add_argument("--builds", type=Path, default=None,
                        help="keep the builds in this folder and reuse them")
    parser.add_argument("--save", type=Path, default=None,
                        help="write each question's relevant@k to this JSON file")
    parser.add_argument("--against", type=Path, default=None,
                        help="judge graph mode against a --save file of before the change")
    args = parser.parse_args()
    k = args.k
    print(f"| set | model | mode | half | Hit@{k} | relevant@{k} | MRR | nDCG@{k} |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    # (model, mode, half) -> [relevant, possible]
    summed: dict[tuple[str, str, str], list[int]] = defaultdict(lambda: [0, 0])
    # "set|model|half" -> mode -> question id -> relevant chunks in its top k
    per_question: dict[str, dict[str, dict[str, int]]] = {}
    for set_name in args.sets:
        for model in args.models:
            reports = score_set(set_name, model, k, args.builds)
            for half, report in reports.items():
                per_question[f"{set_name}|{model}|{half}"] = {
                    mode: {str(q["id"]): sum(hit["relevant"] for hit in q["results"][mode])
                           for q in report["per_query"]} for mode in MODES}
            for mode in MODES:
                for half, report in reports.items():
                    m, n = report["modes"][mode], report["queries"]
                    total = summed[model, mode, half]
                    total[0] += m["relevant_in_top_k"]
                    total[1] += m["possible"]
                    print(f"| {set_name} | {model} | {mode} | {half} | {m['hit_at_k']}/{n} | "
                          f"{m['relevant_in_top_k']}/{m['possible']} | {m['mrr']:.2f} | "
                          f"{m['ndcg']:.2f} |", flush=True)
    print(f"\nrelevant@{k} summed over the sets ({', '.join(args.sets)}):\n")
    print("| model | mode | dev | test |")
    print("| --- | --- | --- | --- |")
    for model in args.models:
        for mode in MODES:
            cells = [f"{summed[model, mode, half][0]}/{summed[model, mode, half][1]}"
                     for half in HALVES]
            print(f"| {model} | {mode} | {' | '.join(cells)} |")
    if args.save is not None:
        args.save.write_text(json.dumps(per_question, indent=1, sort_keys=True) + "\n")
    if args.against is not None:
        judge(json.loads(args.against.read_text()), per_question)


def judge(before: dict, after: dict, mode: str = "graph") -> None:
    """The rule: kept when the dev halves' summed relevant@k rises and no test half
    loses more than one question."""
    print(f"\n{mode} mode against the saved run:\n")
    dev_before = dev_after = 0
    worst = 0
    for key in sorted(after):
        if key not in before:
            continue
        old, new = before[key][mode], after[key][mode]
        lost = sorted(q for q in new if old.get(q, 0) > 0 and new[q] == 0)
        gained = sorted(q for q in new if old.get(q, 0) == 0 and new[q] > 0)
        print(f"- {key}: relevant {sum(old.values())} -> {sum(new.values())}; "
              f"lost {', '.join(lost) or 'none'}; gained {', '.join(gained) or 'none'}")
        if key.endswith("|dev"):
            dev_before += sum(old.values())
            dev_after += sum(new.values())
        else:
            worst = max(worst, len(lost))
    kept = dev_after > dev_before and worst <= 1
    print(f"\ndev halves: {dev_before} -> {dev_after}; most questions a test half lost: "
          f"{worst}; by the rule: {'keep' if kept else 'do not keep'}")


if __name__ == "__main__":
    main()
