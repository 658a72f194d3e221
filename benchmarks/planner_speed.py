"""Planner speed and plan quality on random STRIPS skill catalogs.

    .venv/bin/python benchmarks/planner_speed.py [--sizes 100 1000 5000] [--problems 15]

Each catalog hides a goal 6-9 steps deep behind cheap skills, a shorter but costlier
route to the same goal, and distractor skills over a shared pool of facts with random
preconditions, effects, deletes, negative preconditions and occasional jumps along the
route, so that many skills apply in every state. Reports, per size and algorithm: solved
problems, median and worst time, and plan cost against the optimum (A* with h_max is
optimal; uniform-cost search checks it on the small catalogs). `reference` mimics the
upstream planner: breadth-first, ignores cost and delete effects, stops at depth 5.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from ctxfst.runtime.planner import Plan, plan, validate_plan

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the tests' catalogs
from tests.planner_catalogs import catalog, reference_bfs  # noqa: E402


def run(size: int, problems: int, algorithms: list[str]) -> None:
    optimum: dict[int, float] = {}
    for algorithm in algorithms:
        times, costs, solved, optimal, valid = [], [], 0, 0, 0
        for seed in range(problems):
            problem, init, goal = catalog(size, seed)
            started = time.perf_counter()
            if algorithm == "reference":
                steps = reference_bfs(problem, init, goal)
                result = None if steps is None else Plan(steps, 0.0, 0, "reference")
            else:
                result = plan(problem, init, goal, algorithm)
            times.append(time.perf_counter() - started)
            if not isinstance(result, Plan):
                continue
            solved += 1
            check = validate_plan(problem.operators, init, goal, result.steps)
            valid += check.ok
            if algorithm == "astar":
                optimum[seed] = check.cost
            costs.append((check.cost, optimum.get(seed)))
            optimal += optimum.get(seed) == check.cost
        ratio = [c / o for c, o in costs if o]
        print(f"{size:>5} skills  {algorithm:<9} solved {solved:>2}/{problems}  "
              f"valid {valid:>2}  median {1000 * statistics.median(times):8.1f} ms  "
              f"max {1000 * max(times):8.1f} ms  optimal {optimal:>2}/{solved or 1}  "
              f"cost/optimum {statistics.mean(ratio) if ratio else float('nan'):.2f}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1000, 5000])
    parser.add_argument("--problems", type=int, default=15)
    args = parser.parse_args()
    print(f"python {sys.version.split()[0]}")
    for size in args.sizes:
        algorithms = ["astar", "greedy", "reference"] + (["ucs"] if size <= 100 else [])
        run(size, args.problems, algorithms)


if __name__ == "__main__":
    main()
