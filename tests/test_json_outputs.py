"""Every `--format json` output carries a schema_version and matches its schema in
schemas/, on answers and on the failure paths that still print JSON."""

from __future__ import annotations

import argparse
import json

import jsonschema
import pytest

from ctxfst.cli import build_parser
from ctxfst.diagnostics import OUTPUT_SCHEMA_VERSION
from ctxfst.pipeline.runner import run_build
from ctxfst.runtime.state import STATE_SCHEMA_VERSION

from .conftest import REPO, copy_example, write

GOAL = "goal:edge-api-learning-plan"

# each command that prints JSON -> its schema in schemas/
SCHEMA_OF = {
    "validate": "diagnostics", "lint": "diagnostics", "query": "query-output",
    "eval": "eval-output", "plan": "plan-output", "select": "select-output",
    "run": "run-output", "state history": "state-history-output",
    "facts ask": "facts-ask-output", "facts show": "facts-show-output",
    "facts list": "facts-list-output", "rule": "rule-output", "chunk": "chunk-output",
    "contextualize": "contextualize-output",
    **{f"state {action}": "world-state"
       for action in ("init", "show", "add", "remove", "complete", "subgraph", "replay")},
}


def schema(name: str) -> dict:
    return json.loads((REPO / "schemas" / f"{name}.schema.json").read_text())


@pytest.fixture(scope="module")
def kb(tmp_path_factory):
    root = copy_example(tmp_path_factory.mktemp("kb"))
    write(root, "queries.yaml", """
        queries:
          - id: edge
            query: Hono on Cloudflare Workers
            expected_entities: [entity:hono, entity:cloudflare-workers]
            expected_chunks: [reference:hono-on-workers]
        """)
    assert run_build(root, []) == 0
    return root


def json_commands(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()) -> set[str]:
    """Every (sub)command with a --format option that offers json."""
    found = set()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found |= json_commands(sub, prefix + (name,))
        elif "--format" in action.option_strings and "json" in (action.choices or ()):
            found.add(" ".join(prefix))
    return found


def test_every_json_output_has_a_schema():
    assert json_commands(build_parser()) == set(SCHEMA_OF)
    for name in set(SCHEMA_OF.values()):
        jsonschema.Draft202012Validator.check_schema(schema(name))


def checked(result, command: str) -> dict:
    data = json.loads(result.out)
    jsonschema.validate(data, schema(SCHEMA_OF[command]))
    # (the world state's commands print the state file, which has a version of its own)
    assert data["schema_version"] == (STATE_SCHEMA_VERSION if SCHEMA_OF[command] == "world-state"
                                      else OUTPUT_SCHEMA_VERSION)
    return data


def test_query_json_is_what_a_rag_caller_needs(kb, cli):
    for mode in ("vector", "lexical", "graph", "hybrid"):
        data = checked(cli("query", "Hono on Cloudflare Workers", "--mode", mode,
                           "--format", "json", cwd=kb), "query")
        top = data["results"][0]
        assert top["chunk_id"] == "reference:hono-on-workers", mode
        assert top["title"] == "Backend frameworks: from FastAPI to the edge"
        lines = (kb / top["source"]).read_text().splitlines()
        assert lines[top["line_start"] - 1].startswith('<Chunk id="reference:hono-on-workers"')
        assert lines[top["line_end"] - 1].endswith("</Chunk>")
        assert top["content"].startswith("## Hono on Cloudflare Workers")
        assert top["content"] in "\n".join(lines[top["line_start"] - 1:top["line_end"]])
    graph = checked(cli("query", "Hono on Cloudflare Workers", "--format", "json", cwd=kb),
                    "query")
    assert any(hit["via"] for hit in graph["results"]) and graph["seeds"]
    write(kb, "skill-graph.json", json.dumps({
        "nodes": ["Hono", "TypeScript"], "edges": [{"from": "Hono", "to": "TypeScript",
                                                    "type": "requires"}]}))
    try:
        checked(cli("query", "Hono", "--mode", "keyword-graph", "--format", "json", cwd=kb),
                "query")
    finally:
        (kb / "skill-graph.json").unlink()


def test_eval_validate_and_lint_json(kb, cli, tmp_path):
    report = checked(cli("eval", "queries.yaml", "--modes", "vector", "graph", "--format",
                         "json", cwd=kb), "eval")
    assert set(report["modes"]) == {"vector", "graph"}
    for command in ("validate", "lint"):
        checked(cli(command, "--format", "json", cwd=kb), command)
    write(tmp_path, "bad.md", "---\nchunks:\n  - id: x:y\n    priority: urgent\n---\n")
    bad = cli("validate", tmp_path / "bad.md", "--format", "json", cwd=kb)
    assert bad.code == 1 and checked(bad, "validate")["diagnostics"]


def test_runtime_json_outputs(kb, cli):
    state = ["--state", ".ctxfst/outputs-state.json", "--format", "json"]
    checked(cli("state", "init", "--goal", GOAL, "--seed", "state:has-resume", *state,
                cwd=kb), "state init")
    plan = checked(cli("plan", "--explain", *state, cwd=kb), "plan")
    assert plan["solved"] and plan["explanation"] and plan["alternatives"]
    unsolved = cli("plan", "--goal", "entity:go", *state, cwd=kb)
    assert unsolved.code == 1 and checked(unsolved, "plan")["unreachable"] == ["entity:go"]
    assert checked(cli("select", "--explain", *state, cwd=kb), "select")["selected"]
    checked(cli("state", "add", "state:has-skill-inventory", *state, cwd=kb), "state add")
    checked(cli("state", "remove", "state:has-skill-inventory", *state, cwd=kb),
            "state remove")
    checked(cli("state", "complete", "inventory-skills", "--result", "success", *state,
                cwd=kb), "state complete")
    checked(cli("state", "subgraph", *state, cwd=kb), "state subgraph")
    run = checked(cli("run", *state, cwd=kb), "run")
    assert run["stop_reason"] == "goal_reached" and run["state"]["goal"] == GOAL
    history = checked(cli("state", "history", *state, cwd=kb), "state history")
    assert [e["type"] for e in history["events"]][:3] == ["init", "add", "remove"]
    checked(cli("state", "replay", *state, cwd=kb), "state replay")
    checked(cli("state", "show", *state, cwd=kb), "state show")


def test_facts_json_outputs(kb, cli, capsys):
    assert run_build(kb, []) == 0  # the runtime test's edges file may have changed inputs
    capsys.readouterr()
    facts = ["--tenant", "default", "--format", "json"]
    listed = checked(cli("facts", "list", "--limit", "2", *facts, cwd=kb), "facts list")
    assert listed["truncated"] and len(listed["facts"]) == 2
    shown = checked(cli("facts", "show", listed["facts"][0]["fact_id"], *facts, cwd=kb),
                    "facts show")
    assert shown["evidence"]
    yes = checked(cli("facts", "ask", "--op", "exists", "--key", "tag", *facts, cwd=kb),
                  "facts ask")
    assert yes["answer"] == "yes"
    unknown = checked(cli("facts", "ask", "--op", "exists", "--key", "tag", "--value",
                          "no-such-tag-anywhere", *facts, cwd=kb), "facts ask")
    assert unknown["answer"] == "unknown"  # no facts is not "does not exist"


def test_rule_json_outputs(cli, tmp_path):
    every = checked(cli("rule", "--format", "json", cwd=tmp_path), "rule")
    assert len(every["rules"]) > 80
    one = checked(cli("rule", "CTX513", "--format", "json", cwd=tmp_path), "rule")
    assert [r["code"] for r in one["rules"]] == ["CTX513"]
