"""Skill selection: which skills can run now, and which one first."""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Any

from .state import WorldState

# Cost of crossing an edge of each relation when measuring distance to the goal.
# Goal distance follows operational relations only, at the reference's weights: a
# COMPLETED or BLOCKED_BY edge records history (after a run and a rebuild it must not make
# a skill look near the goal), EVIDENCE and IMPLIES say nothing of what a skill leads to.
# SIMILAR at 3, not 2: the same distances as the reference (docs/runtime.md).
RELATION_WEIGHT = {"LEADS_TO": 1.0, "REQUIRES": 1.0, "SIMILAR": 3.0}
DEFAULT_RETRIES = 2


@dataclass
class Candidate:
    name: str
    cost: float
    distance: float
    applicable: bool
    reason: str  # why it was rejected, or why it ranks where it does
    via: str | None = None  # the relation its shortest way to the goal starts with

    def as_json(self) -> dict[str, Any]:
        return {"skill": self.name, "cost": self.cost,
                "distance": None if self.distance == float("inf") else self.distance,
                "via": self.via, "applicable": self.applicable, "reason": self.reason}


def goal_routes(graph: dict[str, Any], goal: str
                ) -> tuple[dict[str, float], dict[str, str]]:
    """Relation-weighted shortest distance from every node to the goal (undirected, over
    the operational relations, RELATION_WEIGHT, only), and for each node the relation of
    the first edge of its shortest way there (what an explanation names)."""
    adjacency: dict[str, list[tuple[str, float, str]]] = {}
    for edge in graph.get("edges", []):
        weight = RELATION_WEIGHT.get(edge["relation"])
        if weight is None:
            continue
        adjacency.setdefault(edge["source"], []).append((edge["target"], weight,
                                                         edge["relation"]))
        adjacency.setdefault(edge["target"], []).append((edge["source"], weight,
                                                         edge["relation"]))
    distance = {goal: 0.0}
    first: dict[str, str] = {}
    heap = [(0.0, goal)]
    while heap:
        current, node = heapq.heappop(heap)
        if current > distance[node]:
            continue
        for other, weight, relation in sorted(adjacency.get(node, ())):  # (ties: fixed)
            if current + weight < distance.get(other, float("inf")):
                distance[other] = current + weight
                first[other] = relation
                heapq.heappush(heap, (current + weight, other))
    return distance, first


def attempts(state: WorldState, skill: str) -> tuple[int, int]:
    """(successes, failures) of a skill in this session."""
    results = [c["result"] for c in state.completed_skills if c["skill"] == skill]
    return results.count("success"), sum(1 for r in results if r != "success")


def select(skills: list[dict[str, Any]], graph: dict[str, Any], state: WorldState,
           retries: int = DEFAULT_RETRIES) -> list[Candidate]:
    """Every skill, the applicable ones first in rank order (cost, distance, name)."""
    active = set(state.active_states)
    distances, routes = goal_routes(graph, state.goal)
    ranked, rejected = [], []
    for skill in skills:
        name = skill["name"]
        effects = skill["add_effects"]
        nearest = min([skill["node_id"], *effects],
                      key=lambda node: (distances.get(node, float("inf")), node))
        distance = 0.0 if state.goal in effects else distances.get(nearest, float("inf"))
        via = None if state.goal in effects else routes.get(nearest)
        missing = [fact for fact in skill["preconditions"] if fact not in active]
        blocking = [fact for fact in skill["negative_preconditions"] if fact in active]
        reason = ""
        if missing:
            reason = "needs " + ", ".join(missing)
        elif blocking:
            reason = "cannot run while " + ", ".join(blocking) + " holds"
        elif spent := _spent(skill, state, retries):
            reason = spent
        elif effects and set(effects) <= active and not skill["delete_effects"]:
            reason = "would change nothing: its effects already hold"
        candidate = Candidate(name, skill["cost"], distance, not reason, reason, via)
        (rejected if reason else ranked).append(candidate)
    effects = {skill["name"]: len(skill["add_effects"]) for skill in skills}
    # Ties on cost and distance (both unknown, often): the skill that adds more, as the
    # reference prefers; then the name, for a fixed order.
    ranked.sort(key=lambda c: (c.cost, c.distance, -effects[c.name], c.name))
    for position, candidate in enumerate(ranked):
        best = ranked[0]
        if position == 0:
            runner_up = ranked[1] if len(ranked) > 1 else None
            candidate.reason = "chosen: lowest cost" + (
                "" if runner_up is None or runner_up.cost != candidate.cost else
                f", then nearest the goal{_by(candidate)}"
                if runner_up.distance != candidate.distance else
                ", then most postconditions" if effects[runner_up.name] != effects[candidate.name]
                else ", then name order")
        else:
            candidate.reason = (f"costs {candidate.cost:g} against {best.cost:g}"
                                if candidate.cost > best.cost else
                                f"same cost, farther from the goal ({candidate.distance:g} "
                                f"against {best.distance:g})" if candidate.distance > best.distance
                                else f"same cost and distance, fewer postconditions "
                                f"({effects[candidate.name]} against {effects[best.name]})"
                                if effects[candidate.name] < effects[best.name]
                                else "same cost, distance and postconditions; loses on name order")
    return ranked + sorted(rejected, key=lambda c: c.name)


def _by(candidate: Candidate) -> str:
    if candidate.distance == 0:
        return " (its effect is the goal)"
    return f" ({candidate.distance:g} away, by {candidate.via})" if candidate.via else ""


def exhausted(skills: list[dict[str, Any]], state: WorldState,
              retries: int = DEFAULT_RETRIES) -> frozenset[str]:
    """The skills this session may not run again: non-idempotent ones that succeeded, and
    ones that failed more than `retries` times (what `run` and `plan` both leave out)."""
    return frozenset(skill["name"] for skill in skills if _spent(skill, state, retries))


def _spent(skill: dict[str, Any], state: WorldState, retries: int) -> str:
    """Why the session may not run a skill again, or ''."""
    successes, failures = attempts(state, skill["name"])
    if successes and not skill["idempotent"]:
        return "already succeeded and is not idempotent"
    if failures > retries:
        return f"failed {failures} times (retry limit {retries})"
    return ""
