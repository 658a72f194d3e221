"""Random STRIPS skill catalogs and an upstream-style breadth-first planner: the tests'
oracle for the planner, and what benchmarks/planner_speed.py measures it on.

Each catalog hides a goal 6-9 steps deep behind cheap skills, a shorter but costlier
route to the same goal, and distractor skills over a shared pool of facts with random
preconditions, effects, deletes, negative preconditions and occasional jumps along the
route, so that many skills apply in every state.
"""

from __future__ import annotations

import random
from collections import deque

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
