"""The reference runtime's agent-loop scenarios (its tests/test_agent_loop.py, described
row by row in ../shared/reference/runtime-behaviours.md), replayed through ctxfst's CLI.

Each test names its row. Where ctxfst deliberately differs, the test says so and asserts
ctxfst's behaviour (docs/runtime.md explains each difference). Rows still to write are
listed in docs/runtime.md's status of issue 15.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from ctxfst.pipeline.runner import run_build

from .conftest import add_skill_script, make_project, write


def world(root: Path, skills: dict[str, dict], states: list[str], capsys) -> Path:
    """A built project: the states declared in one document, and each skill
    {pre, post, cost, idempotent} as a SKILL.md."""
    make_project(root)
    write(root, "ctxfst.toml", 'embedding_model = "hash-32"\n')
    entities = "\n".join(f'  - {{id: "{state}", name: "{state}", type: state}}'
                         for state in states)
    write(root, "content/world.ctxfst.md",
          f"---\ntitle: World\nentities:\n{entities}\nchunks:\n  - id: world:states\n"
          f"    context: The states.\n    entities: {json.dumps(states)}\n---\n"
          '<Chunk id="world:states">The states of the scenario.</Chunk>\n')
    for name, spec in skills.items():
        write(root, f"skills/{name}/SKILL.md", textwrap.dedent(f"""\
            ---
            name: {name}
            description: A step of the scenario.
            preconditions: {json.dumps(spec.get("pre", []))}
            postconditions: {json.dumps(spec.get("post", []))}
            cost: {spec.get("cost", "low")}
            idempotent: {json.dumps(spec.get("idempotent", True))}
            ---
            Does its part.
            """))
    for name, body in ((n, s["script"]) for n, s in skills.items() if "script" in s):
        add_skill_script(root, name, body)
    assert run_build(root, []) == 0
    capsys.readouterr()
    return root


def run(cli, root: Path, goal: str, seeds: list[str], *options: str) -> dict:
    """`ctxfst run` from a fresh state, in the reference's result shape."""
    seeded = [arg for seed in seeds for arg in ("--seed", seed)]
    assert cli("state", "init", "--goal", goal, *seeded, "--force", cwd=root).code == 0
    done = cli("run", "--output-format", "reference", *options, cwd=root)
    assert done.code in (0, 1), done.err
    return json.loads(done.out)


CHAIN = {"analyze-resume": {"pre": ["entity:has-raw-resume"],
                            "post": ["entity:has-parsed-resume"]},
         "match-skills": {"pre": ["entity:has-parsed-resume"],
                          "post": ["entity:has-skill-gap", "entity:has-skill-evidence"]},
         "generate-plan": {"pre": ["entity:has-skill-gap"],
                           "post": ["entity:learning-plan"]}}
CHAIN_STATES = ["entity:has-raw-resume", "entity:has-parsed-resume", "entity:has-skill-gap",
                "entity:has-skill-evidence", "entity:learning-plan"]


@pytest.fixture
def chain(tmp_path, capsys):
    return world(tmp_path, CHAIN, CHAIN_STATES, capsys)


def test_rows_1_to_5_the_happy_path(chain, cli):
    result = run(cli, chain, "entity:learning-plan", ["entity:has-raw-resume"])
    assert result["terminated_reason"] == "goal_reached" and result["goal_reached"]  # 1
    assert result["iterations"] == 3  # 2
    order = ["analyze-resume", "match-skills", "generate-plan"]
    assert [step["skill_name"] for step in result["history"]] == order  # 3
    final = result["final_state"]
    assert set(CHAIN_STATES[1:]) <= set(final["active_states"])  # 4: all 4 postconditions
    assert [c["skill"] for c in final["completed_skills"]] == order  # 5


def test_row_6_a_goal_that_holds_already_ends_at_once(chain, cli):
    result = run(cli, chain, "entity:learning-plan", ["entity:learning-plan"])
    assert (result["terminated_reason"], result["iterations"], result["history"]) == (
        "goal_reached", 0, [])


def test_rows_7_and_8_nothing_can_run(chain, cli, tmp_path, capsys):
    result = run(cli, chain, "entity:learning-plan", [])  # 7: no precondition can hold
    assert (result["terminated_reason"], result["iterations"]) == ("no_candidates", 0)
    empty = world(tmp_path / "empty", {}, ["entity:goal"], capsys)  # 8: no skills at all
    result = run(cli, empty, "entity:goal", [])
    assert (result["terminated_reason"], result["iterations"]) == ("no_candidates", 0)


FAILING = {"step1": {"pre": ["entity:start"], "post": ["entity:mid"],
                     "script": "import sys\nsys.exit(3)\n"},
           "step2": {"pre": ["entity:mid"], "post": ["entity:goal"]}}


def test_rows_9_and_10_the_first_failure_stops_the_loop(tmp_path, cli, capsys):
    root = world(tmp_path, FAILING, ["entity:start", "entity:mid", "entity:goal"], capsys)
    result = run(cli, root, "entity:goal", ["entity:start"], "--executor", "command",
                 "--retries", "0")
    assert (result["terminated_reason"], result["iterations"]) == ("execution_failure", 1)
    assert [step["skill_name"] for step in result["history"]] == ["step1"]  # 9: no step2
    assert result["final_state"]["completed_skills"][0]["result"] == "failed"  # 10


def test_row_11_with_replanning_the_loop_goes_past_a_failure(tmp_path, cli, capsys):
    """ctxfst's `--replan` is the reference's stop_on_failure=False: after bad-skill
    fails, the loop plans again and good-skill reaches the goal."""
    skills = {"bad-skill": {"pre": ["entity:start"], "post": ["entity:goal"],
                            "script": "import sys\nsys.exit(1)\n"},
              "good-skill": {"pre": ["entity:start"], "post": ["entity:goal"], "cost": "high",
                             "script": 'print(\'{"status": "success", "add_states": '
                                       '["entity:goal"]}\')\n'}}
    root = world(tmp_path, skills, ["entity:start", "entity:goal"], capsys)
    result = run(cli, root, "entity:goal", ["entity:start"], "--executor", "command",
                 "--retries", "0", "--replan")
    assert result["terminated_reason"] == "goal_reached"
    assert [step["skill_name"] for step in result["history"]] == ["bad-skill", "good-skill"]


def test_rows_12_and_13_the_step_limit(tmp_path, cli, capsys):
    """Row 12 differs on purpose: the reference re-runs an idempotent skill that never
    reaches the goal until max_iterations; ctxfst's planner sees that no plan reaches the
    goal and stops at once with no_plan (reference name no_candidates), running nothing
    that cannot help."""
    skills = {"refresh": {"pre": ["entity:start"], "post": ["entity:fresh"]}}
    root = world(tmp_path, skills, ["entity:start", "entity:fresh", "entity:goal"], capsys)
    result = run(cli, root, "entity:goal", ["entity:start"], "--max-steps", "3")
    assert (result["terminated_reason"], result["iterations"]) == ("no_candidates", 0)
    capped = run(cli, world(tmp_path / "chain", CHAIN, CHAIN_STATES, capsys),
                 "entity:learning-plan", ["entity:has-raw-resume"], "--max-steps", "1")
    assert (capped["terminated_reason"], capped["iterations"]) == ("max_iterations", 1)  # 13
    assert not capped["goal_reached"]


def test_rows_19_and_20_idempotence(tmp_path, cli, capsys):
    """Row 19 differs on purpose, as row 12: an idempotent skill whose effects already
    hold would change nothing, so ctxfst does not re-run it to the step limit. Row 20
    holds: a non-idempotent skill that succeeded is not selected again."""
    skills = {"once": {"pre": ["entity:start"], "post": ["entity:done"], "idempotent": False},
              "after": {"pre": ["entity:done", "entity:ready"], "post": ["entity:goal"]}}
    root = world(tmp_path, skills, ["entity:start", "entity:done", "entity:ready",
                                    "entity:goal"], capsys)
    assert cli("state", "init", "--goal", "entity:goal", "--seed", "entity:start",
               cwd=root).code == 0
    assert cli("state", "complete", "once", "--result", "success", cwd=root).code == 0
    assert cli("state", "remove", "entity:done", cwd=root).code == 0
    selected = cli("select", "--format", "json", cwd=root).json()
    reasons = {c["skill"]: c["reason"] for c in selected["candidates"]}
    assert selected["selected"] is None
    assert reasons["once"] == "already succeeded and is not idempotent"
