"""The reference runtime's agent-loop scenarios (its tests/test_agent_loop.py, described
row by row in the workplace's reference/runtime-behaviours.md; nothing here reads it),
replayed through ctxfst's CLI.

Each test names its row. Where ctxfst deliberately differs, the test says so and asserts
ctxfst's behaviour (docs/runtime.md explains each difference). docs/runtime.md lists the
deliberate differences.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from ctxfst.pipeline.runner import run_build

from .conftest import add_skill_script, make_project, write


def world(root: Path, skills: dict[str, dict], states: list[str], capsys,
          settings: str = "") -> Path:
    """A built project: the states declared in one document, and each skill
    {pre, post, cost, idempotent} as a SKILL.md."""
    make_project(root)
    write(root, "ctxfst.toml", 'embedding_model = "hash-32"\n' + settings)
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


def edges_file(root: Path, *routes: tuple[str, str, str]) -> None:
    """content/routes.edges.json with (source, relation, target) edges."""
    write(root, "content/routes.edges.json", json.dumps(
        [{"source": source, "target": target, "relation": relation}
         for source, relation, target in routes]))


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


WRITEBACK = {"skill-a": {"pre": ["entity:start"], "post": ["entity:mid", "entity:side"]},
             "skill-b": {"pre": ["entity:mid"], "post": ["entity:goal"]}}
WRITEBACK_STATES = ["entity:start", "entity:mid", "entity:side", "entity:goal"]


def test_rows_14_to_16_outcomes_are_written_back_as_completed_edges(tmp_path, cli, capsys):
    """ctxfst writes the edges to .ctxfst/runtime.edges.json (the next build merges them
    into the graph), not into entity-graph.json, which only the build writes."""
    import datetime

    root = world(tmp_path, WRITEBACK, WRITEBACK_STATES, capsys)
    result = run(cli, root, "entity:goal", ["entity:start"])
    assert result["goal_reached"]
    edges = json.loads((root / ".ctxfst/runtime.edges.json").read_text())
    completed = {(e["source"], e["target"]) for e in edges if e["relation"] == "COMPLETED"}
    assert completed == {("skill:skill-a", "entity:mid"), ("skill:skill-a", "entity:side"),
                         ("skill:skill-b", "entity:goal")}  # 14
    for edge in edges:  # 16
        assert edge["properties"]["status"] == "active"
        datetime.datetime.fromisoformat(edge["properties"]["timestamp"])
    assert run_build(root, []) == 0
    capsys.readouterr()
    graph = json.loads((root / "build/entity-graph.json").read_text())
    assert completed <= {(e["source"], e["target"]) for e in graph["edges"]
                         if e["relation"] == "COMPLETED"}


def test_row_15_a_failed_skill_writes_no_completed_edge(tmp_path, cli, capsys):
    """A deliberate addition: the failure is recorded as BLOCKED_BY edges from the skill
    to its preconditions (what blocked it), which the reference does not write."""
    root = world(tmp_path, FAILING, ["entity:start", "entity:mid", "entity:goal"], capsys)
    run(cli, root, "entity:goal", ["entity:start"], "--executor", "command", "--retries", "0")
    edges = json.loads((root / ".ctxfst/runtime.edges.json").read_text())
    assert not [e for e in edges if e["relation"] == "COMPLETED"]
    assert {(e["source"], e["target"], e["relation"]) for e in edges} == {
        ("skill:step1", "entity:start", "BLOCKED_BY")}
    assert edges[0]["properties"]["status"] == "failed"


def test_row_17_the_skill_nearer_the_goal_ranks_first_at_the_same_cost(tmp_path, cli, capsys):
    skills = {"close-skill": {"pre": ["entity:start"], "post": ["entity:close"]},
              "far-skill": {"pre": ["entity:start"], "post": ["entity:far"]}}
    root = world(tmp_path, skills, ["entity:start", "entity:close", "entity:far",
                                    "entity:mid", "entity:goal"], capsys)
    edges_file(root, ("entity:close", "LEADS_TO", "entity:goal"),
               ("entity:far", "LEADS_TO", "entity:mid"), ("entity:mid", "LEADS_TO", "entity:goal"))
    assert run_build(root, []) == 0
    capsys.readouterr()
    cli("state", "init", "--goal", "entity:goal", "--seed", "entity:start", cwd=root)
    selected = cli("select", "--format", "json", cwd=root).json()
    ranked = [(c["skill"], c["distance"]) for c in selected["candidates"] if c["applicable"]]
    assert ranked == [("close-skill", 1), ("far-skill", 2)]


CHOICE = {"cheap": {"pre": ["entity:a"], "post": ["entity:goal"], "cost": "low"},
          "pricey": {"pre": ["entity:a"], "post": ["entity:goal"], "cost": "high"}}


def test_rows_21_to_23_the_selection_explained(tmp_path, cli, capsys):
    """ctxfst's explanation is data (`select --explain --format json`), not the
    reference's sentences: no winner ('No eligible candidates.'), one winner and no loser,
    and each loser with its reason."""
    root = world(tmp_path, CHOICE, ["entity:a", "entity:goal"], capsys)
    cli("state", "init", "--goal", "entity:goal", cwd=root)
    none = cli("select", "--explain", "--format", "json", cwd=root).json()
    assert none["selected"] is None  # 21
    assert {c["reason"] for c in none["candidates"]} == {"needs entity:a"}
    cli("state", "add", "entity:a", cwd=root)
    chosen = cli("select", "--explain", "--format", "json", cwd=root).json()
    assert chosen["selected"] == "cheap"  # 23
    reasons = {c["skill"]: c["reason"] for c in chosen["candidates"]}
    assert reasons["pricey"] == "costs 3 against 1"
    single = world(tmp_path / "single", {"only": CHOICE["cheap"]},
                   ["entity:a", "entity:goal"], capsys)
    cli("state", "init", "--goal", "entity:goal", "--seed", "entity:a", cwd=single)
    alone = cli("select", "--explain", "--format", "json", cwd=single).json()
    assert alone["selected"] == "only" and len(alone["candidates"]) == 1  # 22


def test_rows_25_to_32_the_plan_explained(chain, cli):
    cli("state", "init", "--goal", "entity:learning-plan", "--seed", "entity:has-raw-resume",
        cwd=chain)
    plain = cli("plan", "--format", "json", cwd=chain).json()
    explained = cli("plan", "--explain", "--format", "json", cwd=chain).json()
    assert explained["steps"] == plain["steps"]  # 25
    first = explained["explanation"][0]  # 26
    assert first["preconditions_met"] == ["entity:has-raw-resume"]
    assert first["adds"] == ["entity:has-parsed-resume"]
    assert [s["reaches_goal"] for s in explained["explanation"]] == [False, False, True]  # 32
    cli("state", "add", "entity:has-skill-evidence", cwd=chain)  # 29: only what is new
    again = cli("plan", "--explain", "--format", "json", cwd=chain).json()
    assert again["explanation"][1]["adds"] == ["entity:has-skill-gap"]
    cli("state", "init", "--goal", "entity:learning-plan", "--force", cwd=chain)
    stuck = cli("plan", "--explain", "--format", "json", cwd=chain)  # 27
    assert stuck.code == 1 and not stuck.json()["solved"] and stuck.json()["reason"]
    cli("state", "init", "--goal", "entity:learning-plan", "--seed", "entity:learning-plan",
        "--force", cwd=chain)
    done = cli("plan", "--explain", "--format", "json", cwd=chain).json()  # 28
    assert done["solved"] and done["steps"] == [] and done["explanation"] == []


def test_rows_30_and_31_alternatives_differ_and_say_why(tmp_path, cli, capsys):
    skills = {"direct": {"pre": ["entity:start"], "post": ["entity:goal"], "cost": 4},
              "s1": {"pre": ["entity:start"], "post": ["entity:mid"]},
              "s2": {"pre": ["entity:mid"], "post": ["entity:goal"]}}
    root = world(tmp_path, skills, ["entity:start", "entity:mid", "entity:goal"], capsys)
    cli("state", "init", "--goal", "entity:goal", "--seed", "entity:start", cwd=root)
    explained = cli("plan", "--explain", "--format", "json", cwd=root).json()
    assert explained["steps"] == ["s1", "s2"]
    others = explained["alternatives"]
    assert others and all(alt["steps"] != explained["steps"] for alt in others)  # 30
    assert others[0] == {"steps": ["direct"], "cost": 4.0,
                         "why_not": "costs 2 more with 1 fewer step(s)"}  # 31


def test_rows_35_to_41_multi_step_planning(tmp_path, cli, capsys):
    skills = {"s1": {"pre": ["entity:a"], "post": ["entity:b"], "idempotent": False},
              "s2": {"pre": ["entity:b"], "post": ["entity:c"]},
              "s3": {"pre": ["entity:c"], "post": ["entity:goal"]},
              "long1": {"pre": ["entity:a"], "post": ["entity:x"]},
              "long2": {"pre": ["entity:x"], "post": ["entity:y"]},
              "long3": {"pre": ["entity:y"], "post": ["entity:z"]},
              "long4": {"pre": ["entity:z"], "post": ["entity:goal"]}}
    states = ["entity:a", "entity:b", "entity:c", "entity:x", "entity:y", "entity:z",
              "entity:goal", "entity:island"]
    root = world(tmp_path, skills, states, capsys)

    def plan(goal: str, *seeds: str, depth: str | None = None) -> dict:
        seeded = [arg for seed in seeds for arg in ("--seed", seed)]
        extra = ["--max-depth", depth] if depth else []
        return cli("plan", "--goal", goal, *seeded, *extra, "--format", "json",
                   cwd=root).json()

    assert plan("entity:goal", "entity:a")["steps"] == ["s1", "s2", "s3"]  # 35, and 39
    assert plan("entity:goal", "entity:goal")["steps"] == []  # 36
    assert not plan("entity:island", "entity:a")["solved"]  # 37
    assert not plan("entity:c", "entity:a", depth="1")["solved"]  # 38
    assert plan("entity:c", "entity:a", depth="2")["steps"] == ["s1", "s2"]
    # 40: a non-idempotent skill appears once; 41: one that succeeded is left out.
    assert plan("entity:c", "entity:a")["steps"].count("s1") == 1
    cli("state", "init", "--goal", "entity:c", "--seed", "entity:a", cwd=root)
    cli("state", "complete", "s1", "--result", "success", cwd=root)
    from_state = cli("plan", "--format", "json", cwd=root).json()
    assert from_state["steps"] == ["s2"]


def test_rows_42_to_44_the_planning_loop(chain, cli):
    """ctxfst always plans ahead (the reference's lookahead); row 43 differs on purpose:
    with no plan within the bound ctxfst stops (`no_plan`) instead of falling back to
    greedy steps that need not lead anywhere."""
    result = run(cli, chain, "entity:learning-plan", ["entity:has-raw-resume"])
    assert result["goal_reached"] and result["iterations"] == 3  # 42
    bounded = run(cli, chain, "entity:learning-plan", ["entity:has-raw-resume"],
                  "--max-depth", "2")
    assert (bounded["terminated_reason"], bounded["iterations"]) == ("no_candidates", 0)  # 43
    assert [s["skill_name"] for s in run(cli, chain, "entity:learning-plan",
                                         ["entity:has-raw-resume"], "--max-depth", "3")[
        "history"]] == [s["skill_name"] for s in result["history"]]  # 44


def test_rows_24_and_45_to_52_distances_walk_operational_relations(tmp_path, cli, capsys):
    """Each skill adds its own state; extra edges tie those states to the goal. REQUIRES
    and LEADS_TO weigh 1, SIMILAR 3; COMPLETED and BLOCKED_BY are not walked (a COMPLETED
    edge must not make a skill look near the goal), nor EVIDENCE and IMPLIES (ctxfst's
    relations that say nothing of what a skill leads to); the winner's explanation names
    the relation that made it nearer."""
    names = ["causal", "leads", "similar", "done", "blocked", "evidence", "implied", "mixed"]
    skills = {f"skill-{n}": {"pre": ["entity:start"], "post": [f"entity:{n}"]} for n in names}
    states = ["entity:start", "entity:goal", "entity:real", "entity:hop",
              *(f"entity:{n}" for n in names)]
    # (no SIMILAR edges from embeddings: only the ones written here)
    root = world(tmp_path, skills, states, capsys, "similar_top_k = 0\n")
    edges_file(root, ("entity:causal", "REQUIRES", "entity:goal"),
               ("entity:leads", "LEADS_TO", "entity:goal"),
               ("entity:similar", "SIMILAR", "entity:goal"),
               ("entity:done", "COMPLETED", "entity:goal"),
               ("entity:blocked", "BLOCKED_BY", "entity:goal"),
               ("entity:evidence", "EVIDENCE", "entity:goal"),
               ("entity:implied", "IMPLIES", "entity:goal"),
               ("entity:real", "LEADS_TO", "entity:goal"),
               ("entity:done", "COMPLETED", "entity:real"),
               # mixed: SIMILAR straight to the goal (3), or LEADS_TO twice (2): Dijkstra, 2
               ("entity:mixed", "SIMILAR", "entity:goal"),
               ("entity:mixed", "LEADS_TO", "entity:hop"),
               ("entity:hop", "LEADS_TO", "entity:goal"))
    assert run_build(root, []) == 0
    capsys.readouterr()
    cli("state", "init", "--goal", "entity:goal", "--seed", "entity:start", cwd=root)
    selected = cli("select", "--explain", "--format", "json", cwd=root).json()
    by_skill = {c["skill"]: c for c in selected["candidates"]}
    distance = {name: by_skill[f"skill-{name}"]["distance"] for name in names}
    assert distance == {"causal": 1, "leads": 1, "similar": 3, "done": None, "blocked": None,
                        "evidence": None, "implied": None, "mixed": 2}  # 45-49, 51, 52
    assert selected["selected"] == "skill-causal"  # 50: REQUIRES before SIMILAR
    # 24: the relation each way to the goal starts with; the winner ties skill-leads (1)
    assert [by_skill[f"skill-{n}"]["via"] for n in names] == [
        "REQUIRES", "LEADS_TO", "SIMILAR", None, None, None, None, "LEADS_TO"]
    assert by_skill["skill-similar"]["reason"] == "same cost, farther from the goal (3 against 1)"
    cli("state", "add", "entity:causal", "entity:leads", cwd=root)  # (those two change nothing)
    nearer = cli("select", "--explain", "--format", "json", cwd=root).json()
    assert nearer["selected"] == "skill-mixed"
    assert nearer["candidates"][0]["reason"] == (
        "chosen: lowest cost, then nearest the goal (2 away, by LEADS_TO)")


def test_row_18_ties_go_to_the_skill_that_adds_more(tmp_path, cli, capsys):
    """No distance known (no skill reaches the goal), same cost: more postconditions
    first, then name, as the reference falls back."""
    skills = {"a-adds-one": {"pre": ["entity:start"], "post": ["entity:one"]},
              "b-adds-two": {"pre": ["entity:start"], "post": ["entity:one", "entity:two"]}}
    root = world(tmp_path, skills, ["entity:start", "entity:one", "entity:two", "entity:goal"],
                 capsys, "similar_top_k = 0\n")
    cli("state", "init", "--goal", "entity:goal", "--seed", "entity:start", cwd=root)
    selected = cli("select", "--explain", "--format", "json", cwd=root).json()
    assert selected["selected"] == "b-adds-two"  # (a-adds-one wins on name order alone)
    reasons = {c["skill"]: c["reason"] for c in selected["candidates"]}
    assert reasons["b-adds-two"] == "chosen: lowest cost, then most postconditions"
    assert reasons["a-adds-one"] == "same cost and distance, fewer postconditions (1 against 2)"


CRITIQUE = {"s1": {"pre": ["entity:start"], "post": ["entity:mid"]},
            "s2": {"pre": ["entity:mid"], "post": ["entity:goal"]},
            "alt": {"pre": ["entity:start"], "post": ["entity:goal"], "cost": "high"},
            "needs-mid": {"pre": ["entity:mid"], "post": ["entity:side"]}}


@pytest.fixture
def critique_world(tmp_path, capsys):
    return world(tmp_path, CRITIQUE, ["entity:start", "entity:mid", "entity:side",
                                      "entity:goal"], capsys)


def critique(cli, root: Path, monkeypatch, answers: str) -> tuple[str, list[str], str]:
    """`run --executor interactive --format json` with `answers` on stdin: the stop
    reason, the skills run, and what was said on stderr (stdout is the JSON alone)."""
    import io

    cli("state", "init", "--goal", "entity:goal", "--seed", "entity:start", "--force",
        cwd=root)
    monkeypatch.setattr("sys.stdin", io.StringIO(answers))
    result = cli("run", "--executor", "interactive", "--format", "json", cwd=root)
    data = json.loads(result.out)
    return data["stop_reason"], [step["skill"] for step in data["steps"]], result.err


def test_rows_53_to_66_the_interactive_plan_critique(critique_world, cli, monkeypatch):
    """Rows 53-55 and 63-64: accept, quit, end of input. 56-58: skip (replan without
    it), an unknown skill refused, reset. 59-61: force, refused when its preconditions
    do not hold or it does not exist. 62: another answer is asked again. 65: a skip
    makes the loop take the alternative. 66: accepting everything is the plain run.
    A deliberate difference: a skipped skill stays skipped for the run (until `r`); the
    reference forgets skips at each step."""
    root = critique_world
    chain = ["s1", "s2"]
    reason, steps, said = critique(cli, root, monkeypatch, "a\na\n")
    assert (reason, steps) == ("goal_reached", chain)  # 53, 63
    assert "plan: s1 -> s2 (cost 2)" in said
    cli("state", "init", "--goal", "entity:goal", "--seed", "entity:start", "--force", cwd=root)
    plain = cli("run", "--executor", "dry-run", "--format", "json", cwd=root).json()
    assert [step["skill"] for step in plain["steps"]] == chain  # 66
    assert critique(cli, root, monkeypatch, "q\n")[:2] == ("user_aborted", [])  # 54, 64
    assert critique(cli, root, monkeypatch, "")[:2] == ("user_aborted", [])  # 55
    reason, steps, said = critique(cli, root, monkeypatch, "s s1\na\n")  # 56, 65
    assert (reason, steps) == ("goal_reached", ["alt"]) and "skipping s1" in said
    reason, steps, said = critique(cli, root, monkeypatch, "skip needs-mld\nq\n")  # 57
    assert (reason, steps) == ("user_aborted", [])
    assert "no skill 'needs-mld'; did you mean needs-mid?" in said
    reason, steps, _ = critique(cli, root, monkeypatch, "s s1\nr\na\na\n")  # 58
    assert (reason, steps) == ("goal_reached", chain)
    for form in ("f alt", "f:alt", "force alt"):  # 59, in its three forms
        reason, steps, said = critique(cli, root, monkeypatch, f"f needs-mid\n{form}\n")
        assert (reason, steps) == ("goal_reached", ["alt"]), form
        assert "cannot force needs-mid: it needs entity:mid" in said  # 60
    reason, steps, said = critique(cli, root, monkeypatch, "f nope\nq\n")  # 61
    assert reason == "user_aborted" and "no skill 'nope'" in said
    reason, steps, said = critique(cli, root, monkeypatch, "maybe\n\na\n")  # 62
    assert reason == "user_aborted" and steps == ["s1"]
    assert "not an answer: 'maybe'" in said and "not an answer: ''" in said


def test_rows_33_and_34_explaining_a_run_changes_nothing(chain, cli):
    """`run --explain` says each step's plan (on stderr: stdout stays the JSON) and the
    run is the one without it, with a depth bound too."""
    for bound in ([], ["--max-depth", "3"]):
        cli("state", "init", "--goal", "entity:learning-plan", "--seed",
            "entity:has-raw-resume", "--force", cwd=chain)
        plain = cli("run", "--format", "json", *bound, cwd=chain).json()
        cli("state", "init", "--goal", "entity:learning-plan", "--seed",
            "entity:has-raw-resume", "--force", cwd=chain)
        told = cli("run", "--explain", "--format", "json", *bound, cwd=chain)
        explained = json.loads(told.out)
        assert explained["stop_reason"] == plain["stop_reason"] == "goal_reached"
        assert [s["skill"] for s in explained["steps"]] == [s["skill"] for s in plain["steps"]]
        assert told.err.splitlines()[:3] == [
            "step 1: plan: analyze-resume -> match-skills -> generate-plan (cost 3)",
            "step 2: plan: match-skills -> generate-plan (cost 2)",
            "step 3: plan: generate-plan (cost 1)"]
