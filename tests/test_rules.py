"""Validation rules: each one fires where it should, with its location, and not elsewhere."""

from __future__ import annotations

import pytest

from .conftest import make_project, write

ENTITIES = """
entities:
  - id: entity:python
    name: Python
    type: skill
  - id: state:has-resume
    name: Has Resume
    type: state
  - id: state:has-plan
    name: Has Plan
    type: state
  - id: goal:hired
    name: Hired
    type: goal
  - id: action:apply
    name: Apply
    type: action
"""


def doc(chunks: str, body: str, entities: str = ENTITIES, extra: str = "") -> str:
    return f"---\n{extra}{entities.strip()}\nchunks:\n{chunks.rstrip()}\n---\n{body}"


def chunk(cid: str, **fields) -> str:
    lines = [f"  - id: {cid}", '    context: "A chunk about something specific enough"']
    lines += [f"    {key}: {value}" for key, value in fields.items()]
    return "\n".join(lines) + "\n"


def body(*ids: str) -> str:
    return "".join(f'<Chunk id="{cid}">\nText of {cid}.\n</Chunk>\n' for cid in ids)


def diagnostics(cli, *paths, cwd=None):
    result = cli("validate", *paths, "--format", "json", cwd=cwd)
    return result, result.json()["diagnostics"]


def only(found, code):
    return [d for d in found if d["code"] == code]


def test_clean_document_has_no_diagnostics(tmp_path, cli):
    path = write(tmp_path, "a.md", doc(
        chunk("note:a", entities="[entity:python]", created_at="2026-03-12",
              version=2, priority="high", type="text", dependencies="[note:b]",
              state_refs="[state:has-resume]", cost="low", idempotent="true")
        + chunk("note:b", created_at='"2026-03-12T10:00:00+08:00"'),
        body("note:a", "note:b")))
    result, found = diagnostics(cli, path)
    assert result.code == 0 and found == []


@pytest.mark.parametrize("field, value, code", [
    ("priority", "urgent", "CTX103"),
    ("type", "pdf", "CTX103"),
    ("cost", "cheap", "CTX103"),
    ("cost", "-2", "CTX103"),
    ("version", "0", "CTX105"),
    ("version", '"1"', "CTX105"),
    ("version", "true", "CTX105"),
    ("created_at", "yesterday", "CTX105"),
    ("created_at", '"2026-13-45"', "CTX105"),
    ("idempotent", '"yes"', "CTX102"),
    ("tags", "Python", "CTX102"),
    ("tags", "[2024, Python]", "CTX102"),
    ("entities", "{a: b}", "CTX102"),
])
def test_field_rules_are_located_at_the_value(tmp_path, cli, field, value, code):
    path = write(tmp_path, "a.md", doc(chunk("note:a", **{field: value}), body("note:a")))
    result, found = diagnostics(cli, path)
    assert result.code == 1
    hits = only(found, code)
    assert hits, found
    expected_line = 1 + len(ENTITIES.strip().splitlines()) + 1 + 2 + 1
    assert hits[0]["line"] == expected_line
    assert field in hits[0]["message"]


def test_entity_type_enum_and_required_fields(tmp_path, cli):
    entities = ("entities:\n  - id: entity:a\n    name: A\n    type: gadget\n"
                "  - id: entity:b\n    type: tool\n")
    path = write(tmp_path, "a.md", doc(chunk("note:a"), body("note:a"), entities=entities))
    _, found = diagnostics(cli, path)
    assert [(d["code"], d["line"]) for d in found] == [("CTX103", 5), ("CTX101", 6)]
    assert "name" in found[1]["message"]


def test_chunk_id_is_required(tmp_path, cli):
    path = write(tmp_path, "a.md", doc('  - context: "no id"\n', ""))
    _, found = diagnostics(cli, path)
    assert only(found, "CTX101")[0]["message"].endswith("missing required field 'id'")


def test_unquoted_yaml_date_is_valid(tmp_path, cli):
    path = write(tmp_path, "a.md", doc(chunk("note:a", created_at="2026-03-12"), body("note:a")))
    assert diagnostics(cli, path)[0].code == 0


def test_duplicate_ids_in_one_document(tmp_path, cli):
    entities = ENTITIES + "  - id: entity:python\n    name: Python\n    type: skill\n"
    path = write(tmp_path, "a.md", doc(chunk("note:a") + chunk("note:a"), body("note:a"),
                                       entities=entities))
    _, found = diagnostics(cli, path)
    assert {d["code"] for d in found} == {"CTX201", "CTX203"}
    assert "first at" in only(found, "CTX203")[0]["message"]


def test_dangling_entity_reference(tmp_path, cli):
    path = write(tmp_path, "a.md", doc(chunk("note:a", entities="[entity:python, entity:rust]"),
                                       body("note:a")))
    _, found = diagnostics(cli, path)
    assert [(d["code"], d["line"], d["column"]) for d in found] == [("CTX204", 21, 31)]


@pytest.mark.parametrize("field, ref, code", [
    ("preconditions", "state:has-resume", None),
    ("preconditions", '"NOT state:has-plan"', None),
    ("postconditions", "goal:hired", None),
    ("postconditions", '"NOT state:has-resume"', None),
    ("state_refs", "state:has-resume", None),
    ("preconditions", "goal:hired", "CTX205"),
    ("state_refs", "entity:python", "CTX205"),
    ("postconditions", "action:apply", "CTX205"),
    ("preconditions", "state:unknown", "CTX204"),
    ("preconditions", "entity:has-resume", "CTX204"),
])
def test_conditions_must_name_states(tmp_path, cli, field, ref, code):
    path = write(tmp_path, "a.md", doc(chunk("note:a", **{field: f"[{ref}]"}), body("note:a")))
    result, found = diagnostics(cli, path)
    assert [d["code"] for d in found] == ([code] if code else [])
    if ref == "entity:has-resume":
        assert "did you mean 'state:has-resume'" in found[0]["message"]


def test_entity_conditions_are_checked_too(tmp_path, cli):
    entities = ENTITIES + ("  - id: action:plan\n    name: Plan\n    type: action\n"
                           "    preconditions: [entity:python]\n")
    path = write(tmp_path, "a.md", doc(chunk("note:a"), body("note:a"), entities=entities))
    _, found = diagnostics(cli, path)
    assert [d["code"] for d in found] == ["CTX205"]


@pytest.mark.parametrize("refs, codes", [
    ("[state:has-resume]", []),
    ("[]", []),
    ("[state:unknown]", ["CTX204"]),
    ("[goal:hired]", ["CTX205"]),
    ("state:has-resume", ["CTX102"]),
    ('""', ["CTX102"]),
])
def test_an_entitys_extra_state_refs_are_checked(tmp_path, cli, refs, codes):
    # (entities declare no state_refs field: the extra one is checked as a chunk's is)
    entities = ENTITIES + ("  - id: action:plan\n    name: Plan\n    type: action\n"
                           f"    state_refs: {refs}\n")
    path = write(tmp_path, "a.md", doc(chunk("note:a"), body("note:a"), entities=entities))
    _, found = diagnostics(cli, path)
    assert [d["code"] for d in found] == codes


def test_dependencies_across_documents_and_forward(tmp_path, cli):
    make_project(tmp_path)
    write(tmp_path, "content/a.md", doc(chunk("note:a", dependencies="[note:b, note:z]"),
                                        body("note:a")))
    write(tmp_path, "content/b.md", doc(chunk("note:b"), body("note:b"), entities="entities: []"))
    result, found = diagnostics(cli, cwd=tmp_path)
    assert [(d["code"], d["path"]) for d in found] == [("CTX206", "content/a.md")]
    assert "note:z" in found[0]["message"]


def test_dependency_cycle(tmp_path, cli):
    chunks = (chunk("note:a", dependencies="[note:b]") + chunk("note:b", dependencies="[note:c]")
              + chunk("note:c", dependencies="[note:a]") + chunk("note:d", dependencies="[note:d]"))
    path = write(tmp_path, "a.md", doc(chunks, body("note:a", "note:b", "note:c", "note:d")))
    _, found = diagnostics(cli, path)
    cycles = only(found, "CTX207")
    assert len(cycles) == 2
    assert {c["message"] for c in cycles} == {
        "dependency cycle: note:a -> note:b -> note:c -> note:a",
        "dependency cycle: note:d -> note:d"}


def test_body_and_frontmatter_must_match(tmp_path, cli):
    path = write(tmp_path, "a.md", doc(chunk("note:a") + chunk("note:b"), body("note:a", "note:x")))
    _, found = diagnostics(cli, path)
    assert sorted((d["code"], d["line"]) for d in found) == [("CTX301", 27), ("CTX302", 21)]


def test_chunk_tags_inside_code_fences_are_ignored(tmp_path, cli):
    text = body("note:a") + '```markdown\n<Chunk id="example:x">\n</Chunk>\n```\n`<Chunk id="y">`\n'
    path = write(tmp_path, "a.md", doc(chunk("note:a"), text))
    assert diagnostics(cli, path)[1] == []


def test_content_path_rules(tmp_path, cli):
    make_project(tmp_path)
    write(tmp_path, "content/passages/a.md", "Passage A\n")
    write(tmp_path, "outside.md", "secret\n")
    chunks = (chunk("note:a", content_path="passages/a.md")
              + chunk("note:b", content_path="../../outside.md")
              + chunk("note:c", content_path="passages/missing.md")
              + chunk("note:d", content_path="passages/a.md"))
    write(tmp_path, "content/doc.md", doc(chunks, body("note:d")))
    _, found = diagnostics(cli, cwd=tmp_path)
    assert sorted(d["code"] for d in found) == ["CTX308", "CTX309", "CTX310"]


def test_conflicting_entity_declarations_name_both_places(tmp_path, cli):
    make_project(tmp_path)
    write(tmp_path, "content/a.md",
          doc(chunk("note:a", entities="[entity:python]"), body("note:a")))
    write(tmp_path, "content/b.md", doc(
        chunk("note:b"), body("note:b"),
        entities="entities:\n  - id: entity:python\n    name: Python\n    type: tool\n"))
    _, found = diagnostics(cli, cwd=tmp_path)
    assert [d["code"] for d in found] == ["CTX202"]
    assert found[0]["path"] == "content/b.md"
    assert "content/a.md:3:9" in found[0]["message"]


def test_identical_redeclaration_merges(tmp_path):
    from ctxfst.document.kb import inputs_for
    from ctxfst.kb import load_kb, validate

    write(tmp_path, "a.md", doc(chunk("note:a"), body("note:a"), entities=(
        "entities:\n  - id: entity:k8s\n    name: Kubernetes\n    type: platform\n"
        "    aliases: [k8s]\n    owner: ops\n")))
    write(tmp_path, "b.md", doc(chunk("note:b"), body("note:b"), entities=(
        "entities:\n  - id: entity:k8s\n    name: Kubernetes\n    type: platform\n"
        "    aliases: [kube, k8s]\n    tier: 1\n")))
    kb = load_kb(tmp_path, inputs_for([tmp_path]))
    result = validate(kb)
    assert result.diagnostics == []
    entry = result.catalog["entity:k8s"]
    assert entry.entity.aliases == ["k8s", "kube"]
    assert entry.entity.extra_fields() == {"owner": "ops", "tier": 1}
    assert len(entry.declarations) == 2


def test_chunk_ids_unique_across_kb(tmp_path, cli):
    make_project(tmp_path)
    write(tmp_path, "content/a.md", doc(chunk("note:a"), body("note:a")))
    write(tmp_path, "content/b.md", doc(chunk("note:a"), body("note:a"), entities="entities: []"))
    _, found = diagnostics(cli, cwd=tmp_path)
    assert [(d["code"], d["path"]) for d in found] == [("CTX203", "content/b.md")]
    assert "content/a.md" in found[0]["message"]


def test_skill_rules(tmp_path, cli):
    make_project(tmp_path)
    write(tmp_path, "content/world.md", doc(chunk("note:a"), body("note:a")))
    write(tmp_path, "skills/apply/SKILL.md", """
        ---
        name: apply
        description: "Apply for the job"
        preconditions: ["state:has-plan", "NOT state:has-resume", "state:own-state"]
        postconditions: ["goal:hired", "entity:python"]
        related_skills: [missing-skill]
        cost: 3
        idempotent: false
        ---
        Apply.
        """)
    write(tmp_path, "skills/wrong-dir/SKILL.md", "---\nname: other-name\ndescription: x\n---\n")
    write(tmp_path, "skills/bad/SKILL.md",
          "---\nname: Bad--Name\ndescription: x\ncost: huge\n---\n")
    write(tmp_path, "skills/nodesc/SKILL.md", "---\nname: nodesc\n---\n")
    _, found = diagnostics(cli, cwd=tmp_path)
    got = sorted((d["path"].split("/")[1], d["code"]) for d in found)
    assert got == [("apply", "CTX205"), ("apply", "CTX407"), ("apply", "CTX409"),
                   ("bad", "CTX103"), ("bad", "CTX401"), ("nodesc", "CTX101"),
                   ("wrong-dir", "CTX402")]


def test_named_file_in_project_is_checked_in_kb_context(tmp_path, cli):
    make_project(tmp_path)
    write(tmp_path, "content/catalog.md", "---\n" + ENTITIES.strip() + "\n---\n")
    write(tmp_path, "content/bad.md", doc(chunk("note:a", priority="urgent"), body("note:a"),
                                          entities="entities: []"))
    path = write(tmp_path, "content/uses.md", doc(chunk("note:b", entities="[entity:python]"),
                                                  body("note:b"), entities="entities: []"))
    result, found = diagnostics(cli, path, cwd=tmp_path)
    assert result.code == 0 and found == []
    assert result.json()["summary"]["files"] == 1


def test_plain_markdown_in_a_folder_is_skipped_but_named_is_checked(tmp_path, cli):
    write(tmp_path, "README.md", "# Notes\n\nJust prose.\n")
    write(tmp_path, "a.md", doc(chunk("note:a"), body("note:a")))
    result, found = diagnostics(cli, tmp_path)
    assert result.code == 0 and result.json()["summary"]["files"] == 1
    result, found = diagnostics(cli, tmp_path / "README.md")
    assert result.code == 1 and [d["code"] for d in found] == ["CTX010"]


def test_frontmatter_without_chunks_or_entities(tmp_path, cli):
    path = write(tmp_path, "a.md", "---\ntitle: Just a page\n---\nHello\n")
    _, found = diagnostics(cli, path)
    assert [d["code"] for d in found] == ["CTX018"]
