"""World state, selection, planning from the CLI, and the agent loop with its executors."""

from __future__ import annotations

import json
import multiprocessing
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ctxfst.pipeline.runner import run_build
from ctxfst.runtime.loop import command_executor, dry_run, pending_step, run
from ctxfst.runtime.state import StateError, StateStore
from ctxfst.runtime.world import load_world

from .conftest import UPSTREAM, add_skill_script, copy_example, make_project, write

GOAL = "goal:edge-api-learning-plan"


@pytest.fixture
def kb(tmp_path, capsys):
    copy_example(tmp_path, "hash-32")
    assert run_build(tmp_path, []) == 0
    capsys.readouterr()
    return tmp_path


def upstream_project(root: Path) -> Path:
    """The reference's skills and world-model document, unchanged, in a project."""
    make_project(root)
    write(root, "ctxfst.toml", 'embedding_model = "hash-32"\n')
    shutil.copytree(UPSTREAM / "skills", root / "skills", dirs_exist_ok=True)
    shutil.copy(UPSTREAM / "world-model-example.md", root / "content")
    return root


def test_state_commands(kb, cli):
    result = cli("state", "init", "--goal", GOAL, "--seed", "state:has-resume", "--format",
                 "json", cwd=kb)
    assert result.code == 0
    state = result.json()
    assert state["serial"] == 1 and state["active_states"] == ["state:has-resume"]
    assert cli("state", "add", "state:has-skill-inventory", cwd=kb).code == 0
    assert cli("state", "remove", "state:has-skill-inventory", cwd=kb).code == 0
    done = cli("state", "complete", "inventory-skills", "--result", "success", "--summary",
               "ok", "--format", "json", cwd=kb).json()
    assert done["serial"] == 4 and "state:has-skill-inventory" in done["active_states"]
    assert done["completed_skills"][0]["summary"] == "ok"
    history = cli("state", "history", "--format", "json", cwd=kb).json()
    assert [e["type"] for e in history["events"]] == ["init", "add", "remove", "complete"]
    subgraph = cli("state", "subgraph", "--depth", "1", "--format", "json", cwd=kb).json()
    assert GOAL in subgraph["current_subgraph"]["nodes"]
    assert len({(e["source"], e["target"], e["relation"])
                for e in subgraph["current_subgraph"]["edges"]}) == len(
        subgraph["current_subgraph"]["edges"])
    again = cli("state", "init", "--goal", GOAL, cwd=kb)
    assert again.code == 2 and "already exists" in again.err


def test_unknown_ids_name_close_matches(kb, cli):
    result = cli("state", "init", "--goal", "goal:edge-api-plan", cwd=kb)
    assert result.code == 2 and "did you mean goal:edge-api-learning-plan" in result.err
    cli("state", "init", "--goal", GOAL, cwd=kb)
    result = cli("state", "add", "state:has-resum", cwd=kb)
    assert result.code == 2 and "state:has-resume" in result.err
    result = cli("state", "complete", "inventory-skill", "--result", "success", cwd=kb)
    assert result.code == 2 and "inventory-skills" in result.err


def test_plan_select_and_dry_run(kb, cli):
    cli("state", "init", "--goal", GOAL, "--seed", "state:has-resume", cwd=kb)
    planned = cli("plan", "--explain", "--format", "json", cwd=kb).json()
    assert planned["steps"] == ["inventory-skills", "analyze-gaps", "draft-learning-plan"]
    assert planned["cost"] == 5 and planned["validated"]
    assert planned["explanation"][2]["reaches_goal"] is True
    assert planned["alternatives"][0]["steps"] == ["ask-career-coach", "draft-learning-plan"]
    selected = cli("select", "--explain", "--format", "json", cwd=kb).json()
    assert selected["selected"] == "inventory-skills"
    reasons = {c["skill"]: c["reason"] for c in selected["candidates"]}
    assert reasons["analyze-gaps"] == "needs state:has-skill-inventory"
    assert reasons["ask-career-coach"] == "costs 5 against 1"
    ran = cli("run", "--executor", "dry-run", "--format", "json", cwd=kb).json()
    assert ran["stop_reason"] == "goal_reached" and len(ran["steps"]) == 3
    edges = json.loads((kb / ".ctxfst/runtime.edges.json").read_text())
    assert {e["relation"] for e in edges} == {"COMPLETED"}
    text = cli("plan", "--goal", GOAL, cwd=kb)  # no seed: nothing produces the resume
    assert text.code == 1 and "needs state:has-resume" in text.out


def test_upstream_chain_end_to_end(tmp_path, cli, capsys):
    upstream_project(tmp_path)
    assert run_build(tmp_path, []) == 0
    capsys.readouterr()
    assert cli("state", "init", "--seed", "entity:has-raw-resume", "--goal",
               "entity:learn-kubernetes-path", cwd=tmp_path).code == 0
    planned = cli("plan", "--format", "json", cwd=tmp_path).json()
    assert planned["steps"] == ["analyze-resume", "match-skills", "generate-plan"]
    ran = cli("run", "--executor", "dry-run", "--format", "json", cwd=tmp_path).json()
    assert ran["stop_reason"] == "goal_reached" and len(ran["steps"]) == 3


def test_truncated_log_line_is_dropped_and_replay_matches(tmp_path):
    store = StateStore(tmp_path / "ws.json")
    store.init(GOAL, ["state:a"])
    store.change("add", states=["state:b"])
    with open(store.log, "ab") as log:
        log.write(b'{"type": "add", "serial": 3, "lin')  # a crash mid-write
    state = store.load()
    assert state.active_states == ["state:a", "state:b"] and state.serial == 2
    assert "dropped a cut-off last line" in store.notes[0]
    rebuilt = store.rebuild()
    assert rebuilt.to_json() == json.loads(store.path.read_text())
    assert store.log.read_bytes().endswith(b"\n")


def test_snapshot_behind_its_log_loads_as_the_replay(tmp_path):
    store = StateStore(tmp_path / "ws.json")
    store.init(GOAL, [])
    snapshot = store.path.read_bytes()
    store.change("add", states=["state:x"])
    store.path.write_bytes(snapshot)  # killed after the log append, before the snapshot
    assert store.load().active_states == ["state:x"]


def test_stale_writer_and_foreign_lineage_are_refused(tmp_path):
    store = StateStore(tmp_path / "ws.json")
    store.init(GOAL, [])
    store.change("add", states=["state:x"])
    with pytest.raises(StateError, match="stale write refused"):
        store.change("add", expected_serial=1, states=["state:y"])
    other = StateStore(tmp_path / "other.json")
    other.init(GOAL, [])
    shutil.copy(other.path, store.path)
    with pytest.raises(StateError, match="different sessions"):
        store.load()
    store.log.write_text("not json\n")
    with pytest.raises(StateError, match="corrupted"):
        store.load()


def _add_many(path: str, worker: int, count: int) -> None:
    store = StateStore(Path(path), lock_timeout=60)
    for index in range(count):
        store.change("add", states=[f"state:w{worker}-{index}"])


def test_concurrent_writers_lose_no_update(tmp_path):
    store = StateStore(tmp_path / "ws.json")
    store.init(GOAL, [])
    workers = [multiprocessing.Process(target=_add_many, args=(str(store.path), n, 15))
               for n in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    state = store.load()
    assert len(state.active_states) == 60 and state.serial == 61


def test_killed_writers_leave_a_loadable_state_equal_to_its_replay(tmp_path):
    path = tmp_path / "ws.json"
    StateStore(path).init(GOAL, [])
    code = ("import sys\nfrom pathlib import Path\nfrom ctxfst.runtime.state import StateStore\n"
            "s = StateStore(Path(sys.argv[1]))\nfor i in range(10000):\n"
            "    s.change('add', states=[f'state:k{i}'])\n")
    for delay in (0.2, 0.35, 0.5, 0.65, 0.8):
        proc = subprocess.Popen([sys.executable, "-c", code, str(path)])
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        store = StateStore(path)
        loaded = store.load()
        assert loaded.to_json() == store.replay().state.to_json()
        assert loaded.serial == len(store.replay().events)


def test_command_executor_outcomes(kb, capsys):
    add_skill_script(kb, "inventory-skills",
                  "import json, sys\nstate = json.load(sys.stdin)\n"
                  "assert state['goal']\nprint(json.dumps({'status': 'success', 'summary': "
                  "'inventoried', 'add_states': ['state:has-skill-inventory']}))\n")
    add_skill_script(kb, "analyze-gaps", "import sys\nprint('garbage')\n")
    add_skill_script(kb, "ask-career-coach", "import sys\nsys.exit(3)\n")
    add_skill_script(kb, "draft-learning-plan", "import time\ntime.sleep(30)\n")
    assert run_build(kb, []) == 0
    capsys.readouterr()
    world = load_world(kb / "build")
    store = StateStore(kb / ".ctxfst/world-state.json")
    store.init(GOAL, ["state:has-resume"])
    result = run(world, store, command_executor(kb, timeout=1.0), max_steps=3, replan=False)
    assert result.reason == "execution_failure"
    assert [s["status"] for s in result.steps] == ["success", "failed"]
    assert "no valid JSON" in result.steps[1]["summary"]
    assert "state:has-gap-analysis" not in result.state.active_states
    retried = run(world, store, command_executor(kb, timeout=1.0), max_steps=6, replan=True)
    summaries = " | ".join(s["summary"] for s in retried.steps)
    assert "exited 3" in summaries or "no valid JSON" in summaries
    skills = {entry["name"]: entry for entry in world.skills}
    timed = command_executor(kb, timeout=1.0)(skills["draft-learning-plan"], store.load())
    assert timed.status == "failed" and "timed out" in timed.summary


def test_non_idempotent_skill_is_not_rerun_after_a_crash(kb, capsys):
    world = load_world(kb / "build")
    store = StateStore(kb / ".ctxfst/world-state.json")
    store.init(GOAL, ["state:has-gap-analysis"])
    # A run killed while draft-learning-plan (not idempotent) was executing:
    store.change("step_started", step_id=2, skill="draft-learning-plan")
    calls = []

    def counting(skill, state):
        calls.append(skill["name"])
        return dry_run(skill, state)

    for _ in range(2):  # it stays pending until confirmed
        result = run(world, store, counting)
        assert result.reason == "pending_needs_confirmation" and calls == []
        assert result.pending == "draft-learning-plan"
        assert pending_step(store)["skill"] == "draft-learning-plan"
    result = run(world, store, counting, confirm=lambda question: True)
    assert result.reason == "goal_reached" and calls == ["draft-learning-plan"]
    assert pending_step(store) is None


def test_an_outcome_recorded_by_hand_closes_a_pending_step(kb):
    store = StateStore(kb / ".ctxfst/world-state.json")
    store.init(GOAL, ["state:has-gap-analysis"])
    store.change("step_started", step_id=2, skill="draft-learning-plan")
    store.change("complete", skill="draft-learning-plan", result="success",
                 added=["state:has-learning-plan", GOAL], removed=[])
    assert pending_step(store) is None
    assert run(load_world(kb / "build"), store, dry_run).reason == "goal_reached"


def test_interactive_asks_before_each_step(kb, cli, monkeypatch):
    import io

    cli("state", "init", "--goal", GOAL, "--seed", "state:has-resume", cwd=kb)
    monkeypatch.setattr("sys.stdin", io.StringIO("y\nn\n"))
    result = cli("run", "--executor", "interactive", "--format", "json", cwd=kb)
    data = json.loads(result.out[result.out.index("{"):])
    assert data["stop_reason"] == "user_aborted" and len(data["steps"]) == 1
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    result = cli("run", "--executor", "interactive", "--format", "json", cwd=kb)
    assert json.loads(result.out[result.out.index("{"):])["stop_reason"] == "user_aborted"


def test_killed_runner_never_runs_a_non_idempotent_skill_twice(kb, capsys):
    counter = kb / "runs.log"
    for skill in ("inventory-skills", "analyze-gaps", "draft-learning-plan",
                  "ask-career-coach"):
        add_skill_script(kb, skill,
                      "import json, sys, time\nstate = json.load(sys.stdin)\n"
                      f"open({str(counter)!r}, 'a').write({skill!r} + '\\n')\n"
                      "time.sleep(0.4)\n"
                      "print(json.dumps({'status': 'success', 'summary': 'ok', "
                      f"'add_states': {json.dumps(skill_adds(skill))}}}))\n")
    assert run_build(kb, []) == 0
    capsys.readouterr()
    store = StateStore(kb / ".ctxfst/world-state.json")
    store.init(GOAL, ["state:has-resume"])
    command = [sys.executable, "-m", "ctxfst", "run", "--executor", "command"]
    for delay in (0.3, 0.6, 0.9, 1.2, 1.6, 2.0):
        proc = subprocess.Popen(command, cwd=kb, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert store.load().to_json() == store.replay().state.to_json()
    finish = subprocess.run([*command, "--format", "json"], cwd=kb, stdin=subprocess.DEVNULL,
                            capture_output=True, text=True)
    reason = json.loads(finish.stdout)["stop_reason"]
    assert reason in ("goal_reached", "pending_needs_confirmation")
    runs = counter.read_text().split()
    # Without confirmation, the non-idempotent skills never run twice.
    assert runs.count("draft-learning-plan") <= 1 and runs.count("ask-career-coach") <= 1
    assert store.load().to_json() == store.replay().state.to_json()


def skill_adds(skill: str) -> list[str]:
    return {"inventory-skills": ["state:has-skill-inventory"],
            "analyze-gaps": ["state:has-gap-analysis"],
            "draft-learning-plan": ["state:has-learning-plan", GOAL],
            "ask-career-coach": ["state:has-gap-analysis"]}[skill]


def test_an_upstream_world_state_is_adopted(tmp_path):
    import jsonschema

    upstream = {"session_id": "5b8c9d2e-0000-4000-8000-000000000001",
                "goal": "entity:learn-kubernetes-path",
                "active_states": ["entity:has-raw-resume", "entity:has-parsed-resume"],
                "completed_skills": [{"skill": "analyze-resume",
                                      "timestamp": "2026-03-12T10:00:00Z",
                                      "result": "success"}],
                "created_at": "2026-03-12T09:00:00Z", "updated_at": "2026-03-12T10:00:00Z"}
    path = write(tmp_path, "world-state.json", json.dumps(upstream))
    store = StateStore(path)
    state = store.load()
    assert state.active_states == sorted(upstream["active_states"])
    assert state.completed_skills[0]["skill"] == "analyze-resume" and state.serial == 2
    changed = store.change("add", states=["entity:has-skill-inventory"])
    assert changed.serial == 3 and len(store.history()) == 3
    assert store.load().to_json() == changed.to_json()
    schema = json.loads((UPSTREAM / "world-state-schema.json").read_text())
    jsonschema.validate(json.loads(path.read_text()), schema)  # still upstream-readable


def test_a_cut_line_is_trimmed_before_the_next_event(tmp_path):
    store = StateStore(tmp_path / "ws.json")
    store.init(GOAL, [])
    with open(store.log, "ab") as log:
        log.write(b'{"type":"add","serial":2,"lin')
    store.change("add", states=["state:x"])
    assert StateStore(tmp_path / "ws.json").load().active_states == ["state:x"]
    assert store.log.read_bytes().count(b"\n") == 2


@pytest.mark.parametrize("line", [b"42", b"null", b"{}", b'{"type":"add","serial":2}',
                                  b'{"type":"add","serial":2,"lineage":"x","at":"t","states":5}'])
def test_malformed_events_are_located_errors(tmp_path, line, cli):
    store = StateStore(tmp_path / "ws.json")
    store.init(GOAL, [])
    with open(store.log, "ab") as log:
        log.write(line + b"\n")
    with pytest.raises(StateError, match=r"events\.jsonl:2: "):
        store.load()


def test_one_runner_per_state(kb, cli):
    cli("state", "init", "--goal", GOAL, "--seed", "state:has-resume", cwd=kb)
    store = StateStore(kb / ".ctxfst/world-state.json")
    with store.run_lock():
        result = cli("run", cwd=kb)
    assert result.code == 1 and "another `ctxfst run`" in result.err


def test_undecodable_script_output_and_corrupt_runtime_edges(kb, capsys):
    add_skill_script(kb, "inventory-skills", "import sys\nsys.stdout.buffer.write(b'\\xff\\n')\n")
    assert run_build(kb, []) == 0
    capsys.readouterr()
    (kb / ".ctxfst").mkdir(exist_ok=True)
    (kb / ".ctxfst/runtime.edges.json").write_text("{bad")
    world = load_world(kb / "build")
    store = StateStore(kb / ".ctxfst/world-state.json")
    store.init(GOAL, ["state:has-resume"])
    edges = kb / ".ctxfst/runtime.edges.json"
    result = run(world, store, command_executor(kb, 5.0), max_steps=1, replan=False,
                 edges_path=edges)
    assert result.reason == "execution_failure" and pending_step(store) is None
    assert "no valid JSON" in result.steps[0]["summary"]
    assert run(world, store, dry_run, edges_path=edges).reason == "goal_reached"
    assert (kb / ".ctxfst/runtime.edges.json.corrupt").read_text() == "{bad"
    assert json.loads((kb / ".ctxfst/runtime.edges.json").read_text())


def test_the_reference_runtimes_completed_edges_name_bare_skills_and_ours_carry_a_time(
        tmp_path, cli, capsys):
    """The reference writes COMPLETED edges from a bare skill name (`analyze-resume`);
    ctxfst reads them as that skill's node, and writes `properties.timestamp` as the
    reference does (the runtime edges file records when; the build copies it)."""
    import datetime

    upstream_project(tmp_path)
    reference_edges = [
        {"source": skill, "target": target, "relation": "COMPLETED",
         "properties": {"timestamp": "2026-03-01T10:00:00+00:00", "status": "active"}}
        for skill, target in (("analyze-resume", "entity:has-parsed-resume"),
                              ("match-skills", "entity:has-skill-evidence"))]
    write(tmp_path, ".ctxfst/runtime.edges.json", json.dumps(reference_edges))
    checked = cli("validate", "--format", "json", cwd=tmp_path)
    assert not [d for d in checked.json()["diagnostics"] if d["code"] == "CTX604"], checked.out
    assert run_build(tmp_path, []) == 0
    capsys.readouterr()
    graph = json.loads((tmp_path / "build/entity-graph.json").read_text())
    completed = {(e["source"], e["target"]) for e in graph["edges"]
                 if e["relation"] == "COMPLETED"}
    assert completed == {("skill:analyze-resume", "entity:has-parsed-resume"),
                         ("skill:match-skills", "entity:has-skill-evidence")}
    # A bare name that is no skill is still an unknown node, located.
    write(tmp_path, "content/more.edges.json", json.dumps([
        {"source": "no-such-skill", "target": "entity:has-raw-resume",
         "relation": "COMPLETED"}]))
    refused = cli("validate", "--format", "json", cwd=tmp_path)
    assert refused.code == 1
    assert [(d["code"], d["path"]) for d in refused.json()["diagnostics"]
            if d["code"] == "CTX604"] == [("CTX604", "content/more.edges.json")]
    (tmp_path / "content/more.edges.json").unlink()
    # Ours: every recorded edge says when.
    assert cli("state", "init", "--seed", "entity:has-raw-resume", "--goal",
               "entity:learn-kubernetes-path", cwd=tmp_path).code == 0
    ran = cli("run", "--executor", "dry-run", "--format", "json", cwd=tmp_path).json()
    assert ran["stop_reason"] == "goal_reached"
    written = json.loads((tmp_path / ".ctxfst/runtime.edges.json").read_text())
    ours = [e for e in written if e["source"].startswith("skill:")]
    assert ours and all(e["properties"]["status"] == "active" for e in ours)
    for edge in ours:
        stamp = datetime.datetime.fromisoformat(edge["properties"]["timestamp"])
        assert stamp.tzinfo is not None


def _as_the_reference_rewrites_it(path: Path, change) -> dict:
    """The reference loads world-state.json, changes it and writes it back whole: it
    keeps the fields it does not know, and never touches `serial`."""
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data, indent=2))
    return data


def test_a_world_state_the_reference_rewrote_is_adopted_never_overwritten(kb, cli):
    cli("state", "init", "--goal", GOAL, "--seed", "state:has-resume", cwd=kb)
    snapshot = kb / ".ctxfst/world-state.json"
    before = json.loads(snapshot.read_text())

    def reach_the_goal(data: dict) -> None:  # the reference ran all three skills
        data["active_states"] += ["state:has-skill-inventory", "state:has-gap-analysis", GOAL]
        data["completed_skills"] += [
            {"skill": name, "timestamp": "2026-03-01T10:00:00+00:00", "result": "success"}
            for name in ("inventory-skills", "analyze-gaps", "draft-learning-plan")]
        data["updated_at"] = "2026-03-01T10:00:00+00:00"

    _as_the_reference_rewrites_it(snapshot, reach_the_goal)
    shown = cli("state", "show", "--format", "json", cwd=kb)
    assert shown.code == 0 and "changed outside ctxfst" in shown.err
    state = shown.json()
    assert GOAL in state["active_states"] and len(state["completed_skills"]) == 3
    assert state["serial"] == before["serial"] + 1
    # The next run sees the goal reached: nothing re-runs, the file keeps the edit.
    ran = cli("run", "--executor", "dry-run", "--format", "json", cwd=kb).json()
    assert ran["stop_reason"] == "goal_reached" and ran["steps"] == []
    assert GOAL in json.loads(snapshot.read_text())["active_states"]
    # The next change records the adoption as an event first; the log stays the truth.
    assert cli("state", "add", "state:has-learning-plan", cwd=kb).code == 0
    listed = cli("state", "history", "--format", "json", cwd=kb).json()
    import jsonschema

    from .conftest import REPO

    jsonschema.validate(listed, json.loads(
        (REPO / "schemas/state-history-output.schema.json").read_text()))
    history = listed["events"]
    assert [e["type"] for e in history] == ["init", "external", "add"]
    assert history[1]["completed_skills"][0]["skill"] == "inventory-skills"
    quiet = cli("state", "show", "--format", "json", cwd=kb)
    assert "outside" not in quiet.err and "state:has-learning-plan" in quiet.json()["active_states"]


def test_a_snapshot_behind_its_log_is_ctxfsts_own_not_an_outside_edit(kb, cli):
    cli("state", "init", "--goal", GOAL, "--seed", "state:has-resume", cwd=kb)
    snapshot = kb / ".ctxfst/world-state.json"
    behind = snapshot.read_text()
    assert cli("state", "add", "state:has-skill-inventory", cwd=kb).code == 0
    snapshot.write_text(behind)  # a crash between the log's fsync and the snapshot
    shown = cli("state", "show", "--format", "json", cwd=kb)
    assert shown.code == 0 and "outside" not in shown.err
    assert shown.json()["active_states"] == ["state:has-resume", "state:has-skill-inventory"]


def test_an_outside_edit_that_is_no_world_state_is_refused_until_fixed_or_discarded(kb, cli):
    cli("state", "init", "--goal", GOAL, "--seed", "state:has-resume", cwd=kb)
    snapshot = kb / ".ctxfst/world-state.json"
    _as_the_reference_rewrites_it(snapshot, lambda data: data.update(
        completed_skills=[{"skill": "inventory-skills", "result": "maybe"}]))
    refused = cli("state", "show", cwd=kb)
    assert refused.code == 2 and "--discard-outside" in refused.err
    assert cli("run", "--executor", "dry-run", cwd=kb).code == 2
    assert cli("state", "replay", cwd=kb).code == 2  # (adopting it would fail the same way)
    assert cli("state", "replay", "--discard-outside", cwd=kb).code == 0
    assert json.loads(snapshot.read_text())["completed_skills"] == []
    assert cli("state", "show", cwd=kb).code == 0


def test_adopting_a_reference_state_file_keeps_its_current_subgraph(kb, cli):
    nodes = ["state:has-resume", "state:has-skill-inventory", "state:has-gap-analysis",
             GOAL, "skill:inventory-skills"]
    edges = [{"source": a, "target": b, "relation": "LEADS_TO"}
             for a in nodes for b in nodes if a < b][:15]
    write(kb, ".ctxfst/world-state.json", json.dumps({
        "session_id": "reference-session", "goal": GOAL,
        "active_states": ["state:has-resume"], "completed_skills": [],
        "current_subgraph": {"nodes": nodes, "edges": edges},
        "created_at": "2026-03-01T10:00:00+00:00", "updated_at": "2026-03-01T10:00:00+00:00"}))
    shown = cli("state", "show", "--format", "json", cwd=kb).json()
    assert len(shown["current_subgraph"]["nodes"]) == 5
    assert len(shown["current_subgraph"]["edges"]) == 10  # (all pairs of five)
    assert cli("state", "add", "state:has-learning-plan", cwd=kb).code == 0  # the log starts
    kept = json.loads((kb / ".ctxfst/world-state.json").read_text())["current_subgraph"]
    assert kept == {"nodes": nodes, "edges": edges}


def test_run_offers_the_reference_loop_result_shape(kb, cli):
    """`run --output-format reference`: the reference's `agent_loop.py -o` JSON
    (iterations, goal_reached, terminated_reason, final_state, history of StepRecords),
    with ctxfst's reasons mapped to the reference's names (docs/runtime.md)."""
    cli("state", "init", "--goal", GOAL, "--seed", "state:has-resume", cwd=kb)
    done = cli("run", "--executor", "dry-run", "--output-format", "reference", cwd=kb)
    assert done.code == 0, done.err
    result = json.loads(done.out)
    assert set(result) == {"iterations", "goal_reached", "terminated_reason", "final_state",
                           "history"}
    assert (result["iterations"], result["goal_reached"], result["terminated_reason"]) == (
        3, True, "goal_reached")
    first = result["history"][0]
    assert set(first) == {"iteration", "skill_name", "skill_cost", "execution_result",
                          "summary", "states_added", "states_removed"}
    assert (first["iteration"], first["skill_name"], first["execution_result"]) == (
        1, "inventory-skills", "success")
    assert first["skill_cost"] == "low"  # (the skill's word, as the reference reports it)
    assert first["states_added"] == ["state:has-skill-inventory"]
    assert [s["skill_name"] for s in result["history"]] == [
        "inventory-skills", "analyze-gaps", "draft-learning-plan"]
    assert GOAL in result["final_state"]["active_states"]
    # ctxfst's own shape carries the same per-step facts.
    cli("state", "init", "--goal", GOAL, "--seed", "state:has-resume", "--force", cwd=kb)
    ours = cli("run", "--executor", "dry-run", "--format", "json", cwd=kb).json()
    assert ours["steps"][0]["states_added"] == ["state:has-skill-inventory"]
    # Nothing can run toward the goal: ctxfst says no_plan, the reference no_candidates.
    cli("state", "init", "--goal", GOAL, "--force", cwd=kb)
    stuck = cli("run", "--executor", "dry-run", "--output-format", "reference", cwd=kb)
    stuck_ours = cli("run", "--executor", "dry-run", "--format", "json", cwd=kb)
    assert stuck.code == stuck_ours.code == 1
    assert stuck_ours.json()["stop_reason"] in ("no_plan", "no_candidates")
    assert json.loads(stuck.out)["terminated_reason"] == "no_candidates"
    assert json.loads(stuck.out)["iterations"] == 0
    # The step limit: max_steps is the reference's max_iterations.
    cli("state", "init", "--goal", GOAL, "--seed", "state:has-resume", "--force", cwd=kb)
    capped = cli("run", "--executor", "dry-run", "--max-steps", "1", "--output-format",
                 "reference", cwd=kb)
    assert json.loads(capped.out)["terminated_reason"] == "max_iterations"
    assert json.loads(capped.out)["iterations"] == 1


def test_plan_and_run_take_a_depth_bound(kb, cli):
    """The cheapest plan (3 steps, cost 5) and, within two steps, the cheapest of those
    (the coach, cost 7); within one step, none, and the message says what it would take."""
    cli("state", "init", "--goal", GOAL, "--seed", "state:has-resume", cwd=kb)
    best = cli("plan", "--format", "json", cwd=kb).json()
    assert best["steps"] == ["inventory-skills", "analyze-gaps", "draft-learning-plan"]
    two = cli("plan", "--max-depth", "2", "--format", "json", cwd=kb).json()
    assert (two["steps"], two["cost"]) == (["ask-career-coach", "draft-learning-plan"], 7)
    one = cli("plan", "--max-depth", "1", "--format", "json", cwd=kb)
    assert one.code == 1
    assert one.json()["reason"] == ("no plan of at most 1 step(s); the cheapest takes 3 "
                                    "(inventory-skills -> analyze-gaps -> draft-learning-plan)")
    assert cli("plan", "--max-depth", "0", cwd=kb).code == 2
    ran = cli("run", "--executor", "dry-run", "--max-depth", "1", "--format", "json", cwd=kb)
    assert ran.code == 1 and ran.json()["stop_reason"] == "no_plan" and ran.json()["steps"] == []
    ran = cli("run", "--executor", "dry-run", "--max-depth", "2", "--format", "json", cwd=kb)
    assert [step["skill"] for step in ran.json()["steps"]] == ["ask-career-coach",
                                                               "draft-learning-plan"]


def test_a_pending_step_is_named_by_the_cli(kb, cli):
    store = StateStore(kb / ".ctxfst/world-state.json")
    store.init(GOAL, ["state:has-gap-analysis"])
    store.change("step_started", step_id=2, skill="draft-learning-plan")
    stopped = cli("run", "--format", "json", cwd=kb)
    assert stopped.code == 1
    assert stopped.json()["stop_reason"] == "pending_needs_confirmation"
    assert stopped.json()["pending_skill"] == "draft-learning-plan"
    said = cli("run", cwd=kb)
    assert "draft-learning-plan was interrupted" in said.out and "--yes" in said.out


def test_plan_leaves_out_what_run_leaves_out_and_explains_only_what_a_step_changes(kb, cli):
    cli("state", "init", "--goal", GOAL, "--seed", "state:has-resume", cwd=kb)
    two = ["ask-career-coach", "draft-learning-plan"]
    assert cli("plan", "--max-depth", "2", "--format", "json", cwd=kb).json()["steps"] == two
    # ask-career-coach (not idempotent) succeeded, then what it produced was lost: run
    # would not ask again, so plan does not either.
    assert cli("state", "complete", "ask-career-coach", "--result", "success", cwd=kb).code == 0
    assert cli("state", "remove", "state:has-gap-analysis", cwd=kb).code == 0
    planned = cli("plan", "--max-depth", "2", "--format", "json", cwd=kb)
    assert planned.code == 1 and not planned.json()["solved"]
    ran = cli("run", "--executor", "dry-run", "--max-depth", "2", "--format", "json", cwd=kb)
    assert ran.json()["stop_reason"] == "no_plan"
    assert cli("plan", "--format", "json", cwd=kb).json()["steps"] == [
        "inventory-skills", "analyze-gaps", "draft-learning-plan"]
    # An add effect that holds already is not listed as what the step adds.
    cli("state", "init", "--goal", GOAL, "--seed", "state:has-resume", "--seed",
        "state:has-learning-plan", "--force", cwd=kb)
    explained = cli("plan", "--explain", "--format", "json", cwd=kb).json()
    last = explained["explanation"][-1]
    assert last["skill"] == "draft-learning-plan" and last["adds"] == [GOAL]


def test_files_pass_between_ctxfst_and_the_reference_in_both_directions(tmp_path, cli, capsys):
    """The reference's published schemas (world-state-schema.json, entity-graph-schema.json)
    hold for what ctxfst writes, and what the reference writes is read: a world state
    with a subgraph, a rewrite of it, and its COMPLETED edges."""
    import jsonschema

    formats = jsonschema.FormatChecker()
    state_schema = json.loads((UPSTREAM / "world-state-schema.json").read_text())
    graph_schema = json.loads((UPSTREAM / "entity-graph-schema.json").read_text())
    upstream_project(tmp_path)
    assert run_build(tmp_path, []) == 0
    capsys.readouterr()
    # The reference's state file, as its world_state.py writes it: no log, a subgraph.
    reference_state = {
        "session_id": "ref-001", "goal": "entity:learn-kubernetes-path",
        "active_states": ["entity:has-raw-resume"], "completed_skills": [],
        "current_subgraph": {
            "nodes": ["entity:has-raw-resume", "entity:learn-kubernetes-path"],
            "edges": [{"source": "entity:has-raw-resume",
                       "target": "entity:learn-kubernetes-path", "relation": "LEADS_TO"}]},
        "created_at": "2026-03-01T09:00:00+00:00", "updated_at": "2026-03-01T09:00:00+00:00"}
    jsonschema.validate(reference_state, state_schema, format_checker=formats)
    snapshot = write(tmp_path, ".ctxfst/world-state.json", json.dumps(reference_state))
    ran = cli("run", "--executor", "dry-run", "--output-format", "reference", cwd=tmp_path)
    assert ran.code == 0, ran.err
    result = json.loads(ran.out)
    assert result["goal_reached"] and [s["skill_name"] for s in result["history"]] == [
        "analyze-resume", "match-skills", "generate-plan"]
    # ctxfst -> the reference: its world state and edges fit the reference's schemas.
    written = json.loads(snapshot.read_text())
    jsonschema.validate(written, state_schema, format_checker=formats)
    assert written["current_subgraph"] == reference_state["current_subgraph"]
    assert [c["skill"] for c in written["completed_skills"]] == [
        "analyze-resume", "match-skills", "generate-plan"]
    edge_schema = graph_schema["properties"]["edges"]["items"]
    runtime_edges = json.loads((tmp_path / ".ctxfst/runtime.edges.json").read_text())
    for edge in runtime_edges:
        jsonschema.validate(edge, edge_schema, format_checker=formats)
    # The reference rewrites the state (one more completed skill, serial untouched) and
    # adds its own COMPLETED edge by bare skill name: ctxfst adopts both.
    written["completed_skills"].append({"skill": "generate-plan", "result": "partial",
                                        "timestamp": "2026-03-02T09:00:00+00:00"})
    snapshot.write_text(json.dumps(written))
    runtime_edges.append({"source": "generate-plan", "target": "entity:learn-kubernetes-path",
                          "relation": "COMPLETED", "score": 1.0, "shared_chunk_count": 0,
                          "properties": {"timestamp": "2026-03-02T09:00:00+00:00",
                                         "status": "active", "result_summary": "by hand"}})
    (tmp_path / ".ctxfst/runtime.edges.json").write_text(json.dumps(runtime_edges))
    shown = cli("state", "show", "--format", "json", cwd=tmp_path)
    assert shown.code == 0 and "changed outside ctxfst" in shown.err
    assert shown.json()["completed_skills"][-1]["result"] == "partial"
    assert run_build(tmp_path, []) == 0
    capsys.readouterr()
    graph = json.loads((tmp_path / "build/entity-graph.json").read_text())
    jsonschema.validate(graph, graph_schema, format_checker=formats)
    assert ("skill:generate-plan", "entity:learn-kubernetes-path", "COMPLETED") in {
        (e["source"], e["target"], e["relation"]) for e in graph["edges"]}


def test_states_only_the_skills_declare_are_recorded_and_become_graph_nodes(
        tmp_path, cli, capsys):
    """Item 9 of the reference interop: its own skills name states no document declares
    (CTX404). A user of those skills expects what each one completed to be recorded, as
    the reference records it: the COMPLETED edges are written, and the next build adds
    such a state to the graph as a node (`declared_by: skills`) when an edge names it."""
    import jsonschema

    upstream_project(tmp_path)
    assert run_build(tmp_path, []) == 0
    capsys.readouterr()
    graph = json.loads((tmp_path / "build/entity-graph.json").read_text())
    assert not [n for n in graph["nodes"] if n.get("declared_by")]  # none named yet
    cli("state", "init", "--seed", "entity:has-raw-resume", "--goal",
        "entity:learn-kubernetes-path", cwd=tmp_path)
    ran = cli("run", "--executor", "dry-run", "--format", "json", cwd=tmp_path).json()
    assert ran["stop_reason"] == "goal_reached"
    edges = json.loads((tmp_path / ".ctxfst/runtime.edges.json").read_text())
    completed = {(e["source"], e["target"]) for e in edges if e["relation"] == "COMPLETED"}
    assert ("skill:analyze-resume", "entity:has-skill-inventory") in completed
    assert ("skill:match-skills", "entity:has-skill-gap-analysis") in completed
    checked = cli("validate", "--format", "json", cwd=tmp_path).json()
    assert not [d for d in checked["diagnostics"] if d["code"] == "CTX604"]
    assert run_build(tmp_path, []) == 0
    capsys.readouterr()
    graph = json.loads((tmp_path / "build/entity-graph.json").read_text())
    own = {n["id"]: n for n in graph["nodes"] if n.get("declared_by") == "skills"}
    assert {"entity:has-skill-inventory", "entity:has-skill-gap-analysis"} <= set(own)
    assert own["entity:has-skill-inventory"]["type"] == "state"
    assert completed <= {(e["source"], e["target"]) for e in graph["edges"]
                         if e["relation"] == "COMPLETED"}
    jsonschema.validate(graph, json.loads((UPSTREAM / "entity-graph-schema.json").read_text()))
    ids = [n["id"] for n in graph["nodes"]]
    assert len(ids) == len(set(ids))


def _dot_statements(text: str) -> tuple[dict[str, str], list[tuple[str, str]]]:
    """Node labels and edges of the DOT `plan --format dot` writes (one statement a
    line), labels unescaped: what Graphviz would read."""
    import re

    nodes, edges = {}, []
    for line in text.splitlines()[3:-1]:
        node = re.fullmatch(r'  (n\d+) \[label="((?:[^"\\]|\\.)*)", shape=(\w+)\];', line)
        edge = re.fullmatch(r'  (n\d+) -> (n\d+)(?: \[(?:label="(?:[^"\\]|\\.)*")?(?:, )?'
                            r'(?:dir=none)?\])?;', line)
        assert node or edge, line
        if node:
            nodes[node.group(1)] = re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n"
                                          else m.group(1), node.group(2))
        else:
            edges.append((edge.group(1), edge.group(2)))
    return nodes, edges


def test_plan_as_mermaid_and_dot(kb, cli):
    cli("state", "init", "--goal", GOAL, "--seed", "state:has-resume", cwd=kb)
    planned = cli("plan", "--explain", "--format", "json", cwd=kb).json()
    dot = cli("plan", "--format", "dot", cwd=kb)
    assert dot.code == 0 and dot.out.startswith("digraph plan {")
    labels, edges = _dot_statements(dot.out)
    named = {label: name for name, label in labels.items()}
    for step in planned["explanation"]:
        skill = named[f"{step['step']}. {step['skill']} (cost {step['cost']:g})"]
        assert {(named[fact], skill) for fact in step["preconditions_met"]} <= set(edges)
        assert {(skill, named[fact]) for fact in step["adds"]} <= set(edges)
    assert f"{named[GOAL]} [label=\"{GOAL}\", shape=doubleoctagon];" in dot.out
    mermaid = cli("plan", "--format", "mermaid", cwd=kb)
    assert mermaid.code == 0 and mermaid.out.splitlines()[0] == "flowchart LR"
    assert '["1. inventory-skills (cost 1)"]' in mermaid.out
    assert f'([\"{GOAL}\"])' in mermaid.out
    assert mermaid.out.count(" --> ") == len(edges)
    assert cli("plan", "--format", "dot", cwd=kb).out == dot.out  # the same bytes again
    stuck = cli("plan", "--goal", GOAL, "--format", "mermaid", cwd=kb)  # no seed: no plan
    assert stuck.code == 1 and "%% no plan for goal:edge-api-learning-plan" in stuck.out


def test_plan_as_an_html_page(kb, cli):
    from .test_report import page_data

    cli("state", "init", "--goal", GOAL, "--seed", "state:has-resume", cwd=kb)
    page = cli("plan", "--format", "html", cwd=kb)
    assert page.code == 0 and page.out.startswith("<!DOCTYPE html>")
    assert "default-src 'none'" in page.out
    (kb / "plan.html").write_text(page.out, encoding="utf-8")
    data = page_data(kb / "plan.html")
    labels, edges = _dot_statements(cli("plan", "--format", "dot", cwd=kb).out)
    assert data["kind"] == "plan" and data["nodes"]["name"] == list(labels.values())
    names = list(labels)
    assert sorted(zip(data["edges"]["s"], data["edges"]["t"], strict=True)) == sorted(
        (names.index(a), names.index(b)) for a, b in edges)
    kinds = dict(zip(data["nodes"]["name"],
                     (data["types"][t] for t in data["nodes"]["type"]), strict=True))
    assert kinds["1. inventory-skills (cost 1)"] == "skill" and kinds[GOAL] == "goal"
    assert set(data["relations"]) == {"NEEDS", "ADDS"}
    # top to bottom: each step below the states it needs
    y = dict(zip(data["nodes"]["name"], data["nodes"]["y"], strict=True))
    assert y["state:has-resume"] < y["1. inventory-skills (cost 1)"] < \
        y["state:has-skill-inventory"] < y["2. analyze-gaps (cost 2)"]
    assert cli("plan", "--format", "html", cwd=kb).out == page.out


def test_diagram_labels_cannot_break_out_of_their_quotes():
    from ctxfst.diagram import plan_diagram

    hostile = 'state:a"] --> x[<b>evil</b>]\n  click n1 "javascript:alert(1)"'
    result = {"goal": hostile, "solved": True, "cost": 1.0, "steps": ["s"],
              "explanation": [{"step": 1, "skill": "s\\n", "preconditions_met": [],
                               "adds": [hostile], "cost": 1.0}]}
    mermaid = plan_diagram(result, "mermaid")
    lines = mermaid.splitlines()
    assert len(lines) == 5 and lines[0] == "flowchart LR"  # title, 2 nodes, 1 edge
    assert '"' not in lines[3].split('(["', 1)[1].rsplit('"])', 1)[0]
    assert "#quot;" in lines[3] and "#60;b#62;" in lines[3] and "\n" not in lines[3]
    assert lines[4] == "  n1 --> n2"
    labels, edges = _dot_statements(plan_diagram(result, "dot"))
    assert labels == {"n1": "1. s\\n (cost 1)", "n2": hostile} and edges == [("n1", "n2")]
    page = plan_diagram(result, "html")
    assert page.count("<script") == 2 and "<b>" not in page
    data = json.loads(page.split('id="ctxfst-data">', 1)[1].split("</script>", 1)[0])
    assert data["nodes"]["name"] == ["1. s\\n (cost 1)", hostile] and data["title"].endswith(
        "cost 1")
