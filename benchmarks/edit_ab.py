"""Compare the edit, add and delete costs of two checkouts on one knowledge base, in
alternating runs (this machine's speed drifts by a third within an hour, so two whole
benchmark runs an hour apart say little).

    .venv/bin/python benchmarks/edit_ab.py --against /tmp/old [--docs 10000] [--rounds 4]
        [--separate] [--kinds edit add delete full] [--project DIR]

`--against` is another checkout of ctxfst (for example `git archive <rev> | tar -x -C
/tmp/old`); its `tools/` is put on `PYTHONPATH` for its runs, this checkout's for the
others. Each run follows a fresh change of its own kind, made after the other side's run,
so both sides start from the state the other left (both must read the same caches); a
delete removes the document its round's add made, or one added and built untimed.
With `--separate`, each side works on a copy of its own instead (the same changes):
a side that keeps records the other does not write then finds its own records.
`--kinds full` times first builds instead: each run on a fresh copy of the generated
knowledge base, the two sides' artifacts compared byte for byte.
`--project` works on a knowledge base make_project made (and built) before, changed in
place (100,000 documents take minutes to generate and build); not with `--separate`
or `full`.
Prints every pair's whole-process wall times and each side's median.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from build_speed import DOIT_ENV, _edit_once, make_project

HERE = Path(__file__).resolve().parents[1] / "tools"


def _doit(root: Path, tools: Path) -> float:
    doit_bin = Path(sys.executable).with_name("doit")
    started = time.perf_counter()
    proc = subprocess.run([str(doit_bin)], cwd=root, capture_output=True, text=True,
                          env={**DOIT_ENV, "PYTHONPATH": str(tools)})
    elapsed = time.perf_counter() - started
    if proc.returncode != 0:
        sys.exit(f"doit ({tools}) failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return elapsed


FULL_STAGES = ("validate", "compile", "embed", "facts")  # (facts runs beside the others)


def _artifacts(root: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted((root / "build").iterdir())
            if path.is_file() and path.name != "run_results.json"}  # (times in it)


def _full_builds(pristine: Path, other: Path, docs: int, rounds: int) -> None:
    """First builds of fresh copies of pristine, alternating sides."""
    times: dict[str, list[float]] = {"A": [], "B": []}
    print(f"{docs} documents, first builds; A = {other.parent}, B = this checkout")
    for round_ in range(rounds):
        pair, made = [], {}
        for side, tools in (("A", other), ("B", HERE)):
            copy = pristine.with_name(f"{pristine.name}-full")
            shutil.rmtree(copy, ignore_errors=True)
            shutil.copytree(pristine, copy, symlinks=True)
            times[side].append(_doit(copy, tools))
            made[side] = _artifacts(copy)
            stages = {stage["stage"]: stage["seconds"] for stage in json.loads(
                (copy / "build" / "run_results.json").read_text())["stages"]}
            shutil.rmtree(copy)
            pair.append(f"{side} {times[side][-1]:.2f} s (" + ", ".join(
                f"{name} {stages[name]:.1f}" for name in FULL_STAGES if name in stages) + ")")
        differ = sorted(name for name in made["A"].keys() | made["B"].keys()
                        if made["A"].get(name) != made["B"].get(name))
        print(f"  full {round_ + 1}: " + ", ".join(pair) + (
            f"; artifacts differ: {', '.join(differ)}" if differ else "; artifacts identical"))
    print(f"full: median A {statistics.median(times['A']):.2f} s, "
          f"B {statistics.median(times['B']):.2f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", type=Path, required=True)
    parser.add_argument("--docs", type=int, default=10000)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--separate", action="store_true",
                        help="each side on its own copy of the knowledge base")
    parser.add_argument("--kinds", nargs="+", default=["edit", "add", "delete"],
                        choices=["edit", "add", "delete", "full"])
    parser.add_argument("--project", type=Path,
                        help="a knowledge base make_project made (and built) before")
    args = parser.parse_args()
    other = args.against.resolve() / "tools"
    if not (other / "ctxfst").is_dir():
        sys.exit(f"{args.against}: no tools/ctxfst there")
    if args.project is not None and (args.separate or "full" in args.kinds):
        sys.exit("--project changes one knowledge base in place: not with --separate or full")
    root = args.project or Path(tempfile.mkdtemp(prefix="ctxfst-ab-"))
    run = time.strftime("%H%M%S")  # (the added documents' names: new on a reused project)
    try:
        if args.project is None:
            make_project(root, args.docs, "hash-256")
        if "full" in args.kinds:
            _full_builds(root, other, args.docs, args.rounds)
        kinds = [kind for kind in args.kinds if kind != "full"]
        if not kinds:
            return
        _doit(root, HERE)
        _doit(root, HERE)  # (settled: the first no-op after a build may still hash)
        roots = {"A": root, "B": root}
        if args.separate:
            roots["B"] = root.with_name(root.name + "-b")
            shutil.copytree(root, roots["B"], symlinks=True)
            _doit(roots["A"], other)  # (each side settled on its own copy)
            _doit(roots["B"], HERE)
        size = sum(1 for _ in (root / "content").rglob("*.md"))
        print(f"{size} documents; A = {args.against}, B = this checkout"
              + (", each on its own copy" if args.separate else ""))
        for kind in kinds:
            times: dict[str, list[float]] = {"A": [], "B": []}
            for round_ in range(args.rounds):
                pair = []
                for side, tools in (("A", other), ("B", HERE)):
                    target = next((roots[side] / "content").rglob("notes-00042.ctxfst.md"))
                    added = target.with_name(f"notes-ab-{run}-{round_}-{side}.ctxfst.md")
                    if kind == "add" or kind == "delete" and not added.exists():
                        name = f"nab{run}{round_}{side.lower()}"  # (ids are lowercase)
                        added.write_text(target.read_text().replace("n00042", name))
                        if kind == "delete":  # (no add before it: one added and built)
                            _doit(roots[side], tools)
                    if kind == "edit":
                        _edit_once(target, f"Edit{round_}{side}")
                    elif kind == "delete":
                        added.unlink()
                    time.sleep(0.2)  # (past the racy window: both sides hash alike)
                    times[side].append(_doit(roots[side], tools))
                    pair.append(f"{side} {times[side][-1]:.2f} s")
                print(f"  {kind} {round_ + 1}: " + ", ".join(pair))
            print(f"{kind}: median A {statistics.median(times['A']):.2f} s, "
                  f"B {statistics.median(times['B']):.2f} s")
    finally:
        if args.project is None:
            shutil.rmtree(root, ignore_errors=True)
            shutil.rmtree(root.with_name(root.name + "-b"), ignore_errors=True)
            shutil.rmtree(root.with_name(root.name + "-full"), ignore_errors=True)


if __name__ == "__main__":
    main()
