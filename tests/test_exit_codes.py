"""One exit-code policy for every command (docs/cli.md): 0 done, 1 findings or work that
did not succeed, 2 it cannot run as asked (arguments, settings, no usable build or state)."""

from __future__ import annotations

from ctxfst.pipeline.runner import run_build

from .conftest import copy_example, write

GOAL = "goal:edge-api-learning-plan"
READERS = [  # every command that reads build/
    ("query", "Hono"), ("eval", "queries.yaml"), ("export", "lancedb", "--db", "lance"),
    ("export", "graph", "--format", "graphml"), ("state", "init", "--goal", GOAL),
    ("plan", "--goal", GOAL), ("select",), ("run",),
    ("facts", "ask", "--tenant", "default", "--op", "exists", "--key", "tag"),
    ("facts", "list", "--tenant", "default"),
]


def test_no_build_is_a_usage_error_for_every_reader(tmp_path, cli):
    kb = copy_example(tmp_path)
    write(kb, "queries.yaml", "queries:\n  - {id: q, query: Hono, expected_entities: []}\n")
    for args in READERS:
        result = cli(*args, cwd=kb)
        assert result.code == 2 and "doit" in result.err, (args, result.code, result.err)
        assert "Traceback" not in result.err and "internal error" not in result.err


def test_findings_and_unfinished_work_exit_1_and_answers_0(tmp_path, cli, capsys):
    kb = copy_example(tmp_path)
    assert run_build(kb, []) == 0
    capsys.readouterr()
    assert cli("query", "no such words anywhere", "--mode", "lexical", cwd=kb).code == 0
    unknown = cli("facts", "ask", "--tenant", "default", "--op", "exists", "--key", "tag",
                  "--value", "nothing-like-it", cwd=kb)
    assert unknown.code == 0 and "unknown" in unknown.out  # an answer, not a failure
    assert cli("facts", "show", "fact:0000", "--tenant", "default", cwd=kb).code == 1
    assert cli("plan", "--goal", "entity:go", cwd=kb).code == 1  # no plan reaches it
    assert cli("state", "init", "--goal", GOAL, cwd=kb).code == 0
    assert cli("run", "--max-steps", "1", cwd=kb).code == 1  # stopped before the goal
    write(kb, "content/bad.md", "---\nchunks:\n  - id: x:y\n    priority: urgent\n---\n")
    assert cli("validate", cwd=kb).code == 1


def test_bad_arguments_settings_and_state_files_exit_2(tmp_path, cli, capsys):
    kb = copy_example(tmp_path)
    assert run_build(kb, []) == 0
    capsys.readouterr()
    assert cli("facts", "ask", "--op", "exists", cwd=kb).code == 2  # --tenant is required
    assert cli("query", "Hono", "--top-k", "0", cwd=kb).code == 2
    assert cli("state", "show", cwd=kb).code == 2  # no state yet
    assert cli("state", "init", "--goal", GOAL, cwd=kb).code == 0
    assert cli("state", "init", "--goal", GOAL, cwd=kb).code == 2  # needs --force
    assert cli("plan", "--goal", "state:nowhere", cwd=kb).code == 2  # an unknown id
    write(kb, "ctxfst.toml", 'embedding_model = "hash-64"\nembedding_device = "gpu"\n')
    assert cli("validate", cwd=kb).code == 2
