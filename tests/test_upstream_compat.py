"""Upstream CtxFST documents validate and parse unchanged (strict superset)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
import yaml

from ctxfst.document.parse import parse_document
from ctxfst.document.source import Source
from ctxfst.skills.parse import parse_skill

from .conftest import CH22, UPSTREAM

UPSTREAM_DOCS = sorted(p for p in UPSTREAM.glob("*.md") if p.name != "SOURCE.md") + [CH22]
UPSTREAM_SKILLS = sorted(UPSTREAM.glob("skills/*/SKILL.md"))


def test_validate_upstream_and_benchmark_exits_zero(cli):
    result = cli("validate", UPSTREAM, CH22, "--format", "json")
    assert result.code == 0, result.out
    report = result.json()
    assert report["summary"]["errors"] == 0
    assert report["summary"]["files"] == len(UPSTREAM_DOCS) + len(UPSTREAM_SKILLS)


def _plain(value):
    """YAML dates -> ISO strings, as the typed model stores them."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, (dt.date, dt.datetime)):
        return value.isoformat()
    return value


@pytest.mark.parametrize("path", UPSTREAM_DOCS, ids=lambda p: p.name)
def test_every_field_is_preserved(path: Path):
    doc = parse_document(Source(str(path), path))
    assert not doc.diagnostics
    expected = yaml.safe_load(path.read_text().split("\n---\n")[0][4:])
    assert doc.frontmatter == expected
    assert [e.model_dump(exclude_unset=True) for _, e in doc.entities] == expected["entities"]
    chunks = [c.model_dump(exclude_unset=True) for _, c in doc.chunks]
    assert chunks == _plain(expected["chunks"])
    assert set(doc.bodies) == {c["id"] for c in expected["chunks"]}
    for body in doc.bodies.values():
        assert body.content and "<Chunk" not in body.content


@pytest.mark.parametrize("path", UPSTREAM_SKILLS, ids=lambda p: p.parent.name)
def test_upstream_skills_parse(path: Path):
    skill = parse_skill(Source(str(path), path))
    assert not skill.diagnostics
    assert skill.record is not None and skill.record.name == path.parent.name
    expected = yaml.safe_load(path.read_text().split("\n---\n")[0][4:])
    assert skill.record.model_dump(exclude_unset=True) == expected


def test_unknown_fields_pass_through(tmp_path, cli):
    from .conftest import write

    path = write(tmp_path, "doc.md", """
        ---
        title: Extensions
        x-owner: team-a
        entities:
          - id: entity:a
            name: A
            type: concept
            custom: {nested: [1, 2]}
        chunks:
          - id: note:a
            context: "About A"
            entities: [entity:a]
            embedding_hint: short
        ---
        <Chunk id="note:a">
        A is a thing.
        </Chunk>
        """)
    doc = parse_document(Source(str(path), path))
    assert not doc.diagnostics
    assert doc.frontmatter["x-owner"] == "team-a"
    assert doc.entities[0][1].extra_fields() == {"custom": {"nested": [1, 2]}}
    assert doc.chunks[0][1].extra_fields() == {"embedding_hint": "short"}
    assert cli("validate", path).code == 0


def test_legacy_chunk_markers_are_accepted(tmp_path, cli):
    from .conftest import write

    path = write(tmp_path, "legacy.md", """
        ---
        chunks:
          - id: skill:python
            context: "Python skills"
        ---
        %% chunk-start id="skill:python" %%
        Python daily.
        %% chunk-end %%
        """)
    doc = parse_document(Source(str(path), path))
    assert doc.bodies["skill:python"].content == "Python daily."
    assert doc.bodies["skill:python"].syntax == "marker"
    assert cli("validate", path).code == 0
