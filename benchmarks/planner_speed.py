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
import random
import statistics
import sys
import time
from collections import deque

from ctxfst.runtime.planner import Plan, plan, validate_plan
from ctxfst.runtime.strips import Operator, Problem


def catalog(size: int, seed: int) -> tuple[Problem, frozenset, frozenset]:
    rng = random.Random(seed)
    # A shared pool of facts, so distractors apply, chain and interfere with the route.
    facts = [f"state:f{i}" for i in range(30 + size // 20)]
    depth = rng.randint(6, 9)
    chain = [f"state:chain{seed}-{i}" for i in range(depth + 1)]
    goal_fact = f"goal:g{seed}"
    ops = []
    for step in range(depth):  # the cheap, long route
        ops.append(Operator(f"chain-{step}", frozenset({chain[step]}), frozenset(),
                            frozenset({chain[step + 1]}), frozenset(), 1.0))
    ops.append(Operator("finish", frozenset({chain[-1]}), frozenset(), frozenset({goal_fact}),
                        frozenset(), 1.0))
    ops.append(Operator("shortcut", frozenset({chain[1]}), frozenset(), frozenset({goal_fact}),
                        frozenset(), float(depth + 3)))  # shorter, dearer
    ops.append(Operator("trap", frozenset({chain[0]}), frozenset(),
                        frozenset({chain[depth // 2]}), frozenset({chain[0]}), 0.5))
    while len(ops) < size:
        pre = frozenset(rng.sample(facts + chain[:-1], rng.randint(1, 2)))
        add = frozenset(rng.sample(facts, rng.randint(1, 2)))
        if rng.random() < 0.05:  # an occasional jump along the route, at a random price
            add |= {rng.choice(chain[1:])}
        delete = frozenset(rng.sample(facts, 1)) if rng.random() < 0.1 else frozenset()
        pre_not = frozenset(rng.sample(facts, 1)) if rng.random() < 0.05 else frozenset()
        ops.append(Operator(f"skill-{len(ops):05d}", pre, pre_not - pre, add, delete - add,
                            float(rng.choice([1, 1, 2, 3, 5]))))
    init = frozenset({chain[0], *rng.sample(facts, 8)})
    return Problem(ops), init, frozenset({goal_fact})


def reference_bfs(problem: Problem, init: frozenset, goal: frozenset, depth: int = 5):
    """Upstream-style: breadth-first, no costs, no deletes, at most `depth` steps."""
    queue = deque([(init, [])])
    seen = {init}
    while queue:
        state, steps = queue.popleft()
        if goal <= state:
            return steps
        if len(steps) == depth:
            continue
        for index in problem.applicable(state):
            op = problem.operators[index]
            successor = state | op.add
            if successor not in seen:
                seen.add(successor)
                queue.append((successor, steps + [op.name]))
    return None


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
