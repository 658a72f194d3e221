"""The skill index: both dialects, migration round trip, rules, to-prompt, the graph."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import jsonschema
import pyarrow.parquet as pq
import pytest

from ctxfst.document.source import Source
from ctxfst.pipeline.runner import run_build
from ctxfst.skills.index import index_entry, to_prompt
from ctxfst.skills.migrate import migrate_text
from ctxfst.skills.parse import parse_skill

from .conftest import REPO, UPSTREAM, copy_example, make_project, write

UPSTREAM_SKILLS = sorted(UPSTREAM.glob("skills/*/SKILL.md"))


def parsed(path: Path):
    return parse_skill(Source(str(path), path))


def comparable(entry: dict) -> dict:
    return {k: v for k, v in entry.items() if k not in ("dialect",)}


@pytest.mark.parametrize("path", UPSTREAM_SKILLS, ids=lambda p: p.parent.name)
def test_migration_round_trip_keeps_the_index_entry(tmp_path, path, cli):
    original = parsed(path)
    assert not original.diagnostics and original.dialect == "ctxfst-v2"
    copy = write(tmp_path, f"skills/{path.parent.name}/SKILL.md", path.read_bytes())
    text, changed = migrate_text(copy.read_text(), str(copy))
    assert changed
    copy.write_text(text)
    migrated = parsed(copy)
    assert not migrated.diagnostics and migrated.dialect == "agent-skills"
    root = path.parents[2]
    assert comparable(index_entry(migrated, tmp_path)) == {
        **comparable(index_entry(original, root)),
        "path": f"skills/{path.parent.name}/SKILL.md"}
    assert set(migrated.frontmatter) <= {"name", "description", "metadata"}
    assert all(isinstance(v, str) for v in migrated.frontmatter["metadata"].values())
    assert migrate_text(text, str(copy)) == (text, False)  # idempotent
    result = cli("validate", "--strict-spec", "--format", "json", tmp_path / "skills")
    assert "CTX413" not in result.codes()


def test_strict_spec_reports_v2_fields(cli):
    result = cli("validate", "--strict-spec", "--format", "json", UPSTREAM / "skills")
    found = [d for d in result.json()["diagnostics"] if d["code"] == "CTX413"]
    assert result.code == 1 and len(found) == 15  # 5 extension fields x 3 skills
    assert cli("validate", UPSTREAM / "skills").code == 0


def test_metadata_dialect_is_parsed(tmp_path):
    path = write(tmp_path, "skills/ship-it/SKILL.md", """
        ---
        name: ship-it
        description: Ship the release
        license: MIT
        allowed-tools: Bash Read
        metadata:
          preconditions: "state:tested NOT state:frozen"
          postconditions: "state:released NOT state:tested"
          related_nodes: "entity:ci"
          cost: "2.5"
          idempotent: "false"
          owner: release-team
        ---
        Ship.
        """)
    skill = parsed(path)
    assert not skill.diagnostics and skill.dialect == "agent-skills"
    entry = index_entry(skill, tmp_path)
    assert entry["preconditions"] == ["state:tested"]
    assert entry["negative_preconditions"] == ["state:frozen"]
    assert entry["add_effects"] == ["state:released"]
    assert entry["delete_effects"] == ["state:tested"]
    assert entry["cost"] == 2.5 and entry["idempotent"] is False
    assert entry["allowed_tools"] == "Bash Read" and entry["license"] == "MIT"


@pytest.mark.parametrize("frontmatter, code, line", [
    ("name: x-y\ndescription: d\nmetadata:\n  idempotent: maybe\n", "CTX103", 5),
    ("name: x-y\ndescription: d\nmetadata:\n  cost: cheap\n", "CTX103", 5),
    ("name: x-y\ndescription: d\nmetadata:\n  cost: \"1\"\ncost: low\n", "CTX412", 5),
    ("name: x-y\ndescription: d\nmetadata:\n  level: 3\n", "CTX102", 5),
    ("name: x-y\ndescription: d\ncompatibility: " + "c" * 501 + "\n", "CTX105", 4),
    ("name: x-y\ndescription: " + "d" * 1025 + "\n", "CTX105", 3),
    ("name: x-y\ndescription: \"\"\n", "CTX105", 3),
    ("name: x--y\ndescription: d\n", "CTX401", 2),
    ("name: -xy\ndescription: d\n", "CTX401", 2),
    ("name: x-y\ndescription: d\ncost: huge\n", "CTX103", 4),
    ("name: x-y\ndescription: d\nidempotent: sometimes\n", "CTX102", 4),
    ("name: x-y\ndescription: d\nallowed-tools: [Bash]\n", "CTX102", 4),
    ("- a\n- b\n", "CTX013", 2),
    ("name: [x\n", "CTX012", 3),
])
def test_skill_field_errors_are_located(tmp_path, frontmatter, code, line):
    path = write(tmp_path, "skills/x-y/SKILL.md", f"---\n{frontmatter}---\nBody\n")
    found = [(d.code, d.line) for d in parsed(path).diagnostics]
    assert (code, line) in found, found


def test_missing_and_unclosed_frontmatter(tmp_path, cli):
    write(tmp_path, "skills/a/SKILL.md", "# A skill without frontmatter\n")
    write(tmp_path, "skills/b/SKILL.md", "---\nname: b\ndescription: x\n")
    result = cli("validate", "--format", "json", tmp_path / "skills")
    assert result.code == 1 and sorted(result.codes()) == ["CTX010", "CTX011"]


def _kb(tmp_path: Path) -> Path:
    make_project(tmp_path)
    write(tmp_path, "content/world.md", """
        ---
        entities:
          - id: state:ready
            name: Ready
            type: state
          - id: state:done
            name: Done
            type: state
          - id: entity:tool
            name: Tool
            type: tool
        chunks: []
        ---
        """)
    return tmp_path


def test_kb_level_skill_rules(tmp_path, cli):
    root = _kb(tmp_path)
    write(root, "skills/finish/SKILL.md", "---\nname: finish\ndescription: Finish\n"
          "preconditions: [state:ready, state:unreachable]\npostconditions: [state:done]\n"
          "related_nodes: [entity:tool, entity:nothing]\nrelated_skills: [ghost]\n---\n")
    write(root, "skills/noop/SKILL.md", "---\nname: noop\ndescription: Nothing\n"
          "preconditions: [state:ready]\npostconditions: [state:ready]\n---\n")
    write(root, "skills/copy/SKILL.md", "---\nname: noop\ndescription: Dup\n---\n")
    (root / "skills/empty-folder").mkdir()
    outside = tmp_path.parent / f"{tmp_path.name}-outside"
    outside.mkdir()
    write(outside, "SKILL.md", "---\nname: linked\ndescription: x\n---\n")
    (root / "skills/linked").symlink_to(outside, target_is_directory=True)
    result = cli("validate", "--format", "json", cwd=root)
    got = sorted((d["path"].split("/")[1], d["code"]) for d in result.json()["diagnostics"])
    assert got == [("copy", "CTX402"), ("empty-folder", "CTX410"),
                   ("finish", "CTX406"), ("finish", "CTX407"), ("finish", "CTX409"),
                   ("linked", "CTX411"), ("noop", "CTX403"), ("noop", "CTX408")]
    assert result.code == 1


def test_to_prompt_escapes(tmp_path, cli):
    root = _kb(tmp_path)
    write(root, "skills/quote/SKILL.md", "---\nname: quote\n"
          "description: \"Use <b> & 'quotes' \\\"here\\\"\"\n---\n")
    result = cli("skills", "to-prompt", cwd=root)
    assert result.code == 0
    assert "<description>Use &lt;b&gt; &amp; &#x27;quotes&#x27; &quot;here&quot;</description>" \
        in result.out
    assert result.out.startswith("<available_skills>\n  <skill>\n    <name>quote</name>")
    assert f"<location>{(root / 'skills/quote/SKILL.md').resolve()}</location>" in result.out
    entries = [{"name": "a", "description": "x", "path": "skills/a/SKILL.md"}]
    assert to_prompt(entries) == ("<available_skills>\n  <skill>\n    <name>a</name>\n"
                                  "    <description>x</description>\n"
                                  "    <location>skills/a/SKILL.md</location>\n  </skill>\n"
                                  "</available_skills>\n")


def test_migrate_command_check_and_write(tmp_path, cli):
    shutil.copytree(UPSTREAM / "skills", tmp_path / "skills")
    check = cli("skills", "migrate", "--check", tmp_path / "skills")
    assert check.code == 1 and "would migrate" in check.out
    before = {p: p.read_bytes() for p in (tmp_path / "skills").rglob("SKILL.md")}
    assert all(p.read_bytes() == data for p, data in before.items())
    assert cli("skills", "migrate", tmp_path / "skills").code == 0
    assert cli("skills", "migrate", "--check", tmp_path / "skills").code == 0


def test_skill_index_and_graph_in_the_build(tmp_path, capsys):
    copy_example(tmp_path)
    assert run_build(tmp_path, []) == 0
    capsys.readouterr()
    index = json.loads((tmp_path / "build/skill-index.json").read_text())
    jsonschema.validate(index, json.loads((REPO / "schemas/skill-index.schema.json").read_text()))
    names = [s["name"] for s in index["skills"]]
    assert names == ["analyze-gaps", "ask-career-coach", "draft-learning-plan",
                     "inventory-skills"]
    table = pq.read_table(tmp_path / "build/skills.parquet")
    assert table.column("name").to_pylist() == names
    assert table.column("cost").to_pylist() == [2.0, 5.0, 2.0, 1.0]
    graph = json.loads((tmp_path / "build/entity-graph.json").read_text())
    nodes = {n["id"]: n for n in graph["nodes"]}
    assert nodes["skill:inventory-skills"]["type"] == "action"
    edges = {(e["source"], e["relation"], e["target"]): e for e in graph["edges"]}
    link = edges[("skill:inventory-skills", "LEADS_TO", "skill:analyze-gaps")]
    assert link["properties"]["inferred_via"] == "state:has-skill-inventory"
    assert ("skill:draft-learning-plan", "REQUIRES", "skill:ask-career-coach") in edges
    assert ("action:inventory-skills", "IMPLIES", "skill:inventory-skills") in edges
    # A SKILL.md edit re-runs the skill stage, and the graph after it.
    skill = tmp_path / "skills/analyze-gaps/SKILL.md"
    skill.write_text(skill.read_text().replace("cost: medium", "cost: high"))
    assert run_build(tmp_path, []) == 0
    out = capsys.readouterr().out
    assert ".  skills" in out and ".  graph" in out
    # embed runs again (skills.parquet changed) and finds the skill's text in its cache
    results = json.loads((tmp_path / "build/run_results.json").read_text())["stages"]
    assert next(s for s in results if s["stage"] == "embed")["embedded"] == 0


def test_migration_keeps_crlf_and_tiny_costs(tmp_path, cli):
    path = write(tmp_path, "skills/s/SKILL.md",
                 b"---\r\nname: s\r\ndescription: d\r\ncost: 1.5e-7\r\n---\r\nbody line\r\n")
    before = index_entry(parsed(path), tmp_path)
    assert cli("skills", "migrate", path).code == 0
    data = path.read_bytes()
    assert data.endswith(b"---\r\nbody line\r\n") and b"\n" not in data.replace(b"\r\n", b"")
    after = parsed(path)
    assert not after.diagnostics
    assert comparable(index_entry(after, tmp_path)) == comparable(before)
