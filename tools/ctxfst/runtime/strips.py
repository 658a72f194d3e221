"""STRIPS view of the skill index: facts are state ids, skills are operators.

Negative preconditions are checked exactly in search (a state is a set of facts, so
"not holding" is "not in the set"). The relaxation behind the heuristics drops them and
the delete effects, which keeps the heuristics admissible (h_max) and informative (h_FF).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

State = frozenset


@dataclass(frozen=True)
class Operator:
    name: str
    pre: frozenset[str]
    pre_not: frozenset[str]
    add: frozenset[str]
    delete: frozenset[str]
    cost: float
    idempotent: bool = False

    def applicable(self, state: State) -> bool:
        return self.pre <= state and not (self.pre_not & state)

    def apply(self, state: State) -> State:
        return (state - self.delete) | self.add


@dataclass
class Problem:
    operators: list[Operator]
    by_precondition: dict[str, list[int]] = field(default_factory=dict)
    no_precondition: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.operators = sorted(self.operators, key=lambda op: op.name)
        for index, op in enumerate(self.operators):
            if not op.pre:
                self.no_precondition.append(index)
            for fact in op.pre:
                self.by_precondition.setdefault(fact, []).append(index)

    def applicable(self, state: State) -> list[int]:
        """Indexes of the operators applicable in state, in name order."""
        counts: dict[int, int] = {}
        for fact in state:
            for index in self.by_precondition.get(fact, ()):
                counts[index] = counts.get(index, 0) + 1
        ready = [i for i, n in counts.items() if n == len(self.operators[i].pre)]
        ready.extend(self.no_precondition)
        return sorted(i for i in ready if not (self.operators[i].pre_not & state))

    @property
    def facts(self) -> set[str]:
        found: set[str] = set()
        for op in self.operators:
            found |= op.pre | op.pre_not | op.add | op.delete
        return found


def from_skill_index(entries: Iterable[dict[str, Any]]) -> Problem:
    return Problem([Operator(
        name=entry["name"], pre=frozenset(entry["preconditions"]),
        pre_not=frozenset(entry["negative_preconditions"]),
        add=frozenset(entry["add_effects"]), delete=frozenset(entry["delete_effects"]),
        cost=float(entry["cost"]), idempotent=bool(entry["idempotent"]))
        for entry in entries])
