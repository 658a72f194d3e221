"""Semantic facts: real doit builds, real Parquet, the ledger, tenants, three-valued answers."""

from __future__ import annotations

import collections
import hashlib
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import jsonschema
import pyarrow.parquet as pq
import pytest

from ctxfst.config import find_project
from ctxfst.facts.build import facts_bytes
from ctxfst.facts.model import Fact, evidence_schema, facts_schema, facts_table, runs_schema
from ctxfst.facts.query import FactsError, Store, ask
from ctxfst.pipeline.runner import run_build

from .conftest import REPO, copy_example, counted_sha256, run_process, write

FACTS = "build/semantic_facts.parquet"
RUNS = "build/semantic_fact_extraction_runs.parquet"
EVIDENCE = "build/semantic_fact_evidence.parquet"
DELTA = "build/semantic_facts_delta.json"
SCHEMAS = REPO / "schemas"


def project(root: Path, facts: str = "") -> Path:
    write(root, "ctxfst.toml", 'content_dir = "content"\nskills_dir = "skills"\n'
          f'embedding_model = "hash-16"\n{facts}')
    (root / "content").mkdir(parents=True, exist_ok=True)
    (root / "skills").mkdir(exist_ok=True)
    return root


def build(root: Path, capsys, *args: str) -> str:
    code = run_build(root, list(args))
    out = capsys.readouterr()
    assert code == 0, out.out + out.err
    return out.out + out.err


def build_fails(root: Path, capsys) -> str:
    """A build that must stop with a clear message (returned), never a traceback."""
    code = run_build(root, [])
    out = capsys.readouterr()
    assert code != 0 and "Traceback" not in out.out + out.err, out.out + out.err
    return out.out + out.err


def facts(root: Path) -> list[dict]:
    """The facts, after checking the file is exactly what writing them afresh gives
    (builds carry untouched rows over as Arrow; the bytes must not depend on that)."""
    table = pq.read_table(root / FACTS)
    rows = table.to_pylist()
    meta = table.schema.metadata
    fresh = facts_table([Fact.from_row(row) for row in rows], int(meta[b"ctxfst.build_seq"]),
                        meta[b"ctxfst.extract_version"].decode())
    assert facts_bytes(fresh) == (root / FACTS).read_bytes()
    return rows


def runs(root: Path) -> list[dict]:
    return pq.read_table(root / RUNS).to_pylist()


def delta(root: Path) -> dict:
    return json.loads((root / DELTA).read_text())


def find(rows: list[dict], **match) -> list[dict]:
    return [r for r in rows if all(r[k] == v for k, v in match.items())]


def doc(chunk: str, text: str, *, entities: str = "", tenant: str = "", extra: str = "",
        chunk_extra: str = "") -> str:
    """A one-chunk document; entities is YAML for the entities: list."""
    head = f"tenant: {tenant}\n" if tenant else ""
    ents = f"entities:\n{entities}" if entities else ""
    return (f"---\n{head}{extra}{ents}chunks:\n  - id: {chunk}\n    context: \"about {chunk}\"\n"
            f"{chunk_extra}---\n<Chunk id=\"{chunk}\">\n{text}\n</Chunk>\n")


ENTITY_X = "  - id: entity:xylo\n    name: Xylophone\n    type: tool\n    aliases: [xylo]\n"


def file_text(root: Path, path: str) -> str:
    return (root / path).read_bytes().decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")


# --- the example KB -------------------------------------------------------------------


def test_example_facts_match_their_schema_ids_and_offsets(tmp_path, capsys):
    root = copy_example(tmp_path, "hash-16")
    build(root, capsys)
    rows = facts(root)
    assert rows and len({r["fact_id"] for r in rows}) == len(rows)
    fact_schema = json.loads((SCHEMAS / "semantic-facts.schema.json").read_text())
    runs_schema_json = json.loads((SCHEMAS / "semantic-fact-extraction-runs.schema.json")
                                  .read_text())
    delta_schema = json.loads((SCHEMAS / "semantic-facts-delta.schema.json").read_text())
    for schema in (fact_schema, runs_schema_json, delta_schema):
        jsonschema.Draft202012Validator.check_schema(schema)
    # The documented schemas list the Arrow columns in order, with their Arrow types.
    assert list(fact_schema["properties"]) == facts_schema().names
    assert list(runs_schema_json["properties"]) == runs_schema().names
    for field in facts_schema():
        assert fact_schema["properties"][field.name]["x-arrow-type"] == str(field.type)
    table = pq.read_table(root / FACTS)
    assert table.schema.remove_metadata() == facts_schema()
    assert table.schema.metadata[b"ctxfst.schema_version"] == b"2.0.0"
    jsonschema.validate(delta(root), delta_schema)
    texts: dict[str, str] = {}
    for row in rows:
        jsonschema.validate(row, fact_schema)
        encoded = json.dumps([row["tenant_id"], row["entity_type"], row["entity_id"],
                              row["fact_namespace"], row["fact_key"], row["fact_value_norm"]],
                             ensure_ascii=False, separators=(",", ":"))
        assert row["fact_id"] == "fact:" + hashlib.sha256(encoded.encode()).hexdigest()[:32]
        assert row["tenant_id"] == "default" and row["is_active"]
        for evidence in row["evidence"]:
            text = texts.setdefault(evidence["path"], file_text(root, evidence["path"]))
            assert text[evidence["start"]:evidence["end"]] == evidence["excerpt"], evidence
        assert (row["evidence_start"], row["evidence_excerpt"]) == (
            row["evidence"][0]["start"], row["evidence"][0]["excerpt"])
    for run in runs(root):
        jsonschema.validate(run, runs_schema_json)
        assert run["status"] == "completed" and run["trigger"] == "create"
    # Every evidence entry is in the evidence file, a fact's together and in its row's
    # order; the row keeps the first of them.
    evidence_json = json.loads((SCHEMAS / "semantic-fact-evidence.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(evidence_json)
    assert list(evidence_json["properties"]) == evidence_schema().names
    for field in evidence_schema():
        assert evidence_json["properties"][field.name]["x-arrow-type"] == str(field.type)
    evidence = pq.read_table(root / "build/semantic_fact_evidence.parquet")
    assert evidence.schema.remove_metadata() == evidence_schema()
    entries = evidence.to_pylist()
    assert [e["fact_id"] for e in entries] == [r["fact_id"] for r in rows
                                               for _ in range(r["evidence_count"])]
    at = 0
    for row in rows:
        mine = entries[at:at + row["evidence_count"]]
        at += row["evidence_count"]
        for entry in mine:
            jsonschema.validate(entry, evidence_json)
        assert [{k: v for k, v in e.items() if k != "fact_id"}
                for e in mine[:len(row["evidence"])]] == row["evidence"]
    # The derived rules: entity type and aliases, tags as themes, mentions with
    # exact offsets (also in Chinese text), skill capabilities, dates.
    assert find(rows, entity_id="entity:hono", fact_namespace="classification",
                fact_value_norm="framework")
    assert find(rows, entity_id="entity:hono", fact_namespace="alias", fact_value_norm="hono.js")
    assert find(rows, entity_type="chunk", fact_namespace="theme", fact_key="tag")
    mention = [e for r in find(rows, entity_type="chunk", fact_namespace="mention")
               for e in r["evidence"] if e["extractor"] == "derived.text_mention"]
    assert any(not e["excerpt"].isascii() for e in mention)
    produced = find(rows, entity_type="skill", fact_namespace="capability", fact_key="produces")
    assert {r["entity_id"] for r in produced} >= {"skill:inventory-skills"}
    assert find(rows, entity_type="chunk", fact_namespace="lifecycle", fact_key="created",
                fact_value_norm="2026-02-10")
    # freshness is the source's own date, never the build's clock
    assert all(r["freshness_at"] is None or r["freshness_at"].startswith("2026")
               for r in rows)


def test_rebuilds_are_idempotent_and_survive_doit_clean(tmp_path, capsys):
    root = copy_example(tmp_path, "hash-16")
    build(root, capsys)
    before = {name: (root / name).read_bytes() for name in (FACTS, RUNS, DELTA)}
    build(root, capsys, "forget", "facts")
    out = build(root, capsys)
    assert ".  facts" in out  # the stage ran again, and changed nothing
    assert {name: (root / name).read_bytes() for name in before} == before
    build(root, capsys, "clean")
    assert not (root / FACTS).exists() and (root / ".ctxfst/facts/semantic_facts.parquet").exists()
    build(root, capsys)
    assert {name: (root / name).read_bytes() for name in before} == before
    assert len(runs(root)) == len({r["source_path"] for r in runs(root)})


def test_equal_inputs_give_byte_identical_facts(tmp_path, capsys):
    outputs = []
    for name in ("one", "two"):
        root = copy_example(tmp_path / name, "hash-16")
        build(root, capsys)
        outputs.append([(root / n).read_bytes() for n in (FACTS, RUNS, DELTA)])
    assert outputs[0] == outputs[1]


# --- incremental extraction and invalidation -----------------------------------------


def test_edit_and_delete_invalidate_and_multi_source_facts_stay(tmp_path, capsys):
    root = project(tmp_path)
    write(root, "content/a.md", doc("note:a", "The xylo sits in the corner.", entities=ENTITY_X,
                                    extra="date: 2025-05-01\n"))
    write(root, "content/b.md", doc("note:b", "A Xylophone concert.", entities=ENTITY_X))
    write(root, "content/c.md", doc("note:c", "Nothing to see."))
    build(root, capsys)
    rows = facts(root)
    kind = find(rows, entity_id="entity:xylo", fact_namespace="classification")[0]
    assert kind["evidence_count"] == 2  # declared in two documents: one fact, two evidence
    assert {e["source_path"] for e in kind["evidence"]} == {"content/a.md", "content/b.md"}
    mention_a = find(rows, entity_id="note:a", fact_namespace="mention")[0]
    assert mention_a["evidence_excerpt"] == "xylo" and mention_a["freshness_at"] == "2025-05-01"
    assert mention_a["confidence"] == 0.8

    # Edit a.md: the entity declaration and the mention go away.
    write(root, "content/a.md", doc("note:a", "The piano sits in the corner."))
    build(root, capsys)
    rows = facts(root)
    kind = find(rows, fact_id=kind["fact_id"])[0]
    assert kind["is_active"] and kind["evidence_count"] == 1  # b.md still says it
    assert kind["evidence"][0]["source_path"] == "content/b.md"
    gone = find(rows, fact_id=mention_a["fact_id"])[0]
    assert not gone["is_active"] and gone["invalidation_reason"] == "no_longer_extracted"
    assert gone["evidence_excerpt"] == "xylo"  # kept with what supported it
    new_runs = [r for r in runs(root) if r["build_seq"] == 2]
    assert [(r["source_path"], r["trigger"]) for r in new_runs] == [("content/a.md", "update")]
    change = delta(root)
    assert change["base_build_seq"] == 1 and change["build_seq"] == 2
    assert mention_a["fact_id"] in {r["fact_id"] for r in change["invalidated"]}
    assert kind["fact_id"] in {r["fact_id"] for r in change["updated"]}

    # Delete b.md: now nothing supports the entity.
    (root / "content/b.md").unlink()
    build(root, capsys)
    rows = facts(root)
    kind = find(rows, fact_id=kind["fact_id"])[0]
    assert not kind["is_active"] and kind["invalidation_reason"] == "source_deleted"
    # (the tenant's entity names changed too, so a.md and c.md were extracted again)
    deletion = [r for r in runs(root) if r["build_seq"] == 3 and r["source_deleted"]]
    assert [r["source_path"] for r in deletion] == ["content/b.md"]
    assert kind["invalidated_run_id"] == deletion[0]["run_id"]
    assert len(rows) == len({r["fact_id"] for r in rows})

    # Put it back: the same fact id comes back to life, reported as added.
    write(root, "content/b.md", doc("note:b", "A Xylophone concert.", entities=ENTITY_X))
    build(root, capsys)
    again = find(facts(root), fact_id=kind["fact_id"])[0]
    assert again["is_active"] and again["invalidation_reason"] is None
    assert again["created_build_seq"] == 1 and again["updated_build_seq"] == 4
    assert kind["fact_id"] in {r["fact_id"] for r in delta(root)["added"]}
    assert [r["trigger"] for r in runs(root)
            if r["build_seq"] == 4 and r["source_path"] == "content/b.md"] == ["create"]


def test_a_new_alias_reextracts_the_tenants_sources(tmp_path, capsys):
    root = project(tmp_path)
    write(root, "content/a.md", doc("note:a", "We love the marimba.", entities=ENTITY_X))
    write(root, "content/b.md", doc("note:b", "Nothing here."))
    build(root, capsys)
    assert not find(facts(root), entity_id="note:a", fact_namespace="mention")
    write(root, "content/a.md", doc("note:a", "We love the marimba.", entities=ENTITY_X.replace(
        "[xylo]", "[xylo, marimba]")))
    build(root, capsys)
    mention = find(facts(root), entity_id="note:a", fact_namespace="mention")
    assert mention and mention[0]["evidence_excerpt"] == "marimba"
    # b.md's bytes did not change, but its tenant's names did: it is extracted again.
    assert {r["source_path"] for r in runs(root) if r["build_seq"] == 2} == {
        "content/a.md", "content/b.md"}


def test_declared_facts_with_types_confidence_and_evidence(tmp_path, capsys):
    root = project(tmp_path)
    chunk_facts = ("    facts:\n"
                   "      - {namespace: domain, key: topic, value: Invoicing, evidence: "
                   "\"invoice run\", confidence: 0.7}\n"
                   "      - {namespace: metric, key: size, value: \"1.50\", value_type: number}\n"
                   "      - {namespace: metric, key: weight, value: 2.50, value_type: number}\n")
    document_facts = ("facts:\n  - namespace: status\n    key: reviewed\n    value: 2025-01-02\n"
                      "    value_type: date\n  - {namespace: meta, key: spec, value: {a: 1},"
                      " value_type: json}\n")
    write(root, "content/a.md", doc("note:a", "The monthly invoice run starts.",
                                    extra=document_facts, chunk_extra=chunk_facts))
    build(root, capsys)
    rows = facts(root)
    topic = find(rows, fact_namespace="domain")[0]
    assert (topic["fact_value_text"], topic["fact_value_norm"], topic["confidence"]) == (
        "Invoicing", "invoicing", 0.7)
    assert topic["evidence_excerpt"] == "invoice run" and topic["evidence_source_type"] == "chunk"
    text = file_text(root, "content/a.md")
    assert text[topic["evidence_start"]:topic["evidence_end"]] == "invoice run"
    assert text.index("The monthly invoice run") < topic["evidence_start"]
    size, weight = (find(rows, fact_namespace="metric", fact_key=k)[0] for k in ("size", "weight"))
    assert (size["fact_value_norm"], size["evidence_excerpt"]) == ("1.5", "1.50")
    assert (weight["fact_value_norm"], weight["evidence_excerpt"]) == ("2.5", "2.50")
    reviewed = find(rows, fact_namespace="status")[0]
    assert reviewed["entity_type"] == "document" and reviewed["fact_value_norm"] == "2025-01-02"
    meta = find(rows, fact_namespace="meta")[0]
    assert (meta["fact_value_norm"], meta["evidence_excerpt"]) == ('{"a":1}', "{a: 1}")


# --- tenants and answers --------------------------------------------------------------


TENANTS = '[facts]\ntenants = { "content/acme" = "acme", "content/globex" = "globex" }\n'


def tenant_kb(root: Path, complete: str = "") -> Path:
    project(root, TENANTS + complete)
    fact = ("    facts:\n      - {namespace: domain, key: topic, value: invoicing}\n")
    write(root, "content/acme/a.md", doc("acme:a", "Acme bills with invoices monthly.",
                                         chunk_extra=fact))
    write(root, "content/acme/b.md", doc("acme:b", "Acme ships rockets."))
    write(root, "content/globex/g.md", doc("globex:g", "Secret payroll payroll payroll.",
                                           chunk_extra=fact))
    write(root, "content/other.md", doc("other:o", "Payroll in the open.", tenant="side",
                                        chunk_extra="    tags: [payroll]\n"))
    return root


def test_tenant_isolation_in_answers_show_and_fallback(tmp_path, capsys, cli):
    root = tenant_kb(tmp_path)
    build(root, capsys)
    rows = facts(root)
    assert {r["tenant_id"] for r in rows} == {"acme", "globex", "side"}
    assert all(e["source_path"].startswith("content/acme/") for r in rows
               if r["tenant_id"] == "acme" for e in r["evidence"])
    result = cli("facts", "ask", "--tenant", "acme", "--op", "list", "--namespace", "domain",
                 "--format", "json", cwd=root)
    assert result.code == 0, result.err
    data = result.json()
    assert data["answer"] == "yes" and data["count"] == 1
    assert [f["entity_id"] for f in data["facts"]] == ["acme:a"]
    # The fallback reads only acme's chunks, though globex's match the query better.
    data = cli("facts", "ask", "--tenant", "acme", "--op", "exists", "--value", "payroll",
               "--format", "json", cwd=root).json()
    assert data["answer"] == "unknown" and data["fallback"]["used"]
    assert data["fallback"]["scanned"] == 2 and data["fallback"]["hits"] == []
    data = cli("facts", "ask", "--tenant", "globex", "--op", "exists", "--value", "payroll",
               "--format", "json", cwd=root).json()
    assert [h["chunk_id"] for h in data["fallback"]["hits"]] == ["globex:g"]
    globex_fact = find(rows, tenant_id="globex", fact_namespace="domain")[0]["fact_id"]
    shown = cli("facts", "show", globex_fact, "--tenant", "acme", cwd=root)
    assert shown.code == 1 and "no fact" in shown.err
    shown = cli("facts", "show", globex_fact, "--tenant", "globex", "--format", "json", cwd=root)
    assert shown.code == 0 and shown.json()["evidence"][0]["path"] == "content/globex/g.md"
    listed = cli("facts", "list", "--tenant", "side", "--format", "json", cwd=root).json()
    assert listed["total"] and all(f["entity_id"] in ("content/other.md", "other:o")
                                   for f in listed["facts"])
    missing = cli("facts", "ask", "--tenant", "nobody", "--op", "exists", cwd=root)
    assert missing.code == 1 and "no sources" in missing.err


def test_three_valued_answers(tmp_path, capsys):
    complete = 'complete = { chunk = ["domain/topic"] }\n'
    root = tenant_kb(tmp_path, complete)
    build(root, capsys)
    config = find_project(root)
    store = Store.load(root / "build", config)
    version = store.extract_version

    def answer(**query):
        return ask(store, config.build, "acme", query.pop("op", "exists"),
                   current_version=version, **query)

    yes = answer(entity_type="chunk", namespace="domain", key="topic", value=" INVOICING ")
    assert yes["answer"] == "yes" and yes["facts"][0]["evidence"][0]["excerpt"] == "invoicing"
    assert yes["count_exact"]  # complete key: the count is exact
    no = answer(entity_type="chunk", namespace="domain", key="topic", value="rockets")
    assert no["answer"] == "no" and not no["fallback"]["used"]
    count = answer(op="count", entity_type="chunk", namespace="domain", key="topic",
                   value="rockets")
    assert (count["answer"], count["count"], count["count_exact"]) == ("no", 0, True)
    # Not declared complete: an empty answer is unknown, never no.
    unknown = answer(entity_type="chunk", namespace="domain", key="budget", value="rockets")
    assert unknown["answer"] == "unknown" and unknown["fallback"]["used"]
    assert [h["chunk_id"] for h in unknown["fallback"]["hits"]] == ["acme:b"]
    assert answer(namespace="domain", key="topic", value="rockets")["answer"] == "unknown"
    # Below the confidence threshold: unknown, and the threshold is reported.
    low = answer(entity_type="chunk", namespace="theme", key="tag", value="x",
                 min_confidence=0.99)
    assert low["answer"] == "unknown" and low["min_confidence"] == 0.99
    below = answer(entity_type="chunk", namespace="domain", key="topic", value="invoicing",
                   min_confidence=1.0)
    assert below["answer"] == "yes"
    # Sources extracted by another extractor version: no "no" either.
    stale = ask(store, config.build, "acme", "exists", "chunk", "domain", "topic", "rockets",
                current_version="declared@2+derived@1")
    assert stale["answer"] == "unknown" and stale["completeness"]["sources_behind"]


def test_fallback_is_bounded_and_reported(tmp_path, capsys, cli):
    root = project(tmp_path, "[facts]\nfallback_limit = 2\nfallback_scan = 3\n")
    for number in range(6):
        write(root, f"content/n{number}.md", doc(f"note:n{number}", f"ledger entry {number}"))
    build(root, capsys)
    data = cli("facts", "ask", "--tenant", "default", "--op", "exists", "--value", "ledger",
               "--format", "json", cwd=root).json()
    fallback = data["fallback"]
    assert data["answer"] == "unknown"
    assert (fallback["scanned"], fallback["scan_cap"], fallback["truncated"]) == (3, 3, True)
    assert len(fallback["hits"]) == 2 and fallback["limit"] == 2
    text = cli("facts", "ask", "--tenant", "default", "--op", "exists", "--value", "ledger",
               cwd=root).out
    assert "answer: unknown" in text and "fallback (lexical, not facts)" in text


def install_extractor(tmp_path: Path, monkeypatch, module: str, extract_body: str,
                      imports: str = "") -> None:
    """A plugin extractor module `module` (factory `make`) whose extract(self, view) runs
    extract_body, importable for this test only."""
    body = textwrap.indent(textwrap.dedent(extract_body).strip("\n"), " " * 8)
    write(tmp_path / "plugins", f"{module}.py",
          f"{imports}\n\nclass Extractor:\n    name, version = {module!r}, \"1\"\n\n"
          f"    def extract(self, view):\n{body}\n\n\ndef make():\n    return Extractor()\n")
    monkeypatch.syspath_prepend(str(tmp_path / "plugins"))
    sys.modules.pop(module, None)


def test_a_failing_extractor_fails_its_run_and_keeps_previous_facts(tmp_path, capsys,
                                                                    monkeypatch):
    install_extractor(tmp_path, monkeypatch, "boom_extractor", """
        if "BOOM" in view.text:
            raise RuntimeError("refusing this source")
        return []
    """)
    root = project(tmp_path / "kb", '[facts]\nextractors = ["boom_extractor:make"]\n')
    write(root, "content/a.md", doc("note:a", "Quiet text."))
    build(root, capsys)
    before = find(facts(root), entity_id="note:a", fact_namespace="theme") + find(
        facts(root), entity_id="content/a.md")
    write(root, "content/a.md", doc("note:a", "Now BOOM."))
    out = build(root, capsys)
    assert "could not be extracted" in out
    failed = [r for r in runs(root) if r["build_seq"] == 2][0]
    assert failed["status"] == "failed" and "refusing this source" in failed["failure_reason"]
    assert failed["extract_version"] == "declared@1+derived@2+boom_extractor@1"
    assert all(r["is_active"] for r in facts(root))  # previous facts kept
    assert len(facts(root)) >= len(before)
    build(root, capsys, "forget", "facts")
    build(root, capsys)
    assert [r["trigger"] for r in runs(root) if r["build_seq"] == 3] == ["manual_retry"]


# --- bad input ------------------------------------------------------------------------


def test_bad_facts_and_tenants_are_located_and_stop_the_build(tmp_path, capsys, cli):
    root = project(tmp_path)
    write(root, "content/bad.md", """
        ---
        tenant: "acme corp"
        facts:
          - namespace: domain
            key: topic
            value: x
            confidence: 1.5
          - just a string
          - {namespace: d, key: k, value: v, value_type: colour}
        chunks:
          - id: note:bad
            context: "bad facts"
            facts: {namespace: d}
        ---
        <Chunk id="note:bad">
        text
        </Chunk>
    """)
    result = cli("validate", "--format", "json", cwd=root)
    assert result.code == 1
    found = {(d["code"], d["line"]) for d in result.json()["diagnostics"]}
    assert {("CTX709", 2), ("CTX704", 7), ("CTX701", 8), ("CTX705", 9), ("CTX701", 13)} <= found
    assert "content/bad.md:7:17: error CTX704" in build_fails(root, capsys)


def test_cli_refuses_missing_tenant_bad_tenant_and_stale_builds(tmp_path, capsys):
    root = project(tmp_path)
    write(root, "content/a.md", doc("note:a", "Some text."))
    none = run_process("facts", "ask", "--op", "exists", cwd=root)
    assert none.returncode == 2 and "required: --tenant" in none.stderr
    bad = run_process("facts", "ask", "--tenant", "ac me", "--op", "exists", cwd=root)
    assert bad.returncode == 2 and "not a tenant id" in bad.stderr
    unbuilt = run_process("facts", "list", "--tenant", "default", cwd=root)
    assert unbuilt.returncode == 2 and "run `doit`" in unbuilt.stderr
    build(root, capsys)
    ok = run_process("facts", "list", "--tenant", "default", cwd=root)
    assert ok.returncode == 0 and "fact(s) in tenant default" in ok.stdout
    write(root, "content/a.md", doc("note:a", "Edited text."))
    stale = run_process("facts", "list", "--tenant", "default", cwd=root)
    assert stale.returncode == 2 and "older than the sources" in stale.stderr
    confidence = run_process("facts", "ask", "--tenant", "default", "--op", "exists",
                             "--min-confidence", "2", cwd=root)
    assert confidence.returncode == 2 and "--min-confidence" in confidence.stderr
    for result in (none, bad, unbuilt, stale, confidence):
        assert "Traceback" not in result.stderr


def test_bad_tenant_settings_are_clear_errors(tmp_path):
    root = project(tmp_path, '[facts]\ntenants = { "content/x" = "has space" }\n')
    result = run_process("facts", "list", "--tenant", "default", cwd=root)
    assert result.returncode == 2 and "is not a tenant id" in result.stderr
    assert "Traceback" not in result.stderr


def test_store_refuses_artifacts_that_do_not_match_the_manifest(tmp_path, capsys):
    root = project(tmp_path)
    write(root, "content/a.md", doc("note:a", "Some text."))
    build(root, capsys)
    shutil.copy(root / RUNS, root / FACTS)
    with pytest.raises(FactsError, match="run `doit`"):
        Store.load(root / "build")


def test_the_readme_facts_example_is_what_the_example_kb_answers(tmp_path, capsys, cli):
    root = copy_example(tmp_path, "hash-16",
                        '[facts]\ncomplete = { document = ["domain/topic"] }\n')
    build(root, capsys)
    readme = (REPO / "README.md").read_text()
    block = readme.split("## Facts", 1)[1].split("```console\n", 1)[1].split("```", 1)[0]
    sessions = block.split("$ ")[1:]
    assert len(sessions) == 2
    for session in sessions:
        lines = session.split("\n")
        command = lines[0].rstrip("\\").strip()
        output = lines[1:]
        while output and output[0].startswith("    "):  # continuation lines
            command += " " + output.pop(0).strip()
        head, _, rest = command.partition('"')  # the one quoted value, if any
        quoted, _, tail = rest.partition('"')
        args = head.split()[1:] + ([quoted] if rest else []) + tail.split()
        result = cli(*args, cwd=root)
        assert result.code == 0, result.err
        assert result.out.rstrip("\n") == "\n".join(output).rstrip("\n")


def test_moving_a_folder_to_another_tenant_reruns_facts_only(tmp_path, capsys):
    root = project(tmp_path)
    write(root, "content/team/a.md", doc("note:a", "Text.", chunk_extra="    tags: [alpha]\n"))
    build(root, capsys)
    before = find(facts(root), fact_namespace="theme", entity_type="chunk")[0]
    assert before["tenant_id"] == "default"
    project(root, '[facts]\ntenants = { "content/team" = "team" }\n')
    out = build(root, capsys)
    assert {line.split()[-1] for line in out.splitlines() if line.startswith(".  ")} == {
        "validate", "facts", "manifest"}
    rows = facts(root)
    assert not find(rows, fact_id=before["fact_id"])[0]["is_active"]
    moved = find(rows, fact_namespace="theme", entity_type="chunk", is_active=True)[0]
    assert moved["tenant_id"] == "team" and moved["fact_id"] != before["fact_id"]
    assert [r["trigger"] for r in runs(root) if r["build_seq"] == 2] == ["update"]


def test_a_damaged_ledger_stops_the_build_with_a_clear_message(tmp_path, capsys):
    root = project(tmp_path)
    write(root, "content/a.md", doc("note:a", "Text."))
    build(root, capsys)
    (root / ".ctxfst/facts/semantic_facts.parquet").write_bytes(b"not parquet")
    write(root, "content/a.md", doc("note:a", "Edited."))
    code = run_build(root, [])
    out = capsys.readouterr()
    text = out.out + out.err
    assert code != 0 and "unreadable facts ledger" in text and "Traceback" not in text
    assert "remove the folder" in text


def test_a_new_extractor_version_backfills_every_source(tmp_path, capsys, monkeypatch):
    module = tmp_path / "plugins" / "tagger.py"

    def plugin(version: str) -> None:
        write(module.parent, module.name, f"""
            from ctxfst.facts.extractors import Rule
            from ctxfst.facts.model import Candidate

            RULE = Rule("tagger.length", "{version}", 0.5)

            class Tagger:
                name, version = "tagger", "{version}"

                def extract(self, view):
                    if view.kind == "document":
                        yield Candidate(view.tenant, "document", view.path, "size", "chars",
                                        "x", str(len(view.text)), "number",
                                        RULE.evidence("document", view.path, view.path, 0, 3,
                                                      view.text[:3], None))

            def make():
                return Tagger()
        """)
        sys.modules.pop("tagger", None)

    monkeypatch.syspath_prepend(str(module.parent))
    plugin("1")
    root = project(tmp_path / "kb", '[facts]\nextractors = ["tagger:make"]\n')
    write(root, "content/a.md", doc("note:a", "Text."))
    write(root, "content/b.md", doc("note:b", "More text."))
    build(root, capsys)
    assert len(find(facts(root), fact_namespace="size")) == 2
    plugin("2")
    out = build(root, capsys)
    assert ".  facts" in out
    assert [r["trigger"] for r in runs(root) if r["build_seq"] == 2] == ["backfill", "backfill"]
    assert {e["extract_version"] for r in find(facts(root), fact_namespace="size")
            for e in r["evidence"]} == {"2"}


def test_offsets_are_code_points_of_the_lf_text_even_with_bom_crlf_and_emoji(tmp_path, capsys):
    root = project(tmp_path)
    text = doc("note:e", "🎉 Ünïcode 😀 then the Xylophone, then 木琴.", entities=ENTITY_X.replace(
        "[xylo]", "[xylo, 木琴]"), chunk_extra="    tags: [Ünï]\n")
    write(root, "content/e.md", b"\xef\xbb\xbf" + text.replace("\n", "\r\n").encode("utf-8"))
    build(root, capsys)
    rows = facts(root)
    normalized = file_text(root, "content/e.md").lstrip("\ufeff")
    for row in rows:
        for evidence in row["evidence"]:
            assert normalized[evidence["start"]:evidence["end"]] == evidence["excerpt"]
    mention = find(rows, entity_id="note:e", fact_namespace="mention")[0]
    assert [e["excerpt"] for e in mention["evidence"]] == ["Xylophone"]  # the first mention
    assert find(rows, entity_id="note:e", fact_namespace="theme")[0]["fact_value_norm"] == "ünï"


@pytest.mark.parametrize("value,norm", [("1.50", "1.5"), (2, "2"), ("-0.0", "0"), ("1e3", "1000"),
                                        (0.1, "0.1"), ("1_000", "1000")])
def test_numbers_normalise_canonically(value, norm):
    from ctxfst.document.facts import canonical_number

    assert canonical_number(value) == norm and canonical_number(norm) == norm


@pytest.mark.parametrize("value,norm", [("2026-03-04", "2026-03-04"),
                                        ("2026-03-04T10:00:00+02:00", "2026-03-04T08:00:00Z"),
                                        ("2026-03-04T10:00:00Z", "2026-03-04T10:00:00Z")])
def test_dates_normalise_to_iso(value, norm):
    from ctxfst.document.facts import canonical_date

    assert canonical_date(value) == norm


def test_fact_ids_cannot_collide_through_separators():
    from ctxfst.facts.model import fact_id

    assert fact_id("t", "chunk", "a:b", "ns", "k", "v") != fact_id("t", "chunk", "a", "b:ns",
                                                                  "k", "v")
    assert fact_id("t", "chunk", "a\u001fb", "ns", "k", "v") != fact_id("t", "chunk", "a",
                                                                       "b\u001fns", "k", "v")


def test_changed_facts_are_spliced_into_the_previous_order():
    """The facts stage places changed rows among the untouched previous ones by binary
    search; the result is what sorting everything would give, for any mix."""
    import random

    import pyarrow as pa

    from ctxfst.facts.build import merge_sorted
    from ctxfst.facts.model import SORT_COLUMNS as _ORDER

    def table(rows):
        return pa.table({**{name: pa.array([r[i] for r in rows], pa.string())
                            for i, name in enumerate(_ORDER)},
                         "payload": pa.array([r[-1] for r in rows], pa.int64())})

    rng = random.Random(7)
    words = ["a", "b", "é", "中", "zz", "A"]
    for case in range(120):
        universe = sorted({tuple(rng.choice(words) for _ in _ORDER)
                           for _ in range(rng.choice([40, 3000]))})
        previous = [(*key, i) for i, key in enumerate(universe) if rng.random() < 0.7]
        touched = sorted(rng.sample(range(len(previous)), rng.randint(0, len(previous))))
        kept = {tuple(previous[i][:-1]) for i in range(len(previous)) if i not in touched}
        # changed rows: the touched facts (some dropped) and new keys, never a kept key
        share = rng.choice([0.5, 0.01])  # many changed rows, or few
        changed = sorted({(*key, 1000 + case) for key in universe
                          if key not in kept and rng.random() < share})
        expected = sorted([row for i, row in enumerate(previous) if i not in touched] + changed)
        # (a few changes are placed by binary search, many by one sort: both kinds drawn)
        merged = merge_sorted(table(previous) if previous else None, touched, table(changed))
        assert [tuple(r.values()) for r in merged.to_pylist()] == expected, case


def test_a_first_builds_columns_equal_the_merge_of_fact_objects():
    """A first build merges its candidates as Arrow columns (facts/columns.py); for any
    mix of sources, repeats, ties and dates, cut into any streams, the file and each run's
    count of facts are those the merge of Fact objects (Merge.apply over no facts) gives,
    and so is the evidence file."""
    import random

    from ctxfst.facts.build import Merge, Source, _run_id
    from ctxfst.facts.columns import candidate_batch, fresh_facts
    from ctxfst.facts.model import Candidate, Evidence, evidence_table, rows_table

    rng = random.Random(11)
    words = ["a", "B", "é", "中文", "zz", "a b"]
    for case in range(60):
        sources = []
        for number in range(rng.randint(0, 6)):
            path = f"content/{rng.choice('xyz')}{number}.md"
            found = []
            for _ in range(rng.choice([0, 3, 40])):
                excerpt = rng.choice(words)
                evidence = Evidence(rng.choice(["chunk", "document"]), rng.choice(words),
                                    rng.choice([path, "content/p.md"]), rng.randint(0, 3),
                                    rng.randint(3, 6), excerpt, rng.choice(["r1", "r2"]),
                                    "1", rng.choice([1.0, 0.9, 0.6]),
                                    rng.choice([None, "", "2024-01-02", "2025-03-04"]))
                candidate = Candidate("t", rng.choice(["chunk", "entity"]), rng.choice(words),
                                      "ns", rng.choice(["k", "j"]), excerpt,
                                      rng.choice(words), rng.choice(["text", "keyword"]),
                                      evidence)
                found.append((candidate.fact_id, candidate))
                if rng.random() < 0.2:
                    found.append(found[rng.randrange(len(found))])  # a span given twice
            sources.append((Source(path, "document", Path(path), lambda: None, "t", []),
                            found))
        seq, version = rng.randint(1, 3), "v"
        merge = Merge({}, [], [(s, "create", found, {}) for s, found in sources], seq,
                      version, [])
        merged = {}
        _, rows = merge.apply(merged)
        expected = facts_bytes(rows_table(list(rows.values()), seq, version))
        expected_evidence = evidence_table(list(merged.values()), seq, version)
        # (in streams of a few sources each, as workers send them: each with its own
        # dictionaries, which the merge combines)
        cut = sorted(rng.sample(range(len(sources) + 1), rng.randint(0, len(sources))))
        streams, supported = [], []
        for begin, end in zip([0, *cut], [*cut, len(sources)], strict=True):
            stream, counts = candidate_batch([(s.path, _run_id(seq, s.path), found)
                                              for s, found in sources[begin:end]])
            streams.append(stream)
            supported += counts
        made, made_evidence = fresh_facts(streams, seq, version)
        assert facts_bytes(made) == expected, case
        assert made_evidence.equals(expected_evidence, check_metadata=True), case
        assert supported == [run["facts_written"] for run in merge.new_runs], case


def test_a_merge_of_cut_rows_equals_the_merge_of_all_their_evidence(monkeypatch):
    """A merge holds only a window of each changed fact's evidence as Python objects (the
    changed sources' entries, the declared ones, the first few of the rest, with their
    ties) and leaves the rest in the evidence file; for any mix of sources, ties,
    declared entries, re-extractions, deletions, invalidations and reactivations, the
    rows, evidence and delta are those of merging every entry as Python objects."""
    import copy
    import random

    from ctxfst.facts import model as facts_model
    from ctxfst.facts.build import (
        Merge,
        Source,
        _merged_evidence,
        _source_facts,
        _windowed,
        merge_sorted,
    )
    from ctxfst.facts.model import Candidate, Evidence, evidence_table, rows_table

    rng = random.Random(23)
    words = ["a", "b", "中"]

    def candidates(path: str) -> list:
        found = []
        for _ in range(rng.choice([0, 2, 12])):
            start = rng.randint(0, 2)
            evidence = Evidence(rng.choice(["chunk", "document"]), rng.choice(words),
                                rng.choice([path, "content/p.md"]), start, start + 1,
                                rng.choice(words),
                                rng.choice(["r1", "r2", facts_model.DECLARED]), "1",
                                rng.choice([1.0, 0.9]),
                                rng.choice([None, "2024-01-02", "2025-03-04"]))
            candidate = Candidate("t", "entity", rng.choice(words), "ns", "k",
                                  evidence.excerpt, rng.choice(words), "keyword", evidence)
            found.append((candidate.fact_id, candidate))
        return found

    def source(path: str) -> Source:
        return Source(path, "document", Path(path), lambda: None, "t", [])

    latest = {f"content/{n}.md": {"tenant_id": "t", "entity_type": "document",
                                  "entity_id": f"content/{n}.md"} for n in range(8)}
    cases = 0
    for case in range(150):
        monkeypatch.setattr(facts_model, "EVIDENCE_KEPT", rng.choice([1, 2, 3]))
        paths = sorted(latest)
        first = Merge({}, [], [(source(path), "create", candidates(path), {})
                               for path in paths], 1, "v", [])
        built: dict = {}
        first.apply(built)
        if not built:
            continue
        # a second build over the first one's files, and then a third over the second's:
        # invalidated facts come back, entries beyond the cut replace removed ones
        facts, evidence = rows_table([f.as_row() for f in sorted(
            built.values(), key=facts_model.fact_sort_key)], 1, "v"), \
            evidence_table(list(built.values()), 1, "v")
        for seq in (2, 3):
            deleted = sorted(rng.sample(paths, rng.randint(0, 3)))
            extracted = [(source(path), "update", candidates(path), {}) for path in
                         rng.sample([p for p in paths if p not in deleted], rng.randint(0, 3))]
            whole = copy.deepcopy(built)
            expected_delta, expected_rows = Merge(latest, deleted, copy.deepcopy(extracted),
                                                  seq, "v", []).apply(whole)
            changed = set(deleted) | {item[0].path for item in extracted}
            window = _windowed(facts, evidence, _source_facts(evidence, changed) | {
                fid for _, _, found, _ in extracted for fid, _ in found}, changed)
            delta, rows = Merge(latest, deleted, extracted, seq, "v", []).apply(window.facts)
            merged = merge_sorted(facts, window.rows,
                                  rows_table(list(rows.values()), seq, "v"))
            merged_evidence = _merged_evidence(evidence, window, merged, seq, "v")
            assert merged.to_pylist() == list(expected_rows.values()), (case, seq)
            assert merged_evidence.equals(evidence_table(list(whole.values()), seq, "v")), \
                (case, seq)
            assert delta == expected_delta, (case, seq)
            cases += any(f.hidden for f in window.facts.values())
            built, facts, evidence = whole, merged, merged_evidence
    assert cases > 20  # windows that left entries in the file


def test_a_window_shows_every_entry_of_a_run_of_ties_after_a_shown_one(monkeypatch):
    """A fact's row keeps its first entries in sort_key order; entries whose keys tie
    the last kept one keep their order only together, so the window holds the whole run
    of ties after it, however long, and leaves the entries after the run in the file."""
    from ctxfst.facts import model as facts_model
    from ctxfst.facts.build import _windowed
    from ctxfst.facts.model import Evidence, Fact, evidence_table, rows_table

    monkeypatch.setattr(facts_model, "EVIDENCE_KEPT", 2)

    def entry(path: str, start: int, excerpt: str) -> Evidence:
        return Evidence("document", path, path, start, start + 1, excerpt, "r", "1", 1.0,
                        None, path, "run-1", excerpt)

    fact = Fact("f1", "t", "entity", "e", "ns", "k", "v", "keyword",
                [entry("content/a.md", 0, "a"), *(entry("content/b.md", 3, word)
                                                  for word in ("b", "c", "d", "e")),
                 entry("content/c.md", 0, "f")],
                created_run_id="run-1", created_build_seq=1, updated_build_seq=1)
    other = Fact("f2", "t", "entity", "e", "ns", "k2", "v", "keyword",
                 [entry("content/a.md", 1, "g")], created_run_id="run-1",
                 created_build_seq=1, updated_build_seq=1)
    facts = rows_table([f.as_row() for f in (fact, other)], 1, "v")
    evidence = evidence_table([fact, other], 1, "v")
    window = _windowed(facts, evidence, {"f1"}, set())
    held = window.facts["f1"]
    assert [e.excerpt for e in held.evidence] == ["a", "b", "c", "d", "e"]
    assert held.hidden == 1 and list(window.hidden_rows) == [5]
    assert set(window.facts) == {"f1"} and window.mine.tolist() == [True] * 6 + [False]


def test_candidates_sort_as_their_strings_whatever_their_dictionaries_hold():
    """The merge sorts the candidates by their dictionaries' indices once each dictionary
    is put in order: with values repeated in a dictionary, or a null among them (another
    Arrow could combine streams so), equal strings still sort together, as the strings
    themselves do."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from ctxfst.facts.columns import _in_order, _plain, _sortable

    indices = pa.array([0, 2, 1, 3, None, 2, 0, 4], pa.int32())
    for dictionary in (["b", "a", "b", "é", "a"], ["b", None, "a", "é", "b"]):
        column = pa.DictionaryArray.from_arrays(indices, pa.array(dictionary, pa.string()))
        table = pa.table({"key": column, "tie": pa.array(range(len(indices)))})
        plain = pa.table({"key": _plain(column), "tie": table.column("tie")})
        ordered = pa.table({"key": _in_order(column), "tie": table.column("tie")})
        keys = [("key", "ascending"), ("tie", "descending")]
        assert pc.sort_indices(_sortable(ordered), sort_keys=keys).to_pylist() == \
            pc.sort_indices(plain, sort_keys=keys).to_pylist(), dictionary
        assert _plain(ordered.column("key")).to_pylist() == plain.column("key").to_pylist()


def test_facts_extracted_in_workers_equal_a_serial_extraction(tmp_path, capsys, monkeypatch):
    """A first build extracts its sources in forked workers; the facts artifacts are the
    bytes a one-process extraction gives."""
    from ctxfst.mock import generate

    def facts_of(root: Path) -> dict[str, bytes]:
        generate(root, 240, seed=3)
        project(root)
        build(root, capsys)
        return {name: (root / name).read_bytes() for name in (FACTS, RUNS, DELTA)}

    parallel = facts_of(tmp_path / "parallel")
    assert pq.read_metadata(tmp_path / "parallel" / FACTS).num_rows > 1000
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0})  # one core: in-process
    assert facts_of(tmp_path / "serial") == parallel


def test_a_worker_that_dies_is_an_error_not_a_hang():
    """forked_map raises WorkerDied when a worker process ends without an answer (the
    out-of-memory killer, a crashing plugin), where a multiprocessing pool would wait."""
    import os

    from ctxfst.parallel import WorkerDied, forked_map

    def work(item: int) -> int:
        if item == 250:
            os._exit(3)
        return item * 2

    assert forked_map(lambda item: item * 2, list(range(300))) == [i * 2 for i in range(300)]
    with pytest.raises(WorkerDied):
        forked_map(work, list(range(300)))


def test_a_ledger_out_of_order_is_refused_not_merged(tmp_path, capsys):
    """A ledger this toolchain did not write (its sha256 is not the one recorded in the
    unit store) is checked for the row order the merge relies on."""
    root = copy_example(tmp_path / "kb", "hash-16")
    build(root, capsys)
    ledger = root / ".ctxfst/facts" / "semantic_facts.parquet"
    table = pq.read_table(ledger)
    pq.write_table(table.take(list(range(table.num_rows))[::-1]), ledger)
    edited = root / "content/backend-frameworks.ctxfst.md"
    edited.write_text(edited.read_text().replace("Goroutines made", "Goroutines kept"))
    said = build_fails(root, capsys)
    assert "unreadable facts ledger" in said and "out of their order" in said, said


@pytest.mark.parametrize("damage, said", [
    ("reversed", "semantic_fact_evidence.parquet: a fact's evidence out of its order"),
    ("dropped", "semantic_fact_evidence.parquet: not the evidence the facts count"),
    ("moved", "semantic_fact_evidence.parquet: evidence of other facts, or out of their "
              "order"),
    ("emptied", "semantic_fact_evidence.parquet: no value for source_path in some rows"),
])
def test_a_damaged_evidence_file_is_refused_not_merged(tmp_path, capsys, damage, said):
    """An evidence file this toolchain did not write is checked for what the merge
    relies on: each fact's counted entries, in the facts' order and each fact's in its
    own, with the values the merge reads; a damaged one stops the build clearly."""
    import pyarrow as pa

    root = xylophone_twins(tmp_path, capsys)[0]
    ledger = root / ".ctxfst/facts/semantic_fact_evidence.parquet"
    rows = pq.read_table(ledger).to_pylist()
    counts = collections.Counter(row["fact_id"] for row in rows)
    heavy = max(counts, key=counts.__getitem__)  # the type fact: eleven entries
    first = next(i for i, row in enumerate(rows) if row["fact_id"] == heavy)
    if damage == "reversed":  # a fact's entries in the wrong order
        rows[first:first + counts[heavy]] = rows[first:first + counts[heavy]][::-1]
    elif damage == "dropped":
        del rows[first]
    elif damage == "moved":  # the first fact's entry after the last fact's
        rows.append(rows.pop(0))
    else:
        rows[first]["source_path"] = None
    pq.write_table(pa.Table.from_pylist(rows, schema=pq.read_schema(ledger)), ledger)
    (root / XYLOPHONE_DOCUMENTS[0]).unlink()
    out = build_fails(root, capsys)
    assert "unreadable facts ledger" in out and said in out, out


def _memo(root: Path, change) -> None:
    """Change the facts memo in the project's unit store (a damaged or older one)."""
    from ctxfst.pipeline.units import UnitStore

    store = UnitStore(find_project(root).unit_store)
    try:
        change(store)
        store.save()
    finally:
        store.close()


def _source_digests(root: Path) -> dict[str, dict]:
    import sqlite3

    db = sqlite3.connect(root / ".ctxfst/cache/units.sqlite")
    try:
        return {key: json.loads(value) for key, value in db.execute(
            "SELECT key, value FROM units WHERE key >= 'facts:' AND key < 'facts;'")}
    finally:
        db.close()


def _same_as_a_whole_read(root: Path, tmp_path: Path, capsys, name: str
                          ) -> tuple[dict, dict, dict]:
    """Build root, a copy of it whose memo is lost (its unit store removed: the memo is
    made again from the ledger's files, a row group at a time) and a copy whose ledger
    is also cut in other row groups (read whole): the same facts artifacts, and every
    run recorded once. The three facts stage results."""
    copies = {kind: tmp_path / f"{kind}-{name}" for kind in ("recovered", "whole")}
    for kind, copy in copies.items():
        shutil.copytree(root, copy, symlinks=True)
        shutil.rmtree(copy / ".ctxfst/cache")
        if kind == "whole":
            for file in (".ctxfst/facts/semantic_facts.parquet",
                         ".ctxfst/facts/semantic_fact_evidence.parquet"):
                table = pq.read_table(copy / file)  # (one row group: not ctxfst's cut)
                (copy / file).unlink()
                pq.write_table(table, copy / file, row_group_size=1 << 24)
    build(root, capsys)
    for copy in copies.values():
        build(copy, capsys)
        for path in (FACTS, EVIDENCE, RUNS, DELTA):
            assert (root / path).read_bytes() == (copy / path).read_bytes(), (name, path)
        # and each source's evidence digests, made anew from the ledger for the sources
        # the build changed, are the ones the memo carried along
        carried, made = _source_digests(root), _source_digests(copy)
        assert made.items() <= carried.items(), name
    ids = [r["run_id"] for r in runs(root)]
    assert len(ids) == len(set(ids)), name
    return tuple({s["stage"]: s for s in json.loads(
        (kb / "build/run_results.json").read_text())["stages"]}["facts"]
        for kb in (root, *copies.values()))


def test_an_edit_reads_only_its_row_groups_and_writes_what_a_whole_read_writes(
        tmp_path, capsys, monkeypatch):
    """With the memo of the ledger it wrote, the facts stage reads and encodes only the
    row groups of the facts an edit changes; a copy of the same project whose memo is
    lost does the same with the memo made again from the ledger, and one whose ledger
    is cut otherwise reads it whole: the same bytes."""
    from ctxfst.facts import build as facts_build
    from ctxfst.mock import mock_document

    monkeypatch.setattr(facts_build, "FACT_GROUP_ROWS", 8)  # many groups of a few facts
    monkeypatch.setattr(facts_build, "_DIGEST_SLICE", 5)  # a whole read's digests in slices
    monkeypatch.setattr(facts_build, "RUN_GROUP_ROWS", 3)  # runs appended to their last group
    root = copy_example(tmp_path / "kb")
    build(root, capsys)
    always = len(list((root / "skills").glob("*/SKILL.md"))) + sum(
        "content_path:" in path.read_text() for path in (root / "content").rglob("*.md"))
    target = next((root / "content").rglob("*.md"))
    original = target.read_text()
    body = original.index("<Chunk id=")
    body = original.index("\n", body) + 1
    steps = [
        ("edit", lambda: target.write_text(original[:body] + "Also see the index. "
                                           + original[body:])),
        ("add", lambda: write(root, "content/extra/new.md", mock_document(0, 11))),
        ("delete", lambda: (root / "content/extra/new.md").unlink()),
        ("restore", lambda: target.write_text(original)),
    ]
    for name, change in steps:
        run_groups = pq.ParquetFile(root / RUNS).metadata.num_row_groups
        change()
        stage, recovered, whole = _same_as_a_whole_read(root, tmp_path, capsys, name)
        facts(root)  # and the spliced file is the bytes of writing its rows at once
        assert whole["fact_groups_copied"] == 0, name  # read whole, written whole
        # the sources compared with their last runs: those the edit made anew, those
        # with content_path passages (read every build) and the skills, where the last
        # run was on the last validation's units (not in the copies: their caches are
        # new); all, where the names of the entities change (the added document's)
        assert stage["sources_compared"] == (
            stage["sources"] if name in ("add", "delete") else 1 + always), name
        assert whole["sources_compared"] == whole["sources"] == stage["sources"], name
        assert 0 < stage["fact_groups_copied"] < stage["fact_groups"], name
        assert recovered["fact_groups_copied"] == stage["fact_groups_copied"], name
        # the runs: all but the last group copied, the same bytes as written whole
        assert whole["run_groups_copied"] == 0 and run_groups > 2, name
        assert stage["run_groups_copied"] == run_groups - 1, name
        assert recovered["run_groups_copied"] == run_groups - 1, name


_EDIT_AND_SAY_IMPORTS = """
import json
import sys
from pathlib import Path
from ctxfst.facts import build as facts_build
from ctxfst.pipeline import stages
from ctxfst.pipeline.runner import run_build
root, said = Path(sys.argv[1]), Path(sys.argv[2])
facts_build.FACT_GROUP_ROWS = 8  # (as the first build's: groups to copy)
watched = ("numpy.ma", "pyarrow.acero", "pyarrow.dataset")
real = stages.stage_facts

def stage_facts(run):
    before = {name for name in watched if name in sys.modules}
    real(run)
    after = {name for name in watched if name in sys.modules}
    said.write_text(json.dumps([sorted(before), sorted(after - before)]))

stages.stage_facts = stage_facts
sys.exit(run_build(root, []))
"""


def test_an_edits_facts_stage_imports_no_mask_or_query_engine_modules(tmp_path, capsys,
                                                                     monkeypatch):
    """pyarrow imports numpy.ma (some 0.04 s) the first time it is given a numpy array
    (to look for a mask), and Arrow's query engine (acero) for a group_by; an edit's
    facts stage, the last to end in an edit's build, makes its Arrow arrays from numpy
    buffers and groups in Python, so it pays for neither."""
    from ctxfst.facts import build as facts_build

    monkeypatch.setattr(facts_build, "FACT_GROUP_ROWS", 8)  # many groups of a few facts
    root = copy_example(tmp_path / "kb")
    build(root, capsys)
    target = next((root / "content").rglob("*.md"))
    text = target.read_text()
    body = text.index("\n", text.index("<Chunk id=")) + 1
    target.write_text(text[:body] + "Also see the index. " + text[body:])
    said = tmp_path / "said.txt"
    done = subprocess.run([sys.executable, "-c", _EDIT_AND_SAY_IMPORTS, str(root), str(said)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    before, imported = json.loads(said.read_text())
    assert before == [] and imported == [], (before, imported)
    stage = next(s for s in json.loads((root / "build/run_results.json").read_text())[
        "stages"] if s["stage"] == "facts")
    assert 0 < stage["fact_groups_copied"] < stage["fact_groups"], stage  # (merged by group)


def add_to_first_chunk(kb: Path, words: str) -> None:
    """Words put at the start of the first chunk of the first document (by path)."""
    target = sorted((kb / "content").rglob("*.md"))[0]
    text = target.read_text()
    body = text.index("\n", text.index("<Chunk id=")) + 1
    target.write_text(text[:body] + words + text[body:])


def assert_merged_by_group_as_without_memo(root: Path, lost: Path) -> None:
    """root's last facts stage merged by row group, and wrote the facts files the build
    of `lost` (a copy whose memo was removed: its ledger read again) wrote."""
    stage = next(s for s in json.loads((root / "build/run_results.json").read_text())[
        "stages"] if s["stage"] == "facts")
    assert 0 < stage["fact_groups_copied"] < stage["fact_groups"], stage
    for path in (FACTS, EVIDENCE, RUNS, DELTA):
        assert (root / path).read_bytes() == (lost / path).read_bytes(), path


def test_an_edit_stores_the_records_of_the_row_groups_it_encodes_and_moves_the_others(
        tmp_path, capsys, monkeypatch):
    """The memo keeps a record per row group of the ledger; an edit stores the records
    of the groups it encodes alone: a group it copies keeps its record, read back where
    the edit moved the group (an edit before it changed the file's length), and the
    records of groups gone are dropped. The next edit still merges by group, and writes
    the bytes a build whose memo was lost writes."""
    from ctxfst.facts import build as facts_build
    from ctxfst.facts.memo import GROUP, RECORD
    from ctxfst.pipeline.units import UnitStore

    monkeypatch.setattr(facts_build, "FACT_GROUP_ROWS", 8)  # many groups of a few facts
    root = copy_example(tmp_path / "kb")
    build(root, capsys)

    def stored(kb: Path) -> tuple[list[str], set[str], dict[str, int]]:
        """The memo's group keys, the group records in the store, and each one's start."""
        store = UnitStore(find_project(kb).unit_store)
        try:
            keys = store.value(RECORD)["groups"]
            return keys, store.keys(GROUP), {key: value["part"]["start"] for key, value in
                                             store.values([GROUP + k for k in keys]).items()}
        finally:
            store.close()

    def starts(kb: Path) -> list[int]:
        """Where each row group of the ledger's facts file begins now."""
        metadata = pq.ParquetFile(kb / ".ctxfst/facts/semantic_facts.parquet").metadata
        return [min(column.dictionary_page_offset or column.data_page_offset
                    for column in map(metadata.row_group(group).column,
                                      range(metadata.num_columns)))
                for group in range(metadata.num_row_groups)]

    first, records, _ = stored(root)
    assert records == {GROUP + key for key in first}
    add_to_first_chunk(root, "The index and the planner, again and again. ")
    build(root, capsys)
    second, records, recorded = stored(root)
    assert records == {GROUP + key for key in second}  # (those of groups gone: dropped)
    kept = [key for key in second if key in set(first)]
    assert 0 < len(kept) < len(second)
    moved = [key for key, start in zip(second, starts(root), strict=True)
             if key in kept and recorded[GROUP + key] != start]
    assert moved, "no copied row group moved: the test's edit must change an earlier one"
    lost = tmp_path / "memo-lost"
    shutil.copytree(root, lost, symlinks=True)
    shutil.rmtree(lost / ".ctxfst/cache")  # (the memo with it: the ledger is read again)
    for kb in (root, lost):
        add_to_first_chunk(kb, "Also see the index. ")
        build(kb, capsys)
    assert_merged_by_group_as_without_memo(root, lost)


def test_an_edits_facts_stage_reads_the_ledgers_row_groups_without_parsing_its_footers(
        tmp_path, capsys, monkeypatch):
    """The memo keeps the ledger files' footer fields but their row groups, so an edit
    reads the row groups it merges through a file of those groups alone: Arrow never
    parses either ledger file's own footer (12 MB at 100,000 documents), yet the edit
    merges by group and writes what a build whose memo was lost writes."""
    from ctxfst.artifacts import arrays
    from ctxfst.facts import build as facts_build

    monkeypatch.setattr(facts_build, "FACT_GROUP_ROWS", 8)  # many groups of a few facts
    root = copy_example(tmp_path / "kb")
    build(root, capsys)
    lost = tmp_path / "memo-lost"
    shutil.copytree(root, lost, symlinks=True)
    shutil.rmtree(lost / ".ctxfst/cache")  # (the memo with it: the ledger is read again)
    ledger = {len((root / ".ctxfst/facts" / name).read_bytes())
              for name in ("semantic_facts.parquet", "semantic_fact_evidence.parquet")}
    opened = tmp_path / "opened.txt"  # (the facts stage runs in a process of its own)
    real = arrays.ParquetParts.__init__

    def watched(self, data) -> None:
        with opened.open("a") as said:
            said.write(f"{len(data)}\n")
        real(self, data)

    monkeypatch.setattr(arrays.ParquetParts, "__init__", watched)
    for kb in (root, lost):
        add_to_first_chunk(kb, "Also see the index. ")
        build(kb, capsys)
        if kb == root:
            sizes = {int(line) for line in opened.read_text().split()}
    assert sizes and not sizes & ledger, (sizes, ledger)
    assert_merged_by_group_as_without_memo(root, lost)


def test_a_ledger_cut_in_other_row_groups_is_cut_again_a_few_groups_at_a_time(
        tmp_path, capsys, monkeypatch):
    """A ledger ctxfst encoded but cut in other row groups (an earlier toolchain's
    rule), with no memo that fits, is checked a row group at a time and cut again a few
    groups at a time, not read whole (100,000 documents' ledger read whole takes over
    16 GB); the build then merges by group and writes the bytes the build of an intact
    copy writes."""
    import numpy as np

    from ctxfst.artifacts.parquet import parquet_bytes
    from ctxfst.facts import build as facts_build

    monkeypatch.setattr(facts_build, "FACT_GROUP_ROWS", 8)  # many groups of a few facts
    root = copy_example(tmp_path / "kb")
    build(root, capsys)
    copy = tmp_path / "cut-otherwise"
    shutil.copytree(root, copy, symlinks=True)
    shutil.rmtree(copy / ".ctxfst/cache")  # (the memo with it)
    ledger = copy / ".ctxfst/facts"
    rows = pq.read_table(ledger / "semantic_facts.parquet")
    entries = pq.read_table(ledger / "semantic_fact_evidence.parquet")
    starts = list(range(0, rows.num_rows, 5))  # (groups of five facts: not the rule's)
    bounds = np.concatenate([[0], np.cumsum(rows.column("evidence_count").to_numpy())])
    for name, table, schema, cuts in (
            ("semantic_facts.parquet", rows, facts_schema(), starts),
            ("semantic_fact_evidence.parquet", entries, evidence_schema(),
             bounds[starts].tolist())):
        (ledger / name).write_bytes(parquet_bytes(table.cast(schema).replace_schema_metadata(
            table.schema.metadata), group_starts=cuts))
    for kb in (root, copy):
        add_to_first_chunk(kb, "Also see the index. ")  # (the same document in both)
        build(kb, capsys)
    for path in (FACTS, EVIDENCE, RUNS, DELTA):
        assert (root / path).read_bytes() == (copy / path).read_bytes(), path
    stage = next(s for s in json.loads((copy / "build/run_results.json").read_text())[
        "stages"] if s["stage"] == "facts")
    assert 0 < stage["fact_groups_copied"] < stage["fact_groups"], stage


def test_a_heavy_fact_is_a_row_group_of_its_own_and_an_add_encodes_only_those_it_changes(
        tmp_path, capsys, monkeypatch):
    """A fact with HEAVY_EVIDENCE or more evidence entries (an entity each document that
    uses it declares) is a row group of its own, so that an added document encodes again
    the heavy facts it changes and copies the others; the file is what a whole read
    writes."""
    from ctxfst.artifacts.parquet_splice import group_spans
    from ctxfst.facts import build as facts_build
    from ctxfst.mock import generate

    monkeypatch.setattr(facts_build, "HEAVY_EVIDENCE", 4)
    root = tmp_path / "kb"
    generate(root, 40, seed=3)
    write(root, "ctxfst.toml", 'content_dir = "content"\nskills_dir = "skills"\n'
                               'embedding_model = "hash-64"\n')
    build(root, capsys)

    def groups() -> list[tuple[bytes, list[str], int]]:
        """Each row group's bytes, fact ids and most evidence entries of a fact."""
        data = (root / FACTS).read_bytes()
        table = pq.read_table(root / FACTS, columns=["fact_id", "evidence_count"])
        found, at = [], 0
        for start, size, rows in group_spans(data):
            part = table.slice(at, rows)
            found.append((data[start:start + size], part.column("fact_id").to_pylist(),
                          max(part.column("evidence_count").to_pylist())))
            at += rows
        return found

    before = groups()
    heavy = [ids for _, ids, most in before if most >= 4]
    assert len(heavy) >= 10 and all(len(ids) == 1 for ids in heavy)
    assert any(len(ids) > 1 for _, ids, _ in before)  # the light facts share groups
    source = root / "content/000/notes-00007.ctxfst.md"  # a copy of it, with its own ids
    write(root, "content/added.ctxfst.md", source.read_text().replace("n00007", "nadded"))
    _same_as_a_whole_read(root, tmp_path, capsys, "add")
    facts(root)
    changed = {row["fact_id"] for name in ("added", "updated", "invalidated")
               for row in delta(root)[name]}
    kept = {data for data, _, _ in before}
    encoded = [(ids, most) for data, ids, most in groups() if data not in kept]
    assert encoded and all(set(ids) <= changed for ids, most in encoded if most >= 4)
    assert sum(1 for _, _, most in groups() if most >= 4) > sum(
        1 for _, most in encoded if most >= 4) > 0  # heavy facts copied, and changed
    # A heavy fact that loses evidence enough to be light again joins its neighbours.
    rows = facts(root)
    # (one whose evidence is an entry a source, after a light fact)
    lightest, before_it = min(((row, previous) for previous, row in itertools.pairwise(rows)
                               if row["evidence_count"] >= 4 > previous["evidence_count"]
                               and len({item["source_path"] for item in row["evidence"]})
                               == row["evidence_count"]),
                              key=lambda pair: (pair[0]["evidence_count"], pair[0]["fact_id"]))
    for item in lightest["evidence"][3:]:
        (root / item["source_path"]).unlink()
    _same_as_a_whole_read(root, tmp_path, capsys, "delete")
    after = {row["fact_id"]: row for row in facts(root)}
    assert after[lightest["fact_id"]]["evidence_count"] == 3
    assert any({lightest["fact_id"], before_it["fact_id"]} <= set(ids) for _, ids, _ in groups())
    assert len(next(ids for _, ids, _ in groups() if lightest["fact_id"] in ids)) > 1


def test_a_delete_finds_the_facts_of_the_document_by_their_subjects(tmp_path, capsys,
                                                                     monkeypatch):
    """A deleted document names its facts by id alone (its digests): they are looked for
    in the row groups of the subjects (tenant, entity type, entity id) its facts had,
    not in every fact id of the ledger; where that hint is missing or wrong, in every
    row group. The files are what a whole read writes either way."""
    from ctxfst.facts import build as facts_build
    from ctxfst.facts.memo import SUBJECTS
    from ctxfst.mock import generate

    monkeypatch.setattr(facts_build, "FACT_GROUP_ROWS", 8)  # many groups of a few facts
    root = tmp_path / "kb"
    generate(root, 40, seed=5)
    write(root, "ctxfst.toml", 'content_dir = "content"\nskills_dir = "skills"\n'
                               'embedding_model = "hash-64"\n')
    source = (root / "content/000/notes-00007.ctxfst.md").read_text()
    for copy in ("a", "b", "c"):  # (documents no other one depends on)
        write(root, f"content/{copy}.ctxfst.md", source.replace("n00007", f"n{copy}"))
    build(root, capsys)
    (root / "content/a.ctxfst.md").unlink()
    stage, _, _ = _same_as_a_whole_read(root, tmp_path, capsys, "delete")
    assert 0 < stage["fact_groups_searched"] < stage["fact_groups"] / 2, stage
    assert stage["facts_invalidated"] > 0
    gone = "content/b.ctxfst.md"
    _memo(root, lambda store: store.put(SUBJECTS + gone, [["t", "document", "elsewhere"]]))
    (root / gone).unlink()
    stage, _, _ = _same_as_a_whole_read(root, tmp_path, capsys, "stale")
    assert stage["fact_groups_searched"] > stage["fact_groups"], stage
    gone = "content/c.ctxfst.md"
    _memo(root, lambda store: store.remove(SUBJECTS + gone))  # (as an older build left it)
    (root / gone).unlink()
    stage, _, _ = _same_as_a_whole_read(root, tmp_path, capsys, "missing")
    assert stage["fact_groups_searched"] >= stage["fact_groups"], stage


def test_a_memo_that_does_not_fit_is_not_trusted(tmp_path, capsys, monkeypatch):
    """A memo of another encoding (an older pyarrow's files) is found out only after the
    merge: the ledger is read whole then, and the runs are not recorded twice. A failed
    source whose memo entry is damaged is not taken to support nothing."""
    from ctxfst.facts.memo import RECORD, SOURCE

    install_extractor(tmp_path, monkeypatch, "boom_memo_extractor", """
        if "BOOM" in view.text:
            raise RuntimeError("refusing this source")
        return []
    """)
    root = project(tmp_path / "kb", '[facts]\nextractors = ["boom_memo_extractor:make"]\n')
    write(root, "content/a.md", doc("note:a", "The xylo sits here.", entities=ENTITY_X))
    write(root, "content/b.md", doc("note:b", "A Xylophone concert.", entities=ENTITY_X))
    build(root, capsys)

    def other_encoding(store):
        record = store.value(RECORD)
        store.put(RECORD, {**record, "encoding": "0" * 64})

    _memo(root, other_encoding)
    write(root, "content/b.md", doc("note:b", "A Xylophone concert, again.",
                                    entities=ENTITY_X))
    _same_as_a_whole_read(root, tmp_path, capsys, "encoding")

    _memo(root, lambda store: store.put(SOURCE + "content/a.md", "damaged"))
    write(root, "content/a.md", doc("note:a", "BOOM: the xylo.", entities=ENTITY_X))
    _same_as_a_whole_read(root, tmp_path, capsys, "failed")
    (root / "content/a.md").unlink()
    _same_as_a_whole_read(root, tmp_path, capsys, "deleted")
    assert not [r for r in facts(root) if r["is_active"] and any(
        e["source_path"] == "content/a.md" for e in r["evidence"])]


def test_ledger_files_as_published_are_not_hashed_again_and_one_changed_in_place_is(
        tmp_path, capsys, monkeypatch):
    """The last publication recorded the ledger files' stamps (size, mtime, ctime,
    inode) with their sha256: the facts stage takes the memo's sha256 for them while they
    keep it, and hashes one written in place since (its mtime put back), even with the
    same bytes."""
    from ctxfst.facts import build as facts_build
    from ctxfst.pipeline import beside

    monkeypatch.setattr(beside.Beside, "may_fork", lambda self, waiters: False)  # (in line)
    root = copy_example(tmp_path / "kb")
    build(root, capsys)
    ledger = {name: root / ".ctxfst/facts" / name
              for name in ("semantic_facts.parquet", "semantic_fact_extraction_runs.parquet")}
    hashed = counted_sha256(monkeypatch, facts_build)
    target = next((root / "content").rglob("*.md"))
    for number in range(2):
        sizes = {path.stat().st_size for path in ledger.values()}
        if number:  # the same bytes, written in place, with the mtime put back
            for path in ledger.values():
                info, data = path.stat(), path.read_bytes()
                with open(path, "r+b") as handle:
                    handle.write(data)
                os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns))
        hashed.clear()
        target.write_text(target.read_text() + f"\nEdit {number}.\n")
        build(root, capsys)
        facts_stage = {s["stage"]: s for s in json.loads(
            (root / "build/run_results.json").read_text())["stages"]}["facts"]
        assert facts_stage["fact_groups_copied"] > 0  # the memo was used
        assert (sizes <= set(hashed)) == bool(number), (number, sizes, hashed)


def test_an_answer_says_how_much_more_evidence_it_does_not_show(tmp_path, capsys, cli):
    """An entity declared by five documents: its type fact cites each, an answer shows
    the best three and says that two more support it; `facts show` lists all five."""
    root = project(tmp_path)
    for name in "abcde":
        write(root, f"content/{name}.md", doc(f"note:{name}", "The xylophone rings.",
                                              entities=ENTITY_X))
    build(root, capsys)
    answer = cli("facts", "ask", "--tenant", "default", "--op", "exists", "--namespace",
                 "classification", "--key", "entity_type", "--value", "tool", cwd=root)
    assert answer.code == 0, answer.err
    lines = [line.strip() for line in answer.out.splitlines()]
    cited = lines.index(next(line for line in lines if line.startswith("evidence: ")))
    assert [line.split(":")[1].strip() for line in lines[cited:cited + 3]] == [
        f"content/{name}.md" for name in "abc"]
    assert lines[cited + 3] == "and 2 more"
    fact = find(facts(root), fact_key="entity_type")[0]["fact_id"]
    shown = cli("facts", "show", fact, "--tenant", "default", cwd=root)
    assert shown.code == 0 and "5 evidence:" in shown.out and "more" not in shown.out


def test_a_row_keeps_eight_entries_the_evidence_file_has_them_all(tmp_path, capsys, cli):
    """An entity declared by eleven documents: its type fact's row keeps the first eight
    entries (by source path) and counts eleven; the evidence file and `facts show` have
    all eleven. Deleting a document among the eight brings the ninth into the row. A
    fact the documents declare themselves keeps every entry in its row."""
    root = project(tmp_path)
    names = [f"content/{letter}.md" for letter in "abcdefghijk"]
    family = ("    facts:\n      - namespace: domain\n        key: family\n"
              "        value: percussion\n")
    for number, name in enumerate(names):
        write(root, name, doc(f"note:{number}", "The xylophone rings.",
                              entities=ENTITY_X + family))
    build(root, capsys)

    def type_fact() -> dict:
        return find(facts(root), fact_key="entity_type")[0]

    def evidence_file() -> dict[str, list[dict]]:
        entries: dict[str, list[dict]] = {}
        for entry in pq.read_table(root / "build/semantic_fact_evidence.parquet").to_pylist():
            entries.setdefault(entry["fact_id"], []).append(entry)
        return entries

    kind = type_fact()
    assert kind["evidence_count"] == 11
    assert [e["source_path"] for e in kind["evidence"]] == names[:8]
    assert [e["source_path"] for e in evidence_file()[kind["fact_id"]]] == names
    declared = find(facts(root), fact_namespace="domain", fact_key="family")[0]
    assert len(declared["evidence"]) == declared["evidence_count"] == 11
    answer = cli("facts", "ask", "--tenant", "default", "--op", "exists", "--namespace",
                 "classification", "--key", "entity_type", "--value", "tool", cwd=root)
    assert answer.code == 0 and "and 8 more" in answer.out, answer.out + answer.err
    shown = cli("facts", "show", kind["fact_id"], "--tenant", "default", "--format", "json",
                cwd=root)
    assert shown.code == 0, shown.err
    assert [e["path"] for e in shown.json()["evidence"]] == names

    (root / names[2]).unlink()
    build(root, capsys)
    kind = type_fact()
    assert kind["evidence_count"] == 10
    assert [e["source_path"] for e in kind["evidence"]] == names[:2] + names[3:9]
    assert delta(root)["updated"] and kind["fact_id"] in {
        r["fact_id"] for r in delta(root)["updated"]}
    rows = [r for name in ("added", "updated", "invalidated") for r in delta(root)[name]]
    assert all(len(r["evidence"]) <= 8 or r["fact_key"] == "family" for r in rows)
    assert [len(r["evidence"]) for r in rows if r["fact_key"] == "family"] == [10]


XYLOPHONE_DOCUMENTS = [f"content/{letter}.md" for letter in "abcdefghijk"]


def xylophone_twins(tmp_path: Path, capsys) -> list[Path]:
    """Two projects alike, kb and twin, of eleven documents that each declare the
    xylophone, built."""
    roots = [project(tmp_path / name) for name in ("kb", "twin")]
    for root in roots:
        for number, name in enumerate(XYLOPHONE_DOCUMENTS):
            write(root, name, doc(f"note:{number}", "The xylophone rings.",
                                  entities=ENTITY_X))
        build(root, capsys)
    return roots


def assert_same_facts(kb: Path, twin: Path) -> None:
    for name in ("semantic_facts.parquet", "semantic_fact_evidence.parquet",
                 "semantic_facts_delta.json"):
        assert (kb / "build" / name).read_bytes() == (twin / "build" / name).read_bytes(), name


# A build killed just after the facts stage wrote one of its files (in the process that
# runs the stage, and the build's own).
_KILLED_AFTER_WRITING = """
import os, signal, sys
from pathlib import Path
from ctxfst.facts import build as facts_build
from ctxfst.pipeline.runner import run_build
build_process, name = os.getpid(), sys.argv[2]
real = facts_build.write_pieces
def write_pieces(path, pieces):
    digest = real(path, pieces)
    if path.name == name:
        os.kill(build_process, signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)
    return digest
facts_build.write_pieces = write_pieces
sys.exit(run_build(Path(sys.argv[1]), []))
"""


@pytest.mark.parametrize("written", ["semantic_facts.parquet",
                                     "semantic_fact_evidence.parquet"])
def test_a_build_killed_while_cutting_evidence_publishes_nothing_half_made(
        tmp_path, capsys, written):
    """Killed with the facts rows written and their evidence not yet (or with both
    written and the memo not yet saved), a build leaves the published build and the
    ledger as they were; the next build's facts are those of a build that was never
    killed, entries beyond the rows' cut included."""
    from .test_build import assert_consistent

    roots, names = xylophone_twins(tmp_path, capsys), XYLOPHONE_DOCUMENTS
    kb, twin = roots
    published = {p.name: p.read_bytes() for p in (kb / "build").iterdir() if p.is_file()}
    ledger = {p.name: p.read_bytes() for p in (kb / ".ctxfst/facts").iterdir()}
    for root in roots:  # one of the eight the rows keep goes, another is edited
        (root / names[1]).unlink()
        write(root, names[4], doc("note:4", "The xylophone rings twice.", entities=ENTITY_X))
    killed = subprocess.run([sys.executable, "-c", _KILLED_AFTER_WRITING, str(kb), written],
                            capture_output=True, text=True)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert {p.name: p.read_bytes() for p in (kb / "build").iterdir() if p.is_file()} == \
        published
    assert {p.name: p.read_bytes() for p in (kb / ".ctxfst/facts").iterdir()} == ledger
    assert_consistent(kb)
    for root in roots:
        build(root, capsys)
    assert_same_facts(kb, twin)
    kind = find(facts(kb), fact_key="entity_type")[0]
    assert kind["evidence_count"] == 10
    assert [e["source_path"] for e in kind["evidence"]] == [names[0], *names[2:9]]


def test_a_ledger_of_facts_schema_1_carries_on(tmp_path, capsys):
    """A ledger written before the evidence file (facts schema 1.0.0: each row held all
    its evidence) is read as it is and carried on: the next build's facts are those of a
    ledger written by this version, history and all."""
    import pyarrow as pa

    roots, names = xylophone_twins(tmp_path, capsys), XYLOPHONE_DOCUMENTS
    ledger = roots[0] / ".ctxfst/facts"
    table = pq.read_table(ledger / "semantic_facts.parquet")
    entries: dict[str, list[dict]] = {}
    for entry in pq.read_table(ledger / "semantic_fact_evidence.parquet").to_pylist():
        entries.setdefault(entry.pop("fact_id"), []).append(entry)
    rows = [dict(row, evidence=entries[row["fact_id"]]) for row in table.to_pylist()]
    assert any(len(row["evidence"]) > 8 for row in rows)
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema.with_metadata(
        {**table.schema.metadata, b"ctxfst.schema_version": b"1.0.0"})),
        ledger / "semantic_facts.parquet")
    (ledger / "semantic_fact_evidence.parquet").unlink()
    for root in roots:
        (root / names[1]).unlink()
        build(root, capsys)
    kb, twin = roots
    assert_same_facts(kb, twin)
    assert (ledger / "semantic_fact_evidence.parquet").is_file()
    # Without its evidence file, a ledger of this schema is incomplete: a clear error.
    (ledger / "semantic_fact_evidence.parquet").unlink()
    (kb / names[2]).unlink()
    assert "incomplete facts ledger (semantic_fact_evidence.parquet missing)" in \
        build_fails(kb, capsys)


def test_source_fingerprints_keep_their_encoding():
    """A fingerprint is the sha of the JSON list of its parts, as ledgers written before
    recorded them (a changed encoding would extract every source of a KB again)."""
    from ctxfst.facts.build import Source, _sha, fingerprint
    from ctxfst.facts.model import FACTS_SCHEMA_VERSION

    for tenant, digest, catalog, version, kind in [
            ("default", "ab" * 32, "", "builtin-1", "document"),
            ("t\u00e9\"n\\ant", "\u4e2d\n", "c" * 64, "v\"2", "skill")]:
        source = Source("notes/a.md", kind, "a.md", lambda: None, tenant, [], digest=digest)
        assert fingerprint(source, catalog, version) == _sha(json.dumps(
            [FACTS_SCHEMA_VERSION, version, digest, tenant, catalog, kind]).encode())


def test_facts_compare_every_source_unless_they_ran_on_the_last_validation(tmp_path, capsys):
    """After an edit validated alone (`doit validate`), the facts stage did not run on the
    last validation's units: it compares every source with its last run (that build,
    its validate stage up to date, validates once for facts and compile); once it ran
    on the last one, after an edit only that document and those it always reads again;
    with the ledger replaced by another (a backup), every source again. Each time the
    active facts equal a clean build's."""
    root = copy_example(tmp_path / "kb")
    build(root, capsys)
    always = len(list((root / "skills").glob("*/SKILL.md"))) + sum(
        "content_path:" in path.read_text() for path in (root / "content").rglob("*.md"))
    target = next(path for path in sorted((root / "content").rglob("*.md"))
                  if "content_path:" not in path.read_text())
    body = target.read_text().index("<Chunk id=")
    body = target.read_text().index("\n", body) + 1

    def edit(words: str) -> None:
        text = target.read_text()
        target.write_text(text[:body] + words + " " + text[body:])

    def compared() -> tuple[int, int]:
        stage = next(s for s in json.loads((root / "build/run_results.json").read_text())[
            "stages"] if s["stage"] == "facts")
        return stage["sources_compared"], stage["sources"]

    def active(kb: Path) -> list[dict]:
        """The active facts, run ids and build numbers aside (a clean build's are others)."""
        return [{name: [{k: v for k, v in entry.items() if k != "run_id"} for entry in value]
                 if name == "evidence" else value for name, value in row.items()
                 if "run" not in name and "seq" not in name}
                for row in facts(kb) if row["is_active"]]

    def same_as_clean(name: str) -> None:
        clean = tmp_path / f"clean-{name}"
        shutil.copytree(root / "content", clean / "content")
        shutil.copytree(root / "skills", clean / "skills")
        shutil.copy(root / "ctxfst.toml", clean / "ctxfst.toml")
        build(clean, capsys)
        assert active(root) == active(clean), name

    edit("See also the index.")
    build(root, capsys, "validate")
    build(root, capsys)
    sources_compared, sources = compared()
    assert sources_compared == sources > always + 1
    same_as_clean("after validate")
    backup = tmp_path / "ledger-backup"
    shutil.copytree(root / ".ctxfst/facts", backup)
    # (that build's validate stage was up to date: it validated once, before the facts
    # stage forked, and compile took the same snapshot)
    edit("And the glossary.")
    build(root, capsys)
    assert compared() == (1 + always, sources)
    same_as_clean("one edit")
    edit("Or the notes.")
    build(root, capsys)
    assert compared() == (1 + always, sources)
    same_as_clean("another edit")
    edit("Then the appendix.")
    shutil.rmtree(root / ".ctxfst/facts")
    shutil.copytree(backup, root / ".ctxfst/facts")
    build(root, capsys)
    assert compared() == (sources, sources)
    same_as_clean("a restored ledger")


def test_name_catalogs_do_not_depend_on_shared_labels():
    """Documents of a build share one label object per declaration; merged from shared
    objects, from copies, or from labels made on the fly, the catalogs are the same."""
    from ctxfst.facts.build import _catalogs

    shared = [("entity:a", ["Alpha", "A"]), ("entity:b", ["Beta"]), ("entity:a", ["Alef"])]
    documents = [("default", [shared[0], shared[1]]), ("t2", [shared[1]]),
                 ("default", [shared[2], shared[0]]), ("default", [shared[1]])]
    made = [_catalogs(iter(documents)),
            _catalogs((tenant, [(i, list(names)) for i, names in labels])
                      for tenant, labels in documents)]
    assert made[0][1] == made[1][1] and set(made[0][1]) == {"default", "t2"}
    assert [c.names for c in made[0][0].values()] == [c.names for c in made[1][0].values()]
    assert made[0][0]["default"].names == {"alpha": "entity:a", "a": "entity:a",
                                           "alef": "entity:a", "beta": "entity:b"}
