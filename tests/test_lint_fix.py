"""`ctxfst lint --fix` and `--diff`: the safe mechanical fixes, made in place with the
rest of each file kept, every reference to a renamed id renamed with it."""

from __future__ import annotations

from .conftest import make_project, write

BROKEN = """\
---
title: A  # the title stays
entities:
  - id: Entity:FastAPI
    name: FastAPI
    type: framework
  - {id: entity:hono, name: Hono, type: framework}
chunks:
  - id: Skill:Fast_API
    context: "How the team builds typed REST services with FastAPI and Hono"
    tags: [api, api, web]
    entities: [Entity:FastAPI, entity:hono, entity:hono]
  - id: ref:other
    context: "Other notes that depend on the FastAPI chunk for their examples"
    dependencies: [Skill:Fast_API]
    entities: [entity:hono]
---
<Chunk id="Skill:Fast_API">
FastAPI text.
</Chunk>

<Chunk id="ref:other">
Other.
</Chunk>

<Chunk id="ref:undeclared">
More.
</Chunk>
"""


def test_diff_shows_and_fix_makes_the_safe_fixes(tmp_path, cli):
    kb = make_project(tmp_path)
    doc = write(kb, "content/a.ctxfst.md", BROKEN)
    assert cli("validate", cwd=kb).code == 1
    diff = cli("lint", "--diff", cwd=kb)
    assert "-  - id: Entity:FastAPI\n+  - id: entity:fastapi\n+    aliases: []" in diff.out
    assert '+<Chunk id="skill:fast-api">' in diff.out
    assert doc.read_text() == BROKEN  # --diff writes nothing
    fixed = cli("lint", "--fix", cwd=kb)
    assert "fixed: renamed 'Skill:Fast_API' to 'skill:fast-api'" in fixed.out
    assert "fixed: declared chunk 'ref:undeclared'" in fixed.out
    text = doc.read_text()
    assert "title: A  # the title stays" in text
    assert "    tags: [api, web]\n    entities: [entity:fastapi, entity:hono]\n" in text
    assert "    dependencies: [skill:fast-api]\n" in text
    assert "  - {aliases: [], id: entity:hono, name: Hono, type: framework}\n" in text
    assert "  - {id: ref:undeclared}\n---\n" in text
    assert cli("validate", cwd=kb).code == 0
    again = cli("lint", "--fix", cwd=kb)
    assert "fixed:" not in again.out and doc.read_text() == text  # nothing left to fix


def test_a_rename_reaches_every_document_and_line_endings_stay(tmp_path, cli):
    kb = make_project(tmp_path)
    write(kb, "content/a.ctxfst.md", BROKEN.replace("\n", "\r\n"))
    other = write(kb, "content/b.ctxfst.md", """\
        ---
        chunks:
          - id: b:uses
            dependencies: ["Skill:Fast_API"]
            entities: [Entity:FastAPI]
        ---
        <Chunk id="b:uses">
        Uses it.
        </Chunk>
        """)
    result = cli("lint", "--fix", "content/a.ctxfst.md", cwd=kb)
    assert result.code == 0, result.err
    assert "b.ctxfst.md: fixed" in result.out
    assert 'dependencies: ["skill:fast-api"]' in other.read_text()  # quoting kept
    assert "entities: [entity:fastapi]" in other.read_text()
    assert b"\r\n  - id: skill:fast-api\r\n" in (kb / "content" / "a.ctxfst.md").read_bytes()
    assert cli("validate", cwd=kb).code == 0


def test_judgement_calls_stay_findings(tmp_path, cli):
    kb = make_project(tmp_path)
    doc = write(kb, "content/a.ctxfst.md", """\
        ---
        entities:
          - {id: State:Ready, name: Ready, type: state, aliases: []}
          - {id: Entity:Go, name: Go, type: skill, aliases: []}
          - {id: entity:go, name: Golang, type: skill, aliases: []}
        chunks:
          - id: a:one
            entities: [Entity:Go, entity:go]
            state_refs: [State:Ready]
        ---
        <Chunk id="a:one">
        One.
        </Chunk>
        """)
    write(kb, "skills/start/SKILL.md", """\
        ---
        name: start
        description: Start.
        preconditions: [State:Ready]
        postconditions: []
        ---
        Start.
        """)
    before = doc.read_text()
    result = cli("lint", "--fix", cwd=kb)
    assert "id 'State:Ready' not renamed to 'state:ready': skills/start/SKILL.md names it" \
        in result.err
    assert doc.read_text() == before  # Entity:Go would become entity:go, which is taken


def test_chunks_are_put_in_the_order_of_their_passages(tmp_path, cli):
    kb = make_project(tmp_path)
    write(kb, "content/x.md", "A passage from a file.\n")
    doc = write(kb, "content/b.ctxfst.md", """\
        ---
        chunks:
          # the second passage, declared first
          - id: b:two
            tags: [two]

          - {id: b:one, tags: [one]}
          - id: b:file
            content_path: x.md
        ---
        <Chunk id="b:one">
        One.
        </Chunk>

        <Chunk id="b:two">
        Two.
        </Chunk>
        """)
    result = cli("lint", "--fix", cwd=kb)
    assert "fixed: put the chunks in the order of their passages" in result.out
    assert doc.read_text().split("---\n")[1] == (
        "chunks:\n"
        "  - {id: b:one, tags: [one]}\n"
        "  # the second passage, declared first\n"
        "  - id: b:two\n"
        "    tags: [two]\n"
        "\n"
        "  - id: b:file\n"
        "    content_path: x.md\n")
    assert cli("validate", cwd=kb).code == 0
