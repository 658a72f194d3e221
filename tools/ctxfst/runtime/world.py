"""What the runtime reads from build/: the skill index and the entity graph, and the
checks that state ids name something real."""

from __future__ import annotations

import difflib
import math
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .strips import Problem, from_skill_index


class WorldError(Exception):
    pass


@dataclass
class World:
    skills: list[dict[str, Any]]
    graph: dict[str, Any]

    @property
    def problem(self) -> Problem:
        return from_skill_index(self.skills)

    def known_ids(self) -> dict[str, str]:
        """Every id a state may hold: graph nodes (with their type) and skill facts."""
        known = {node["id"]: node.get("type", "") for node in self.graph.get("nodes", [])}
        for skill in self.skills:
            for key in _ID_LISTS:
                for fact in skill[key]:
                    known.setdefault(fact, "state")
        return known

    def check(self, ids: list[str], what: str, types: tuple[str, ...] | None = None) -> None:
        known = self.known_ids()
        for item in ids:
            if item not in known:
                close = difflib.get_close_matches(item, list(known), n=3, cutoff=0.6)
                hint = f"; did you mean {', '.join(close)}?" if close else ""
                raise WorldError(f"unknown {what} '{item}': no entity, skill condition or "
                                 f"graph node has this id{hint}")
            if types and known[item] not in types:
                raise WorldError(f"{what} '{item}' is a {known[item]}, not a "
                                 f"{' or '.join(types)}")

    def subgraph(self, goal: str, depth: int) -> dict[str, Any]:
        """Nodes within `depth` edges of the goal (either direction), and their edges."""
        neighbours: dict[str, set[str]] = {}
        for edge in self.graph.get("edges", []):
            neighbours.setdefault(edge["source"], set()).add(edge["target"])
            neighbours.setdefault(edge["target"], set()).add(edge["source"])
        seen = {goal: 0}
        queue = deque([goal])
        while queue:
            node = queue.popleft()
            if seen[node] == depth:
                continue
            for other in sorted(neighbours.get(node, ())):
                if other not in seen:
                    seen[other] = seen[node] + 1
                    queue.append(other)
        edges = {}
        for edge in self.graph.get("edges", []):
            if edge["source"] in seen and edge["target"] in seen:
                key = (edge["source"], edge["target"], edge["relation"])
                edges.setdefault(key, {"source": key[0], "target": key[1],
                                       "relation": key[2]})
        return {"nodes": sorted(seen), "edges": [edges[k] for k in sorted(edges)]}


_ID_LISTS = ("preconditions", "negative_preconditions", "add_effects", "delete_effects")


def shape_problem(skills: Any, graph: Any) -> str | None:
    """What in the skill index or graph the runtime cannot use (the build folder may come
    from someone else), or None."""
    if not isinstance(skills, list):
        return "skill-index.json: 'skills' is not a list"
    for number, skill in enumerate(skills, 1):
        where = f"skill-index.json: skill {number}"
        if not isinstance(skill, dict):
            return f"{where} is not an object"
        for key in ("name", "node_id", "path"):
            if not isinstance(skill.get(key), str):
                return f"{where}: '{key}' is not a string"
        for key in _ID_LISTS:
            value = skill.get(key)
            if not (isinstance(value, list) and all(isinstance(item, str) for item in value)):
                return f"{where}: '{key}' is not a list of ids"
        cost = skill.get("cost")
        if isinstance(cost, bool) or not isinstance(cost, (int, float)) \
                or not math.isfinite(cost) or cost < 0:
            return f"{where}: 'cost' is not a number of at least 0"
        if not isinstance(skill.get("idempotent"), bool):
            return f"{where}: 'idempotent' is not true or false"
        if not isinstance(skill.get("script"), (str, type(None))):
            return f"{where}: 'script' is not a string"
    if not isinstance(graph, dict):
        return "entity-graph.json is not an object"
    nodes, edges = graph.get("nodes", []), graph.get("edges", [])
    if not (isinstance(nodes, list) and all(
            isinstance(node, dict) and isinstance(node.get("id"), str)
            and isinstance(node.get("type", ""), str) for node in nodes)):
        return "entity-graph.json: 'nodes' is not a list of objects with string ids"
    if not (isinstance(edges, list) and all(
            isinstance(edge, dict) and all(isinstance(edge.get(key), str)
                                           for key in ("source", "target", "relation"))
            for edge in edges)):
        return "entity-graph.json: 'edges' is not a list of source/target/relation objects"
    return None


def load_world(build_dir: Path, cache_dir: Path | None = None) -> World:
    """The skill index and entity graph, each checked against the build's manifest."""
    from ..artifacts.reader import ArtifactError, BuildArtifacts

    try:
        build = BuildArtifacts(build_dir, ["skill-index.json", "entity-graph.json"], cache_dir)
        skills = build.json("skill-index.json")["skills"]
        graph_data = build.json("entity-graph.json")
        problem = shape_problem(skills, graph_data)
        if problem:
            raise TypeError(problem)
    except ArtifactError as error:
        raise WorldError(str(error)) from None
    except (KeyError, TypeError) as error:
        raise WorldError(f"{build_dir}: unreadable build artifacts ({error}); run `doit` "
                         "again") from None
    return World(skills, graph_data)
