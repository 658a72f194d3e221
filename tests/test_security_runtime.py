"""Untrusted knowledge bases, the world state and outputs: hostile executor output, state
files and runtime edges, file modes, control characters in output, init and generate-mock.

Each test builds a hostile project in tmp_path and goes through the public CLI."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest

from ctxfst.build.runner import run_build

from .conftest import copy_example, reseal, write

GOAL = "goal:edge-api-learning-plan"
SEED = "state:has-resume"
STATE = Path(".ctxfst/world-state.json")


@pytest.fixture
def kb(tmp_path, capsys):
    root = tmp_path / "kb"
    copy_example(root, "hash-32")
    assert run_build(root, []) == 0
    capsys.readouterr()
    return root


def _script(kb: Path, skill: str, body: str) -> None:
    """Give a skill a script for the command executor, and rebuild."""
    script = kb / "skills" / skill / "run.py"
    script.write_text(f"#!{sys.executable}\n{body}")
    script.chmod(0o755)
    skill_file = kb / "skills" / skill / "SKILL.md"
    skill_file.write_text(skill_file.read_text().replace("cost:", "script: run.py\ncost:", 1))


def _build(kb: Path, capsys) -> None:
    assert run_build(kb, []) == 0
    capsys.readouterr()


def _state(cli, kb: Path) -> dict:
    shown = cli("state", "show", "--format", "json", cwd=kb)
    assert shown.code == 0, shown.err
    return shown.json()


def _no_internal_error(result) -> None:
    assert result.code not in (0, 70) and "internal error" not in result.err, result.err


# Hole 7: malformed executor output ------------------------------------------------------

@pytest.mark.parametrize("printed, complaint", [
    ({"status": "success", "add_states": "state:has-skill-inventory"}, "add_states"),
    ({"status": "success", "add_states": ["NOT state:has-resume", 5, None]}, "add_states"),
    ({"status": "success", "add_states": ["state:made-up"]}, "state:made-up"),
    ({"status": "success", "remove_states": SEED}, "remove_states"),
    ({"status": "success", "summary": {"nested": 1}}, "summary"),
    ({"status": "success", "add_state": ["state:has-skill-inventory"]}, "add_state"),
])
def test_malformed_executor_output_fails_the_step_and_keeps_the_state(kb, cli, capsys,
                                                                      printed, complaint):
    _script(kb, "inventory-skills", f"import sys\nsys.stdin.read()\nprint({json.dumps(printed)!r})\n")
    _build(kb, capsys)
    assert cli("state", "init", "--goal", GOAL, "--seed", SEED, cwd=kb).code == 0
    before = _state(cli, kb)["active_states"]
    ran = cli("run", "--executor", "command", "--format", "json", cwd=kb)
    assert ran.code == 1, ran.err
    data = ran.json()
    assert data["stop_reason"] == "execution_failure"
    step = data["steps"][0]
    assert step["status"] == "failed" and complaint in step["summary"]
    after = _state(cli, kb)
    assert after["active_states"] == before == [SEED]
    assert [c["result"] for c in after["completed_skills"]] == ["failed"]


@pytest.mark.parametrize("option", [
    ("--timeout", "nan"), ("--timeout", "0"), ("--timeout", "-5"), ("--timeout", "inf"),
    ("--timeout", "1e300"), ("--max-steps", "0"), ("--retries", "-1"),
])
def test_run_options_out_of_range_are_usage_errors_that_record_nothing(kb, cli, capsys,
                                                                        option):
    marker = kb / "ran.txt"
    _script(kb, "inventory-skills", f"import sys\nopen({str(marker)!r}, 'w').write('x')\n"
                                    "print('{\"status\": \"success\"}')\n")
    _build(kb, capsys)
    cli("state", "init", "--goal", GOAL, "--seed", SEED, cwd=kb)
    log = (kb / STATE).with_name("world-state.json.events.jsonl")
    events = log.read_bytes()
    result = cli("run", "--executor", "command", *option, cwd=kb)
    assert result.code == 2 and option[0] in result.err
    assert log.read_bytes() == events and not marker.exists()


def test_snapshot_of_an_unknown_schema_version_is_refused(kb, cli):
    cli("state", "init", "--goal", GOAL, "--seed", SEED, cwd=kb)
    snapshot = kb / STATE
    data = json.loads(snapshot.read_text())
    data["schema_version"] = "99"
    snapshot.write_text(json.dumps(data))
    log = snapshot.with_name(snapshot.name + ".events.jsonl")
    saved = (snapshot.read_bytes(), log.read_bytes())
    for args in (("state", "show"), ("state", "add", "state:has-skill-inventory"),
                 ("state", "replay"), ("run",)):
        result = cli(*args, cwd=kb)
        assert result.code == 2 and "schema_version '99'" in result.err, (args, result.err)
    assert (snapshot.read_bytes(), log.read_bytes()) == saved
    log.unlink()  # an upstream-style snapshot with no log is refused the same way
    result = cli("state", "show", cwd=kb)
    assert result.code == 2 and "schema_version '99'" in result.err


# Hole 6 (runtime part): state files that are not what they should be --------------------

@pytest.mark.parametrize("name", ["world-state.json", "world-state.json.events.jsonl",
                                  "world-state.json.lock"])
def test_a_folder_in_place_of_a_state_file_is_a_clear_error(kb, cli, name):
    (kb / ".ctxfst" / name).mkdir(parents=True)
    (kb / ".ctxfst" / name / "keep.txt").write_text("mine")
    for args in (("state", "init", "--goal", GOAL, "--force"), ("state", "show"),
                 ("state", "add", SEED), ("state", "history")):
        result = cli(*args, cwd=kb)
        _no_internal_error(result)
    assert (kb / ".ctxfst" / name / "keep.txt").read_text() == "mine"


@pytest.mark.parametrize("event", [
    {"type": "add", "serial": "x", "states": ["state:has-skill-inventory"]},
    {"type": "add", "serial": 10 ** 30, "states": ["state:has-skill-inventory"]},
    {"type": "add", "serial": 2, "states": ["state:has-skill-inventory"], "at": 5},
    {"type": "complete", "serial": 2, "skill": "inventory-skills", "result": "won"},
    {"type": "complete", "serial": 2, "skill": ["inventory-skills"], "result": "success"},
    {"type": "step_started", "serial": 2, "step_id": [2], "skill": "inventory-skills"},
    {"type": "init", "serial": 2, "session_id": "s", "goal": GOAL, "seeds": [GOAL]},
    {"type": "subgraph", "serial": 2, "subgraph": {"nodes": "abc", "edges": 5}},
    {"type": "teleport", "serial": 2},
    "[" * 100_000,
])
def test_hostile_event_log_lines_are_located_errors(kb, cli, event):
    cli("state", "init", "--goal", GOAL, "--seed", SEED, cwd=kb)
    log = kb / ".ctxfst/world-state.json.events.jsonl"
    first = json.loads(log.read_text().splitlines()[0])
    if isinstance(event, dict):
        event = json.dumps({"lineage": first["lineage"], "at": "2026-01-01T00:00:00",
                            **event})
    with open(log, "a") as out:
        out.write(event + "\n")
    saved = log.read_bytes()
    for args in (("state", "show"), ("state", "add", "state:has-skill-inventory"),
                 ("run",), ("select",), ("plan",)):
        result = cli(*args, cwd=kb)
        assert result.code == 2 and "events.jsonl:2" in result.err, (args, result.err)
    assert log.read_bytes() == saved


def test_state_logs_and_locks_are_never_followed_through_links(kb, cli, tmp_path):
    cli("state", "init", "--goal", GOAL, "--seed", SEED, cwd=kb)
    victim = tmp_path / "victim.txt"
    for name in ("world-state.json.lock", "world-state.json.events.jsonl"):
        victim.write_text("precious\n")
        planted = kb / ".ctxfst" / name
        saved = planted.read_bytes() if planted.is_file() else None
        planted.unlink(missing_ok=True)
        planted.symlink_to(victim)
        result = cli("state", "add", "state:has-skill-inventory", cwd=kb)
        assert result.code == 2 and "link" in result.err, result.err
        assert victim.read_text() == "precious\n"
        planted.unlink()
        if saved is not None:
            planted.write_bytes(saved)


def test_hostile_runtime_edges_file_is_set_aside(kb, cli, tmp_path):
    cli("state", "init", "--goal", GOAL, "--seed", SEED, cwd=kb)
    edges = kb / ".ctxfst/runtime.edges.json"
    edges.write_text(json.dumps([{"source": ["x"], "target": "t", "relation": "r"}]))
    ran = cli("run", "--format", "json", cwd=kb)
    assert ran.code == 0 and ran.json()["stop_reason"] == "goal_reached", ran.err
    assert json.loads(edges.with_name("runtime.edges.json.corrupt").read_text())[0]["source"] \
        == ["x"]
    assert all(isinstance(e["source"], str) for e in json.loads(edges.read_text()))


def test_runtime_edges_are_not_read_through_a_link_out_of_the_project(kb, cli, tmp_path):
    outside = tmp_path / "elsewhere.json"
    outside.write_text(json.dumps([{"source": "skill:secret", "target": "entity:secret",
                                    "relation": "LEAKED"}]))
    cli("state", "init", "--goal", GOAL, "--seed", SEED, cwd=kb)
    edges = kb / ".ctxfst/runtime.edges.json"
    edges.symlink_to(outside)
    result = cli("run", cwd=kb)  # refused, or run without reading through the link
    assert result.code in (0, 2) and "internal error" not in result.err, result.err
    assert "LEAKED" in outside.read_text()
    assert edges.is_symlink() or "LEAKED" not in edges.read_text()


def test_a_skill_script_outside_the_project_is_never_run(kb, cli, tmp_path, capsys):
    """The command executor runs skills' scripts by design, but only inside the project:
    a skill index (build/ may come from someone else) naming a folder outside is refused."""
    marker = tmp_path / "ran.txt"
    evil = tmp_path / "evil" / "x"
    write(evil, "run.py", f"#!{sys.executable}\nopen({str(marker)!r}, 'w').write('x')\n"
                          "print('{\"status\": \"success\"}')\n").chmod(0o755)
    index_path = kb / "build/skill-index.json"
    index = json.loads(index_path.read_text())
    for skill in index["skills"]:
        skill["path"] = "../evil/x/SKILL.md"
        skill["script"] = "run.py"
    index_path.write_text(json.dumps(index))
    reseal(kb / "build", index_path.name)  # past the manifest check: to the shape checks
    cli("state", "init", "--goal", GOAL, "--seed", SEED, cwd=kb)
    result = cli("run", "--executor", "command", cwd=kb)
    assert result.code != 70 and "internal error" not in result.err
    assert not marker.exists()


def test_a_skill_index_of_the_wrong_shape_is_a_clear_error(kb, cli):
    index_path = kb / "build/skill-index.json"
    index = json.loads(index_path.read_text())
    index["skills"][0]["cost"] = "cheap"
    index_path.write_text(json.dumps(index))
    reseal(kb / "build", index_path.name)  # past the manifest check: to the shape checks
    cli("state", "init", "--goal", GOAL, "--seed", SEED, cwd=kb)
    for args in (("plan",), ("select",), ("run",)):
        result = cli(*args, cwd=kb)
        assert result.code == 2 and "internal error" not in result.err, (args, result.err)


# Hole 9: file modes -----------------------------------------------------------------------

@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    yield
    os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_written_files_honour_the_umask_and_keep_their_mode(tmp_path, cli, capsys, umask_022):
    root = tmp_path / "kb"
    copy_example(root, "hash-32")
    assert run_build(root, []) == 0
    capsys.readouterr()
    for name in ("manifest.json", "chunks.json", "skill-index.json", "entity-graph.json"):
        assert _mode(root / "build" / name) == 0o644, name
    assert cli("state", "init", "--goal", GOAL, "--seed", SEED, cwd=root).code == 0
    snapshot = root / STATE
    assert _mode(snapshot) == 0o644
    snapshot.chmod(0o640)
    assert cli("state", "add", "state:has-skill-inventory", cwd=root).code == 0
    assert _mode(snapshot) == 0o640 and "state:has-skill-inventory" in snapshot.read_text()
    skill = write(root, "skills/old-style/SKILL.md", """\
        ---
        name: old-style
        description: "A v2 skill with top-level extension fields."
        preconditions: ["state:has-resume"]
        postconditions: ["state:has-skill-inventory"]
        cost: low
        ---

        # Old style
        """)
    skill.chmod(0o640)
    assert cli("skills", "migrate", skill, cwd=root).code == 0
    assert "metadata:" in skill.read_text() and _mode(skill) == 0o640


# Hole 9: control characters in output ----------------------------------------------------

FORGED = "forged.md:9:9: error CTX999: forged"


def test_crafted_ids_and_paths_cannot_forge_output_lines(tmp_path, cli):
    bad_id = f"entity:a\\n{FORGED}\\r\\x1b[2J\\u2028\\x85"
    write(tmp_path, "doc.ctxfst.md", f"""\
        ---
        title: x
        entities:
          - id: "{bad_id}"
            name: A
            type: concept
        chunks: []
        ---
        """)
    write(tmp_path, f"x\n{FORGED}.ctxfst.md", "---\ntitle: 5\nchunks: 3\n---\n")
    count = len(cli("validate", "--format", "json", tmp_path, cwd=tmp_path).json()[
        "diagnostics"])
    text = cli("validate", tmp_path, cwd=tmp_path)
    assert text.code == 1
    lines = text.out.splitlines()
    assert len(lines) == count + 1 and not any(line.startswith("forged") for line in lines)
    assert "\x1b" not in text.out and "\u2028" not in text.out and "\x85" not in text.out
    assert "\\n" in text.out and "\\x1b" in text.out
    github = cli("validate", "--format", "github", tmp_path, cwd=tmp_path)
    assert len(github.out.splitlines()) == count + 1 and "\x1b" not in github.out
    assert all(line.startswith("::error ") for line in github.out.splitlines()[:count])
    raw = cli("validate", "--format", "json", tmp_path, cwd=tmp_path)
    assert "\u2028" not in raw.out and "\x85" not in raw.out
    assert any("\u2028" in d["message"] for d in raw.json()["diagnostics"])  # same data


def test_runtime_text_output_escapes_ids_from_the_state(tmp_path, cli):
    root = tmp_path / "kb"
    copy_example(root, "hash-32")
    upstream = {"session_id": "s1", "goal": GOAL,
                "active_states": [f"{SEED}\nserial 999, lineage forged"],
                "completed_skills": []}
    write(root, str(STATE), json.dumps(upstream))
    shown = cli("state", "show", cwd=root)
    assert shown.code == 0
    assert not any(line.startswith("serial 999") for line in shown.out.splitlines())
    assert len(shown.out.splitlines()) == 4


# Hole 9: init and generate-mock ----------------------------------------------------------

def test_init_refuses_empty_file_link_and_impossible_targets(tmp_path, cli):
    here = tmp_path / "here"
    here.mkdir()
    result = cli("init", "", cwd=here)
    assert result.code == 2 and list(here.iterdir()) == []
    regular = write(tmp_path, "file.txt", "mine\n")
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "missing")
    for target in (regular, dangling, regular / "kb"):
        result = cli("init", target, cwd=here)
        assert result.code == 2 and str(target) in result.err, (target, result.err)
        assert "internal error" not in result.err
    assert regular.read_text() == "mine\n" and not (tmp_path / "missing").exists()
    # A link planted inside the target is never written through.
    outside = tmp_path / "outside"
    outside.mkdir()
    target = tmp_path / "kb"
    target.mkdir()
    (target / "content").symlink_to(outside)
    result = cli("init", target, cwd=here)
    assert result.code == 2 and list(outside.iterdir()) == []


def test_init_failing_part_way_keeps_nothing(tmp_path, cli):
    target = tmp_path / "kb"
    target.mkdir()
    write(target, "skills", "a file where the skills folder would go\n")
    result = cli("init", target, cwd=tmp_path)
    assert result.code == 2 and "internal error" not in result.err
    assert [p.name for p in target.iterdir()] == ["skills"]


def test_generate_mock_refuses_an_existing_kb_and_huge_counts(tmp_path, cli, monkeypatch):
    import ctxfst.mock as mock

    asked = []  # the document counts generate was called with (at most 2 are written)
    real_generate = mock.generate

    def small_generate(out, docs, seed=0):
        asked.append(docs)
        return real_generate(out, min(docs, 2), seed)

    monkeypatch.setattr(mock, "generate", small_generate)
    kb = tmp_path / "kb"
    copy_example(kb, "hash-32")
    config = (kb / "ctxfst.toml").read_bytes()
    before = sorted(p.relative_to(kb) for p in kb.rglob("*"))
    result = cli("generate-mock", kb, "--docs", "3", cwd=tmp_path)
    assert result.code == 2 and "not empty" in result.err
    assert sorted(p.relative_to(kb) for p in kb.rglob("*")) == before
    assert (kb / "ctxfst.toml").read_bytes() == config
    result = cli("generate-mock", tmp_path / "new", "--docs", str(10 ** 9), cwd=tmp_path)
    assert result.code == 2 and "--docs" in result.err
    assert asked == [] and not (tmp_path / "new").exists()
    regular = write(tmp_path, "file.txt", "mine\n")
    result = cli("generate-mock", regular, "--docs", "2", cwd=tmp_path)
    assert result.code == 2 and "internal error" not in result.err
    assert regular.read_text() == "mine\n"
