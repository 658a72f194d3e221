"""JSON from a stranger (runtime edges, world states, request bodies) and text arguments
that are not text: refused or set aside with a located reason, never an internal error."""

from __future__ import annotations

import json

import pytest

from ctxfst.artifacts.io import JsonRefused, strict_json

GOAL = "goal:edge-api-learning-plan"


@pytest.mark.parametrize("text, where", [
    ('{"score": NaN}', "1:11"), ('[1,\n 2, 1e999]', "2:5"), ('[-Infinity]', "1:2"),
    ('{"goal": "goal:\\ud800"}', "1:16"), ('{"k\\udfff": 1}', "1:4"),
    (b'{"a": "\xff"}', "1:8"), ('{"a": 1', "1:8"),
])
def test_strict_json_refuses_with_the_place(text, where):
    with pytest.raises(JsonRefused, match=f"^{where}: "):
        strict_json(text)


def test_strict_json_reads_what_json_writes():
    value = {"a": [1, 2.5, -3e10, "😀", "\u00e9"], "b": None, "c": True}
    assert strict_json(json.dumps(value)) == value == strict_json(json.dumps(value).encode())


@pytest.fixture
def kb(built_example):
    return built_example


@pytest.mark.parametrize("bad", ["NaN", "Infinity", "1e999", '"\\ud800"'])
def test_runtime_edges_with_non_finite_scores_do_not_end_a_run(kb, cli, bad):
    edges = kb / ".ctxfst" / "runtime.edges.json"
    edges.write_text('[{"source": "skill:x", "target": "state:y", "relation": "COMPLETED", '
                     f'"score": {bad}}}]')
    assert cli("state", "init", "--goal", GOAL, "--seed", "state:has-resume", cwd=kb).code == 0
    ran = cli("run", "--executor", "dry-run", "--format", "json", cwd=kb)
    assert ran.code == 0, ran.err
    assert ran.json()["stop_reason"] == "goal_reached" and len(ran.json()["steps"]) == 3
    kept = json.loads(edges.read_text())
    assert {e["relation"] for e in kept} == {"COMPLETED"} and len(kept) >= 3
    assert (kb / ".ctxfst" / "runtime.edges.json.corrupt").exists()  # the user's, set aside


def test_a_world_state_with_a_lone_surrogate_is_a_clear_error(kb, cli):
    state = kb / ".ctxfst" / "world-state.json"
    state.parent.mkdir(exist_ok=True)
    state.write_text('{"session_id": "s", "goal": "goal:\\ud800", "active_states": [], '
                     '"completed_skills": []}')
    for command in (["state", "show"], ["plan"], ["state", "replay"]):
        result = cli(*command, cwd=kb)
        assert result.code == 2, (command, result.err)
        assert "internal error" not in result.err and "world-state.json" in result.err


def test_text_arguments_that_are_not_utf8_are_usage_errors(kb, cli):
    for mode in ("graph", "vector", "hybrid"):
        result = cli("query", "hono \udcff", "--mode", mode, cwd=kb)
        assert result.code == 2 and "not valid UTF-8" in result.err
