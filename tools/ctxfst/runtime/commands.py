"""The runtime commands behind `ctxfst state|select|plan`, as functions returning data."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..config import Config, check_inside, find_project, typed_path
from .planner import Plan, alternatives, plan, validate_plan
from .select import exhausted, select
from .state import RESULTS, StateError, StateStore, WorldState
from .world import World, WorldError, load_world


class RuntimeUsage(Exception):
    """A runtime command that cannot run as asked; the message says why."""


def project(cwd: Path | None = None) -> Config:
    config = find_project(cwd or Path.cwd())
    if config is None:
        raise RuntimeUsage("no ctxfst project here (no ctxfst.toml or [tool.ctxfst])")
    return config


def store_for(config: Config, state_path: Path | None) -> StateStore:
    """The world state at state_path, as the user typed it (config.typed_path: anywhere,
    but not out of the project through a link in it, nor over its sources), or at
    .ctxfst/world-state.json, which must stay inside the project; its event log and lock
    beside it alike."""
    store = StateStore(state_path or config.world_state)
    for path in (store.path, store.log, store.lock_path):
        if state_path is None:
            check_inside(config.root, path, "world-state file")
        else:
            typed_path(config, path, "--state")
    return store


def world_for(config: Config) -> World:
    try:
        return load_world(config.build_dir)
    except WorldError as error:
        raise RuntimeUsage(str(error)) from None


def state_init(config: Config, store: StateStore, goal: str, seeds: list[str],
               force: bool) -> WorldState:
    world = world_for(config)
    try:
        world.check([goal], "goal")
        world.check(seeds, "state")
    except WorldError as error:
        raise RuntimeUsage(str(error)) from None
    return store.init(goal, seeds, force)


def state_change(config: Config, store: StateStore, kind: str, ids: list[str]) -> WorldState:
    try:
        world_for(config).check(ids, "state")
    except WorldError as error:
        raise RuntimeUsage(str(error)) from None
    return store.change(kind, states=ids)


def state_complete(store: StateStore, skills: list[dict[str, Any]], skill: str, result: str,
                   summary: str | None) -> WorldState:
    if result not in RESULTS:
        raise RuntimeUsage(f"--result must be one of {', '.join(RESULTS)}")
    known = {entry["name"]: entry for entry in skills}
    if skill not in known:
        import difflib

        close = difflib.get_close_matches(skill, list(known), n=3)
        raise RuntimeUsage(f"unknown skill '{skill}'"
                           + (f"; did you mean {', '.join(close)}?" if close else ""))
    entry = known[skill]
    added = entry["add_effects"] if result == "success" else []
    removed = entry["delete_effects"] if result == "success" else []
    return store.change("complete", skill=skill, result=result, summary=summary or "",
                        added=added, removed=removed)


def planning_state(config: Config, store: StateStore, goal: str | None,
                   seeds: list[str] | None, world: World | None = None
                   ) -> tuple[frozenset[str], str, WorldState | None]:
    """The start facts and goal: from --seed/--goal when given, else the world state."""
    if goal is not None:
        (world or world_for(config)).check([goal] + list(seeds or []), "id")
        return frozenset(seeds or []), goal, None
    try:
        state = store.load()
    except StateError as error:
        raise RuntimeUsage(f"{error}; or pass --goal and --seed") from None
    return frozenset(state.active_states), state.goal, state


def make_plan(config: Config, store: StateStore, goal: str | None, seeds: list[str] | None,
              algorithm: str, explain: bool, world: World | None = None,
              max_depth: int | None = None) -> dict[str, Any]:
    """A plan from the state (or the seeds) to the goal, of at most max_depth steps when
    given; `world`: the build's, when the caller holds it loaded already (the server)."""
    world = world or world_for(config)
    try:
        init, goal_id, state = planning_state(config, store, goal, seeds, world)
    except WorldError as error:
        raise RuntimeUsage(str(error)) from None
    problem = world.problem
    goal_set = frozenset({goal_id})
    # From the world state, what `run` would leave out is left out here too: a
    # non-idempotent skill that succeeded, one past its retries.
    banned = exhausted(world.skills, state) if state is not None else frozenset()
    result = plan(problem, init, goal_set, algorithm, banned=banned, max_depth=max_depth)
    if not isinstance(result, Plan):
        return {"goal": goal_id, "solved": False, "algorithm": algorithm,
                "unreachable": result.unreachable, "reason": result.reason,
                "expanded": result.expanded}
    check = validate_plan(problem.operators, init, goal_set, result.steps)
    if not check.ok:  # the searches and the validator share no code: this would be a bug
        raise RuntimeError("planner produced an invalid plan: " + "; ".join(check.problems))
    out: dict[str, Any] = {"goal": goal_id, "solved": True, "algorithm": algorithm,
                           "steps": result.steps, "cost": result.cost,
                           "expanded": result.expanded, "validated": True}
    if explain:
        by_name = {op.name: op for op in problem.operators}
        out["explanation"] = [
            {"step": number, "skill": name,
             "preconditions_met": sorted(by_name[name].pre),
             "must_not_hold": sorted(by_name[name].pre_not),
             # what the step makes true (an effect that holds already is no reason for it)
             "adds": sorted(by_name[name].add - result.states[number - 1]),
             "removes": sorted(by_name[name].delete & result.states[number - 1]),
             "reaches_goal": goal_id in by_name[name].add, "cost": by_name[name].cost}
            for number, name in enumerate(result.steps, 1)]
        out["alternatives"] = [{"steps": alt.steps, "cost": alt.cost, "why_not": why}
                               for alt, why in alternatives(problem, init, goal_set, result,
                                                            algorithm=algorithm, banned=banned,
                                                            max_depth=max_depth)]
    return out


def make_selection(config: Config, store: StateStore, retries: int) -> dict[str, Any]:
    world = world_for(config)
    try:
        state = store.load()
    except StateError as error:
        raise RuntimeUsage(str(error)) from None
    candidates = select(world.skills, world.graph, state, retries)
    chosen = next((c for c in candidates if c.applicable), None)
    return {"goal": state.goal, "goal_reached": state.reached,
            "selected": chosen.name if chosen else None,
            "candidates": [c.as_json() for c in candidates]}
