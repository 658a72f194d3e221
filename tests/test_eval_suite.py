"""The retrieval evaluation suite: its sets build and their questions name what they
hold, and `ctxfst eval --half` scores the dev or the test half of a set's questions."""

from __future__ import annotations

import json
import re
import shutil
from collections import Counter

import pytest
import yaml

from ctxfst.pipeline.runner import run_build
from ctxfst.retrieval.evaluate import HALVES, half_of, load_queries

from .conftest import FIXTURES, write

SUITE = ["ch22", "zhtw", "en-ops", "zhtw-hiking"]
CJK = re.compile(r"[\u3400-\u9fff]")


def suite_queries(name: str) -> list[dict]:
    path = FIXTURES / name / "queries.yaml"
    return load_queries(yaml.safe_load(path.read_text(encoding="utf-8")))


def built_set(name: str, root, capsys):
    """A build of one set (hash-64 vectors: the content is what is checked here)."""
    if name == "ch22":
        (root / "content").mkdir(parents=True)
        shutil.copy(FIXTURES / "ch22" / "benchmark.ctxfst.md", root / "content")
    else:
        shutil.copytree(FIXTURES / name / "content", root / "content")
    (root / "skills").mkdir()
    write(root, "ctxfst.toml", 'embedding_model = "hash-64"\n')
    assert run_build(root, [], quiet=True) == 0, capsys.readouterr().out
    capsys.readouterr()
    chunks = json.loads((root / "build/chunks.json").read_text(encoding="utf-8"))["chunks"]
    profiles = json.loads((root / "build/entity-profiles.json").read_text(encoding="utf-8"))
    return {c["id"] for c in chunks}, {p["id"] for p in profiles["entities"]}


@pytest.mark.parametrize("name", SUITE)
def test_each_set_builds_and_its_questions_name_what_it_holds(name, tmp_path, capsys):
    chunk_ids, entity_ids = built_set(name, tmp_path, capsys)
    queries = suite_queries(name)
    ids = [q["id"] for q in queries]
    assert len(ids) == len(set(ids)), "question ids are unique within a set"
    for query in queries:
        assert set(query.get("expected_chunks", [])) <= chunk_ids, query["id"]
        assert set(query.get("grades", {})) <= chunk_ids, query["id"]
        assert set(query.get("expected_entities", [])) <= entity_ids, query["id"]
    halves = Counter(half_of(q) for q in queries)
    assert set(halves) == set(HALVES), halves  # both halves hold questions


def test_the_suite_is_200_questions_of_three_kinds_in_two_languages():
    queries = {name: suite_queries(name) for name in SUITE}
    everything = [q for qs in queries.values() for q in qs]
    assert len(everything) >= 200
    assert {"direct", "hop"} <= {q.get("kind") for q in everything}
    assert {"multi", "bridge"} & {q.get("kind") for q in everything}  # two documents or hops
    chinese = sum(1 for q in everything if CJK.search(q["query"]))
    assert chinese >= 50 and len(everything) - chinese >= 50
    halves = Counter(half_of(q) for q in everything)
    assert min(halves.values()) >= 0.4 * len(everything), halves


def test_a_questions_half_is_a_seeded_hash_of_its_id_alone():
    first = {"id": "q-1", "query": "how do I roll back?"}
    assert half_of(first) == half_of({"id": "q-1", "query": "a different text"})
    assert half_of({"query": "no id"}) == half_of({"query": "no id", "id": ""})
    ids = [f"q-{n}" for n in range(400)]
    halves = Counter(half_of({"id": i, "query": ""}) for i in ids)
    assert set(halves) == set(HALVES) and min(halves.values()) > 160


def test_eval_scores_the_half_it_is_asked_for(built_example, cli):
    example = built_example
    questions = [{"id": f"q-{n}", "query": "Hono on Cloudflare Workers",
                  "expected_entities": ["entity:hono"]} for n in range(12)]
    queries = example / "queries.yaml"
    queries.write_text(yaml.safe_dump({"queries": questions}), encoding="utf-8")
    counted = {}
    for half in HALVES:
        result = cli("eval", queries, "--half", half, "--format", "json", cwd=example)
        assert result.code == 0, result.err
        report = json.loads(result.out)
        assert report["half"] == half
        assert {q["half"] for q in report["per_query"]} == {half}
        assert {q["id"] for q in report["per_query"]} == {
            q["id"] for q in questions if half_of(q) == half}
        counted[half] = report["queries"]
    whole = json.loads(cli("eval", queries, "--format", "json", cwd=example).out)
    assert "half" not in whole and sum(counted.values()) == whole["queries"] == 12
    assert {q["half"] for q in whole["per_query"]} == set(HALVES)


def test_eval_of_a_half_with_no_question_says_so(built_example, cli):
    example = built_example
    question = {"id": "q-0", "query": "Hono", "expected_entities": ["entity:hono"]}
    empty = next(h for h in HALVES if h != half_of(question))
    queries = example / "queries.yaml"
    queries.write_text(yaml.safe_dump({"queries": [question]}), encoding="utf-8")
    result = cli("eval", queries, "--half", empty, cwd=example)
    assert result.code == 2 and f"no query is in the {empty} half" in result.err
    assert result.out == ""
