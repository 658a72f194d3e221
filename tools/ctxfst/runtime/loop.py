"""The agent loop: plan, execute one skill, record the outcome, repeat.

Each step is journaled before it starts (step_started) and after it ends
(step_finished), so a run killed mid-step is resumed safely: an idempotent skill left
pending runs again; a non-idempotent one never runs twice without confirmation.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..artifacts.io import read_bytes_no_follow, strict_json, write_json
from ..files import inside
from .planner import Plan, plan
from .select import DEFAULT_RETRIES, exhausted
from .state import RESULTS, StateFileError, StateStore, WorldState, now
from .world import World

STOP_REASONS = ("goal_reached", "no_candidates", "no_plan", "max_steps",
                "execution_failure", "user_aborted", "pending_needs_confirmation")
# The reference runtime's terminated_reason for each (docs/runtime.md): it has no planner
# that can fail, no abort of its own and no interrupted steps.
REFERENCE_REASONS = {"goal_reached": "goal_reached", "no_candidates": "no_candidates",
                     "no_plan": "no_candidates", "max_steps": "max_iterations",
                     "execution_failure": "execution_failure",
                     "user_aborted": "execution_failure",
                     "pending_needs_confirmation": "pending_needs_confirmation"}


def reference_result(result: RunResult) -> dict[str, Any]:
    """The run in the reference's LoopResult shape (its `agent_loop.py -o` file)."""
    return {"iterations": len(result.steps), "goal_reached": result.state.reached,
            "terminated_reason": REFERENCE_REASONS[result.reason],
            "final_state": result.state.to_json(),
            "history": [{"iteration": number, "skill_name": step["skill"],
                         # the skill's own words (low, medium, high) as the reference
                         # reports them, else its number
                         "skill_cost": step.get("cost_level") or step.get("cost"),
                         "execution_result": step["status"],
                         "summary": step["summary"],
                         "states_added": step.get("states_added", []),
                         "states_removed": step.get("states_removed", [])}
                        for number, step in enumerate(result.steps, 1)]}


@dataclass
class Outcome:
    status: str  # success | failed | partial
    summary: str = ""
    add_states: list[str] = field(default_factory=list)
    remove_states: list[str] = field(default_factory=list)
    evidence: list[str] = field(default_factory=list)


Executor = Callable[[dict[str, Any], WorldState], Outcome]
OUTCOME_LISTS = ("add_states", "remove_states", "evidence")


def parse_outcome(data: Any) -> Outcome:
    """A script's printed result, exactly in the documented shape, or ValueError saying
    what is wrong (a string is not a list of ids; 5 or null is not an id)."""
    if not isinstance(data, dict):
        raise ValueError(f"the result must be a JSON object, not {type(data).__name__}")
    unknown = sorted(set(data) - {"status", "summary", *OUTCOME_LISTS})
    if unknown:
        raise ValueError(f"unknown field(s) {', '.join(map(repr, unknown))}; the result has "
                         f"status, summary, {', '.join(OUTCOME_LISTS)}")
    status = data.get("status")
    if status not in RESULTS:
        raise ValueError(f"status must be one of {', '.join(RESULTS)}, not {status!r}")
    if not isinstance(data.get("summary", ""), str):
        raise ValueError("summary must be a string")
    for key in OUTCOME_LISTS:
        value = data.get(key, [])
        if not (isinstance(value, list) and all(isinstance(item, str) for item in value)):
            raise ValueError(f"{key} must be a list of id strings, not {value!r:.80}")
    return Outcome(status, data.get("summary", ""),
                   *(list(dict.fromkeys(data.get(key, []))) for key in OUTCOME_LISTS))


def outcome_problem(outcome: Any, known: dict[str, str]) -> str | None:
    """Why an executor's outcome cannot be recorded (any executor: a plugin's too), or
    None. The states it changes must be ids the world knows, as for `state add`."""
    if not isinstance(outcome, Outcome):
        return f"executor returned {type(outcome).__name__}, not an Outcome"
    try:
        parse_outcome({"status": outcome.status, "summary": outcome.summary,
                       **{key: getattr(outcome, key) for key in OUTCOME_LISTS}})
    except ValueError as error:
        return f"invalid outcome: {error}"
    if outcome.status != "failed":
        unknown = [item for item in outcome.add_states + outcome.remove_states
                   if item not in known]
        if unknown:
            return (f"outcome names unknown state(s) {', '.join(map(repr, unknown[:5]))}: no "
                    "entity, skill condition or graph node has these ids")
    return None


def dry_run(skill: dict[str, Any], state: WorldState) -> Outcome:
    """Pretend the skill ran: apply its postconditions."""
    return Outcome("success", "dry run: postconditions applied", list(skill["add_effects"]),
                   list(skill["delete_effects"]))


def command_executor(root: Path, timeout: float) -> Executor:
    """Run the skill's declared script (inside its folder) with the state as JSON on
    stdin; read {status, summary, add_states, remove_states, evidence} from stdout."""

    def run(skill: dict[str, Any], state: WorldState) -> Outcome:
        script = skill.get("script")
        if not script:
            return Outcome("failed", f"skill {skill['name']} declares no script")
        project = root.resolve()
        folder = (root / skill["path"]).resolve().parent
        target = (folder / script).resolve()
        if not inside(project, folder) or folder not in target.parents \
                or not target.is_file():
            return Outcome("failed", f"script {script!r} is not a file inside the skill's "
                           f"folder {folder} in the project")
        if not os.access(target, os.X_OK):
            return Outcome("failed", f"script {target} is not executable")
        try:
            proc = subprocess.run([str(target)], input=json.dumps(state.to_json()),
                                  capture_output=True, text=True, encoding="utf-8",
                                  errors="replace", timeout=timeout, cwd=folder,
                                  check=False)  # never through a shell
        except subprocess.TimeoutExpired:
            return Outcome("failed", f"script timed out after {timeout:g} s")
        except OSError as error:
            return Outcome("failed", f"script could not start: {error}")
        if proc.returncode != 0:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or [""]
            return Outcome("failed", f"script exited {proc.returncode}: {tail[0][:200]}")
        try:
            data = json.loads(proc.stdout)
        except (ValueError, RecursionError):
            return Outcome("failed", "script printed no valid JSON result: "
                           + proc.stdout.strip()[:200])
        try:
            return parse_outcome(data)
        except ValueError as error:
            return Outcome("failed", f"script printed an invalid result: {error}")

    return run


@dataclass
class RunResult:
    reason: str
    steps: list[dict[str, Any]]
    state: WorldState
    pending: str | None = None  # the interrupted skill that needs confirmation


def pending_step(store: StateStore) -> dict[str, Any] | None:
    """The step a killed run left started but not finished, if any."""
    open_steps: dict[int, dict[str, Any]] = {}
    for event in store.history():
        if event["type"] == "step_started":
            open_steps[event["step_id"]] = event
        elif event["type"] == "step_finished":
            open_steps.pop(event["step_id"], None)
        elif event["type"] == "complete":  # an outcome recorded by hand closes it too
            for step_id, started in list(open_steps.items()):
                if started["skill"] == event["skill"]:
                    del open_steps[step_id]
    return next(iter(open_steps.values()), None)


def run(world: World, store: StateStore, executor: Executor, max_steps: int = 20,
        **options: Any) -> RunResult:
    """Run the loop while holding the store's run lock (one runner per state)."""
    with store.run_lock():
        return _run(world, store, executor, max_steps, **options)


@dataclass
class Critique:
    """A person's say on each plan before its first step runs (`run --executor
    interactive`): accept it, skip a skill (replan without it), force a skill as the next
    step, reset what was skipped, or quit. An answer that is none of these, a skill that
    does not exist, or one forced whose preconditions do not hold is said to be wrong and
    asked again. Skipped skills stay skipped for the run, until a reset."""

    ask: Callable[[str], str | None]  # the answer to a prompt; None: no more input
    say: Callable[[str], None]
    skipped: set[str] = field(default_factory=set)

    PROMPT = "[a]ccept, [s]kip SKILL, [f]orce SKILL, [r]eset, [q]uit: "

    def review(self, skills: dict[str, dict[str, Any]], active: frozenset[str],
               replan: Callable[[frozenset[str]], Any], found: Any) -> str | None:
        """The skill to run next; '' to stop for want of a plan; None to quit."""
        while True:
            self.say(_describe(found, self.skipped))
            answer = self.ask(self.PROMPT)
            if answer is None:
                return None
            command, _, name = answer.strip().replace(":", " ", 1).partition(" ")
            command, name = command.lower(), name.strip()
            if command in ("a", "accept", "y", "yes") and not name:
                return found.steps[0] if isinstance(found, Plan) else ""
            if command in ("q", "quit", "n", "no") and not name:
                return None
            if command in ("r", "reset") and not name:
                self.skipped.clear()
                found = replan(frozenset())
            elif command in ("s", "skip", "f", "force") and name:
                problem = _unknown(name, skills) or (
                    _unmet(skills[name], active) if command in ("f", "force") else None)
                if problem:
                    self.say(problem)
                elif command in ("f", "force"):
                    return name
                else:
                    self.skipped.add(name)
                    found = replan(frozenset(self.skipped))
            else:
                self.say(f"not an answer: {answer.strip()!r}")


def _describe(found: Any, skipped: set[str]) -> str:
    text = (f"plan: {' -> '.join(found.steps)} (cost {found.cost:g})"
            if isinstance(found, Plan) else f"no plan: {found.reason}")
    return text + (f"; skipping {', '.join(sorted(skipped))}" if skipped else "")


def _unknown(name: str, skills: dict[str, dict[str, Any]]) -> str | None:
    if name in skills:
        return None
    import difflib

    close = difflib.get_close_matches(name, list(skills), n=3)
    return f"no skill {name!r}" + (f"; did you mean {', '.join(close)}?" if close else "")


def _unmet(skill: dict[str, Any], active: frozenset[str]) -> str | None:
    missing = [fact for fact in skill["preconditions"] if fact not in active]
    blocking = [fact for fact in skill["negative_preconditions"] if fact in active]
    if not (missing or blocking):
        return None
    return (f"cannot force {skill['name']}: "
            + "; ".join(([f"it needs {', '.join(missing)}"] if missing else [])
                        + ([f"it cannot run while {', '.join(blocking)} holds"]
                           if blocking else [])))


def _run(world: World, store: StateStore, executor: Executor, max_steps: int = 20,
        replan: bool = True, confirm: Callable[[str], bool] | None = None,
        retries: int = DEFAULT_RETRIES, edges_path: Path | None = None,
        critique: Critique | None = None,
        max_depth: int | None = None,
        explain: Callable[[str], None] | None = None) -> RunResult:
    """Run until a stop reason. `confirm` answers whether to re-run an interrupted
    non-idempotent skill; `critique` (interactive) reviews every plan before its step;
    `explain` is told each plan (it changes nothing)."""
    skills = {entry["name"]: entry for entry in world.skills}
    known = world.known_ids()
    steps: list[dict[str, Any]] = []
    pending = pending_step(store)
    if pending is not None:
        skill = skills.get(pending["skill"])
        question = (f"skill {pending['skill']} was interrupted (step {pending['step_id']}); "
                    "it is not idempotent: run it again?")
        if skill is not None and not skill["idempotent"] and not (confirm and confirm(question)):
            # Left pending: every run stops here until someone confirms (--yes) or
            # records what happened (`ctxfst state complete`).
            return RunResult("pending_needs_confirmation", steps, store.load(),
                             pending["skill"])
        store.change("step_finished", step_id=pending["step_id"], skill=pending["skill"],
                     status="interrupted")
    for _ in range(max_steps):
        state = store.load()
        if state.reached:
            return RunResult("goal_reached", steps, state)
        banned = exhausted(world.skills, state, retries)
        active = frozenset(state.active_states)

        def planned(skipped: frozenset[str]) -> Any:
            return plan(world.problem, active, frozenset({state.goal}),  # noqa: B023 (called in this iteration)
                        banned=banned | skipped, max_depth=max_depth)  # noqa: B023 (called in this iteration)

        found = planned(frozenset(critique.skipped) if critique else frozenset())
        if explain is not None and critique is None:  # (a critique shows its plans itself)
            explain(f"step {len(steps) + 1}: {_describe(found, set())}")
        if critique is not None:
            chosen = critique.review(skills, active, planned, found)
            if chosen is None:
                return RunResult("user_aborted", steps, state)
        else:
            chosen = found.steps[0] if isinstance(found, Plan) else ""
        if not chosen:
            reason = "no_candidates" if len(banned) == len(skills) else "no_plan"
            return RunResult(reason, steps, state)
        name = chosen
        step_id = state.serial + 1
        store.change("step_started", expected_serial=state.serial, step_id=step_id, skill=name)
        try:
            outcome = executor(skills[name], state)
        except Exception as error:  # an executor bug must not leave the step pending
            outcome = Outcome("failed", f"executor error: {type(error).__name__}: {error}")
        problem = outcome_problem(outcome, known)
        if problem is not None:  # recorded as a failed step; the states stay as they were
            outcome = Outcome("failed", problem)
        after = store.change(
            "complete", skill=name, result=outcome.status, summary=outcome.summary,
            added=outcome.add_states if outcome.status != "failed" else [],
            removed=outcome.remove_states if outcome.status != "failed" else [])
        store.change("step_finished", step_id=step_id, skill=name, status=outcome.status)
        before, now_active = set(state.active_states), set(after.active_states)
        steps.append({"skill": name, "status": outcome.status, "summary": outcome.summary,
                      "cost": skills[name]["cost"],
                      "cost_level": skills[name].get("cost_level"),  # (low/medium/high)
                      "states_added": sorted(now_active - before),
                      "states_removed": sorted(before - now_active)})
        _record_edges(known, skills[name], outcome, edges_path)
        if outcome.status == "failed" and not replan:
            return RunResult("execution_failure", steps, store.load())
    state = store.load()
    return RunResult("goal_reached" if state.reached else "max_steps", steps, state)


def _record_edges(nodes: dict[str, str], skill: dict[str, Any], outcome: Outcome,
                  path: Path | None) -> None:
    """Outcomes as runtime edges (COMPLETED, EVIDENCE, BLOCKED_BY) for the next build."""
    if path is None:
        return
    # `nodes`: the world's known ids, graph nodes and the states only skills declare: the
    # next build adds those to the graph (what a user of the reference's own skills
    # expects to see recorded).
    source = skill["node_id"]
    if source not in nodes:
        return
    # (a clock time, as the reference writes: the runtime edges file is a record of what
    # ran when; the build copies it, and stays a function of its inputs)
    properties = {"result_summary": outcome.summary[:200],
                  "status": "active" if outcome.status == "success" else "failed",
                  "timestamp": now()}
    new = []
    if outcome.status == "failed":
        new += [{"source": source, "target": fact, "relation": "BLOCKED_BY",
                 "properties": dict(properties)} for fact in skill["preconditions"]
                if fact in nodes]
    else:
        new += [{"source": source, "target": fact, "relation": "COMPLETED",
                 "properties": dict(properties)} for fact in outcome.add_states if fact in nodes]
        new += [{"source": source, "target": item, "relation": "EVIDENCE",
                 "properties": dict(properties)} for item in outcome.evidence if item in nodes]
    if not new:
        return
    try:
        existing = strict_json(read_bytes_no_follow(path)) if os.path.lexists(path) else []
        usable = isinstance(existing, list) and all(
            isinstance(e, dict) and all(isinstance(e.get(key), str)
                                        for key in ("source", "target", "relation"))
            for e in existing)
    except (ValueError, TypeError, OSError, RecursionError):
        existing, usable = [], False
    try:
        if not usable:
            # Keep the unreadable file for the user; start the runtime edges afresh.
            path.replace(path.with_name(path.name + ".corrupt"))
            existing = []
        keys = {(e["source"], e["target"], e["relation"]) for e in new}
        kept = [e for e in existing if (e["source"], e["target"], e["relation"]) not in keys]
        write_json(path, sorted(kept + new, key=lambda e: (e["source"], e["target"],
                                                           e["relation"])))
    except OSError as error:
        raise StateFileError(f"cannot record the outcome as runtime edges in {path}: "
                         f"{error.strerror or error}; the step itself is recorded in the "
                         "world state") from None
