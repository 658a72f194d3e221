"""Planning over the skill index: cost-optimal A* (h_max), uniform-cost, greedy (h_FF).

Every plan is replayed by `validate_plan`, which shares nothing with the searches but
the operator definitions. An unsolvable goal is explained by the goal facts that no
sequence of skills can reach even when delete effects are ignored.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .strips import Operator, Problem, State

INF = math.inf
ALGORITHMS = ("astar", "ucs", "greedy")


@dataclass
class Plan:
    steps: list[str]
    cost: float
    expanded: int
    algorithm: str
    states: list[State] = field(default_factory=list)  # the state before each step, then the last


@dataclass
class Unsolvable:
    goal: frozenset[str]
    unreachable: list[str]  # goal facts no skill sequence reaches even ignoring deletes
    expanded: int
    reason: str


def relaxed(problem: Problem, state: State, goal: frozenset[str] | None, combine: str
            ) -> tuple[dict[str, float], dict[str, int]]:
    """Cost of reaching each fact when delete effects and negative preconditions are
    ignored. combine='max' gives h_max (admissible), 'add' gives h_add (for h_FF).
    Returns (fact cost, cheapest supporter operator of each fact reached by one)."""
    ops = problem.operators
    cost: dict[str, float] = dict.fromkeys(state, 0.0)
    supporter: dict[str, int] = {}
    remaining = [len(op.pre) for op in ops]
    value = [0.0] * len(ops)
    heap: list[tuple[float, str]] = [(0.0, fact) for fact in state]
    heapq.heapify(heap)

    def fire(index: int) -> None:
        op = ops[index]
        reached = value[index] + op.cost
        for fact in op.add:
            if reached < cost.get(fact, INF):
                cost[fact] = reached
                supporter[fact] = index
                heapq.heappush(heap, (reached, fact))

    for index in problem.no_precondition:
        fire(index)
    pending = set(goal) if goal is not None else None
    done: set[str] = set()
    while heap:
        fact_cost, fact = heapq.heappop(heap)
        if fact in done or fact_cost > cost[fact]:
            continue
        done.add(fact)
        if pending is not None:
            pending.discard(fact)
            if not pending and combine == "max":
                break  # every goal fact is final: h_max needs no more
        for index in problem.by_precondition.get(fact, ()):
            remaining[index] -= 1
            value[index] = max(value[index], fact_cost) if combine == "max" else (
                value[index] + fact_cost)
            if remaining[index] == 0:
                fire(index)
    return cost, supporter


def h_max(problem: Problem, state: State, goal: frozenset[str]) -> float:
    cost, _ = relaxed(problem, state, goal, "max")
    return max((cost.get(fact, INF) for fact in goal), default=0.0)


def relaxed_plan(problem: Problem, state: State, goal: frozenset[str]
                 ) -> tuple[float, set[int]]:
    """(h_FF, the relaxed plan's operators): its cost, and the helpful candidates."""
    cost, supporter = relaxed(problem, state, goal, "add")
    if any(fact not in cost for fact in goal):
        return INF, set()
    chosen: set[int] = set()
    stack = [fact for fact in goal if fact not in state]
    seen: set[str] = set()
    while stack:
        fact = stack.pop()
        if fact in seen or fact in state:
            continue
        seen.add(fact)
        index = supporter[fact]
        if index not in chosen:
            chosen.add(index)
            stack.extend(problem.operators[index].pre)
    return sum(problem.operators[i].cost for i in chosen), chosen


def _greedy(problem: Problem, init: State, goal: frozenset[str], limit: int,
            banned: frozenset[str], max_depth: int | None = None) -> Plan | int:
    """Greedy best-first with h_FF, lazy evaluation and helpful actions first.

    A successor waits in the queue with its parent's h and is evaluated only when popped;
    successors by a skill of the parent's relaxed plan go first. Fast, not optimal.
    """
    parent: dict[State, tuple[State, int]] = {}
    g_of: dict[State, float] = {init: 0.0}
    depth_of: dict[State, int] = {init: 0}
    heap: list[tuple[float, int, int, State]] = [(0.0, 0, 0, init)]
    closed: set[State] = set()
    sequence = expanded = 0
    while heap:
        _h, _helpful, _, state = heapq.heappop(heap)
        if state in closed:
            continue
        closed.add(state)
        if goal <= state:
            return _plan(problem, parent, init, state, g_of[state], expanded, "greedy")
        h, helpful = relaxed_plan(problem, state, goal)
        if h == INF:
            continue
        expanded += 1
        if expanded > limit:
            return expanded
        if max_depth is not None and depth_of[state] >= max_depth:
            continue  # (greedy keeps each state's first depth: it may miss a shallower way)
        for index in problem.applicable(state):
            op = problem.operators[index]
            if op.name in banned:
                continue
            successor = op.apply(state)
            if successor in closed or successor in g_of:
                continue
            g_of[successor] = g_of[state] + op.cost
            depth_of[successor] = depth_of[state] + 1
            parent[successor] = (state, index)
            sequence += 1
            heapq.heappush(heap, (h, 0 if index in helpful else 1, sequence, successor))
    return expanded


def _search(problem: Problem, init: State, goal: frozenset[str], algorithm: str,
            limit: int, banned: frozenset[str] = frozenset(),
            max_depth: int | None = None) -> Plan | int:
    """Best-first search. Returns a Plan, or the number of expanded states. With
    max_depth, a node is a state and its depth (a state reached cheaper but deeper must
    not hide a costlier, shallower way there), so the plan is the cheapest of at most
    max_depth steps."""
    if algorithm == "greedy":
        return _greedy(problem, init, goal, limit, banned, max_depth)
    heuristic: Callable[[Problem, State, frozenset[str]], float]
    if algorithm == "astar":
        heuristic = h_max
    else:
        heuristic = lambda *_: 0.0  # noqa: E731  (uniform-cost search)
    start_h = heuristic(problem, init, goal)
    if start_h == INF:
        return 0

    bounded = max_depth is not None
    start = (init, 0) if bounded else init
    best_g: dict[Any, float] = {start: 0.0}
    parent: dict[Any, tuple[Any, int]] = {}
    sequence = 0
    heap: list[tuple[float, float, int, State, int]] = [(start_h, start_h, 0, init, 0)]
    closed: set[Any] = set()
    expanded = 0
    while heap:
        _priority, _h, _, state, depth = heapq.heappop(heap)
        node = (state, depth) if bounded else state
        if node in closed:
            continue
        if goal <= state:
            return _plan(problem, parent, start, node, best_g[node], expanded, algorithm,
                         (lambda n: n[0]) if bounded else None)
        closed.add(node)
        expanded += 1
        if expanded > limit:
            return expanded
        if bounded and depth >= max_depth:  # type: ignore[operator]
            continue
        g = best_g[node]
        for index in problem.applicable(state):
            op = problem.operators[index]
            if op.name in banned:
                continue
            successor = op.apply(state)
            following = (successor, depth + 1) if bounded else successor
            new_g = g + op.cost
            if following in closed or new_g >= best_g.get(following, INF):
                continue
            h = heuristic(problem, successor, goal)
            if h == INF:
                continue
            best_g[following] = new_g
            parent[following] = (node, index)
            sequence += 1
            priority = h if algorithm == "greedy" else new_g + h
            heapq.heappush(heap, (priority, h, sequence, successor, depth + 1))
    return expanded


def _plan(problem, parent, init, state, cost, expanded, algorithm, state_of=None) -> Plan:
    """The plan that led from init to state (nodes of the search; state_of gives a
    node's state when nodes are more than states)."""
    steps: list[str] = []
    nodes = [state]
    while state != init:
        state, index = parent[state]
        steps.append(problem.operators[index].name)
        nodes.append(state)
    states = nodes[::-1] if state_of is None else [state_of(node) for node in nodes[::-1]]
    return Plan(steps[::-1], cost, expanded, algorithm, states)


def plan(problem: Problem, init: State, goal: frozenset[str], algorithm: str = "astar",
         limit: int = 200_000, banned: frozenset[str] = frozenset(),
         max_depth: int | None = None) -> Plan | Unsolvable:
    """The cheapest plan (greedy: a plan) of at most max_depth steps when given."""
    if algorithm not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {algorithm!r}; use one of {', '.join(ALGORITHMS)}")
    found = _search(problem, init, goal, algorithm, limit, banned, max_depth)
    if isinstance(found, Plan):
        return found
    if max_depth is not None:
        deeper = _search(problem, init, goal, algorithm, limit, banned)
        if isinstance(deeper, Plan):
            return Unsolvable(goal, [], found,
                              f"no plan of at most {max_depth} step(s); the "
                              f"{'cheapest' if algorithm != 'greedy' else 'one found'} "
                              f"takes {len(deeper.steps)} ({' -> '.join(deeper.steps)})")
    cost, _ = relaxed(problem, init, None, "max")
    unreachable = sorted(fact for fact in goal if fact not in cost)
    if unreachable:
        roots, circular = _missing_roots(problem, cost, unreachable)
        needs = ([f"it needs {', '.join(roots)}, which no skill produces and the state does "
                  "not hold"] if roots else [])
        needs += [f"it needs {fact}, which only {' and '.join(names)} "
                  f"produce{'s' if len(names) == 1 else ''}, needing it already"
                  for fact, names in sorted(circular.items())]
        reason = "no sequence of skills reaches " + ", ".join(unreachable) + (
            ": " + "; ".join(needs) if needs else "")
    elif found > limit:
        reason = f"search stopped after {limit:,} states without a plan"
    else:
        reason = ("every goal fact can be produced, but not together: delete effects or "
                  "negative preconditions rule out every ordering")
    return Unsolvable(goal, unreachable, found, reason)


def _missing_roots(problem: Problem, cost: dict[str, float], facts: list[str]
                   ) -> tuple[list[str], dict[str, list[str]]]:
    """The unreachable facts behind unreachable goals that nothing produces at all, and
    those only skills needing them already produce (fact -> those skills)."""
    producers: dict[str, list[Operator]] = {}
    for op in problem.operators:
        for fact in op.add:
            producers.setdefault(fact, []).append(op)
    roots: set[str] = set()
    circular: dict[str, list[str]] = {}
    seen: set[str] = set()
    stack = list(facts)
    while stack:
        fact = stack.pop()
        if fact in seen:
            continue
        seen.add(fact)
        if fact not in producers:
            roots.add(fact)
            continue
        if all(fact in op.pre for op in producers[fact]):
            circular[fact] = sorted(op.name for op in producers[fact])
        for op in producers[fact]:
            stack.extend(pre for pre in op.pre if pre not in cost)
    return sorted(roots), circular


@dataclass
class Check:
    ok: bool
    cost: float
    problems: list[str]


def validate_plan(operators: list[Operator], init: State, goal: frozenset[str],
                  steps: list[str]) -> Check:
    """Replay a plan step by step; independent of the search code."""
    by_name = {op.name: op for op in operators}
    state = set(init)
    cost = 0.0
    problems = []
    for number, name in enumerate(steps, 1):
        op = by_name.get(name)
        if op is None:
            problems.append(f"step {number}: no skill named {name!r}")
            break
        missing = sorted(op.pre - state)
        blocking = sorted(op.pre_not & state)
        if missing or blocking:
            problems.append(f"step {number} ({name}): " + "; ".join(
                part for part in (f"missing {', '.join(missing)}" if missing else "",
                                  f"must not hold: {', '.join(blocking)}" if blocking else "")
                if part))
            break
        state = (state - op.delete) | op.add
        cost += op.cost
    if not problems and not goal <= state:
        problems.append("goal not reached: " + ", ".join(sorted(goal - state)))
    return Check(not problems, cost, problems)


def alternatives(problem: Problem, init: State, goal: frozenset[str], best: Plan,
                 count: int = 3, algorithm: str = "astar", banned: frozenset[str] = frozenset(),
                 max_depth: int | None = None) -> list[tuple[Plan, str]]:
    """The best plans that avoid one skill of the chosen plan (and the banned ones, within
    the depth bound, as the chosen plan was searched), with why each lost."""
    found: dict[tuple[str, ...], Plan] = {}
    for name in dict.fromkeys(best.steps):
        other = plan(problem, init, goal, algorithm, banned=banned | {name},
                     max_depth=max_depth)
        if isinstance(other, Plan) and tuple(other.steps) != tuple(best.steps):
            found.setdefault(tuple(other.steps), other)
    ranked = sorted(found.values(), key=lambda p: (p.cost, len(p.steps), p.steps))[:count]
    out = []
    for other in ranked:
        extra = other.cost - best.cost
        length = len(other.steps) - len(best.steps)
        why = (f"costs {extra:g} more" if extra > 0 else "costs the same")
        if length:
            why += f" with {abs(length)} {'more' if length > 0 else 'fewer'} step(s)"
        if extra == 0:
            why += "; the chosen plan wins the tie by name order"
        out.append((other, why))
    return out
