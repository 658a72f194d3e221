"""Skill selection: which skills can run now, and which one first."""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Any

from .state import WorldState

# Cost of crossing an edge of each relation when measuring distance to the goal.
RELATION_WEIGHT = {"LEADS_TO": 1.0, "REQUIRES": 1.0, "IMPLIES": 1.0, "EVIDENCE": 1.5,
                   "COMPLETED": 2.0, "SIMILAR": 2.0, "BLOCKED_BY": 4.0}
DEFAULT_RETRIES = 2


@dataclass
class Candidate:
    name: str
    cost: float
    distance: float
    applicable: bool
    reason: str  # why it was rejected, or why it ranks where it does

    def as_json(self) -> dict[str, Any]:
        return {"skill": self.name, "cost": self.cost,
                "distance": None if self.distance == float("inf") else self.distance,
                "applicable": self.applicable, "reason": self.reason}


def goal_distances(graph: dict[str, Any], goal: str) -> dict[str, float]:
    """Relation-weighted shortest distance from every node to the goal (undirected)."""
    adjacency: dict[str, list[tuple[str, float]]] = {}
    for edge in graph.get("edges", []):
        weight = RELATION_WEIGHT.get(edge["relation"], 2.0)
        adjacency.setdefault(edge["source"], []).append((edge["target"], weight))
        adjacency.setdefault(edge["target"], []).append((edge["source"], weight))
    distance = {goal: 0.0}
    heap = [(0.0, goal)]
    while heap:
        current, node = heapq.heappop(heap)
        if current > distance[node]:
            continue
        for other, weight in adjacency.get(node, ()):
            if current + weight < distance.get(other, float("inf")):
                distance[other] = current + weight
                heapq.heappush(heap, (current + weight, other))
    return distance


def attempts(state: WorldState, skill: str) -> tuple[int, int]:
    """(successes, failures) of a skill in this session."""
    results = [c["result"] for c in state.completed_skills if c["skill"] == skill]
    return results.count("success"), sum(1 for r in results if r != "success")


def select(skills: list[dict[str, Any]], graph: dict[str, Any], state: WorldState,
           retries: int = DEFAULT_RETRIES) -> list[Candidate]:
    """Every skill, the applicable ones first in rank order (cost, distance, name)."""
    active = set(state.active_states)
    distances = goal_distances(graph, state.goal)
    ranked, rejected = [], []
    for skill in skills:
        name = skill["name"]
        effects = skill["add_effects"]
        distance = 0.0 if state.goal in effects else min(
            [distances.get(skill["node_id"], float("inf"))]
            + [distances.get(fact, float("inf")) for fact in effects])
        missing = [fact for fact in skill["preconditions"] if fact not in active]
        blocking = [fact for fact in skill["negative_preconditions"] if fact in active]
        successes, failures = attempts(state, name)
        reason = ""
        if missing:
            reason = "needs " + ", ".join(missing)
        elif blocking:
            reason = "cannot run while " + ", ".join(blocking) + " holds"
        elif successes and not skill["idempotent"]:
            reason = "already succeeded and is not idempotent"
        elif failures > retries:
            reason = f"failed {failures} times (retry limit {retries})"
        elif effects and set(effects) <= active and not skill["delete_effects"]:
            reason = "would change nothing: its effects already hold"
        candidate = Candidate(name, skill["cost"], distance, not reason, reason)
        (rejected if reason else ranked).append(candidate)
    ranked.sort(key=lambda c: (c.cost, c.distance, c.name))
    for position, candidate in enumerate(ranked):
        if position == 0:
            candidate.reason = "chosen: lowest cost" + (
                ", then nearest the goal" if len(ranked) > 1 and ranked[1].cost == candidate.cost
                else "")
        else:
            best = ranked[0]
            candidate.reason = (f"costs {candidate.cost:g} against {best.cost:g}"
                                if candidate.cost > best.cost else
                                f"same cost, farther from the goal ({candidate.distance:g} "
                                f"against {best.distance:g})" if candidate.distance > best.distance
                                else "same cost and distance; loses on name order")
    return ranked + sorted(rejected, key=lambda c: c.name)
