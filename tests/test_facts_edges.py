"""Facts at the edges: extreme numbers and dates, passages in content_path files, and
completeness settings for any entity type (regressions found in review)."""

from __future__ import annotations

import pytest

from ctxfst.document.facts import canonical_date, canonical_number

from .test_facts import build, build_fails, doc, project, write


@pytest.mark.parametrize("value", ["1e1000000", "1e-1000000", "-4e309"])
def test_numbers_beyond_a_double_are_refused_not_crashed(value):
    with pytest.raises(ValueError, match="out of range"):
        canonical_number(value)


def test_long_numbers_keep_every_digit():
    # The default decimal context keeps 28 digits: these two would become one fact.
    assert canonical_number("12345678901234567890123456789") != \
        canonical_number("12345678901234567890123456791")
    assert canonical_number("1e300") == "1" + "0" * 300


@pytest.mark.parametrize("value", ["9999-12-31T23:59:59-01:00", "20260304", "2026-W10-3",
                                   "2026-03-04T10:00:00+0200"])
def test_dates_out_of_range_or_in_other_spellings_are_refused(value):
    with pytest.raises(ValueError):
        canonical_date(value)


def test_extreme_values_in_frontmatter_and_queries_are_clear_errors(tmp_path, capsys, cli):
    root = project(tmp_path)
    write(root, "content/n.md", doc("note:n", "Numbers.", extra=(
        "updated: 9999-12-31T23:59:59-01:00\n"
        "facts:\n  - {namespace: size, key: n, value: \"1e1000000\", value_type: number}\n"
        "  - {namespace: size, key: d, value: \"9999-12-31T23:59:59-01:00\", "
        "value_type: date}\n")))
    result = cli("validate", "--format", "json", cwd=root)
    assert result.code == 1, result.err
    found = {(d["code"], d["line"]) for d in result.json()["diagnostics"]}
    assert {("CTX706", 4), ("CTX706", 5)} <= found
    write(root, "content/n.md", doc("note:n", "Numbers.",
                                    extra="updated: 9999-12-31T23:59:59-01:00\n"))
    build(root, capsys)  # a source date past UTC's range is no date, not a crash
    for value in ("1e1000000", "9999-12-31T23:59:59-01:00"):
        asked = cli("facts", "ask", "--tenant", "default", "--op", "exists", "--value", value,
                    cwd=root)
        assert asked.code in (0, 1) and "internal error" not in asked.err, asked.err


def test_evidence_in_a_content_path_passage_is_checked_by_validation(tmp_path, cli):
    root = project(tmp_path)
    write(root, "content/passages/p.md", "The invoice run happens monthly.\n")
    text = """
        ---
        entities:
          - id: entity:billing
            name: Billing
            type: concept
            facts:
              - {namespace: domain, key: topic, value: billing, evidence: "invoice run"}
        chunks:
          - id: note:p
            context: "billing"
            content_path: passages/p.md
            facts:
              - {namespace: domain, key: cadence, value: monthly, evidence: "%s"}
        ---
    """
    write(root, "content/p.md", text % "happens monthly")
    assert cli("validate", cwd=root).code == 0
    write(root, "content/p.md", text % "happens weekly")
    result = cli("validate", "--format", "json", cwd=root)
    assert result.code == 1
    found = [(d["code"], d["line"]) for d in result.json()["diagnostics"]]
    assert found == [("CTX708", 13)], found


def test_completeness_for_any_entity_type_never_crashes(tmp_path, capsys, cli):
    root = project(tmp_path, '[facts]\ncomplete = { topic = ["a/b"] }\n')
    write(root, "content/a.md", doc("note:a", "Some text."))
    build(root, capsys)
    asked = cli("facts", "ask", "--tenant", "default", "--op", "exists", "--entity-type",
                "topic", "--namespace", "a", "--key", "b", cwd=root)
    assert asked.code == 0 and "internal error" not in asked.err, asked.err
    assert "answer: no" in asked.out or "answer: unknown" in asked.out
    bad = project(tmp_path / "bad", '[facts]\ncomplete = { Document = ["domain/topic"] }\n')
    result = cli("validate", cwd=bad)
    assert result.code == 2 and "lowercase" in result.err


def test_a_plugin_giving_bad_candidates_fails_its_runs_not_the_build(tmp_path, capsys,
                                                                     monkeypatch):
    from .test_facts import install_extractor, runs

    install_extractor(tmp_path, monkeypatch, "odd_extractor", """
        if "tuple" in view.text:
            yield ("not", "a", "candidate")
        elif "namespace" in view.text:
            at = view.text.index("namespace")
            yield Candidate(view.tenant, "document", view.path, "Bad NS", "k", "v", "v",
                            "weird", Evidence("document", view.path, view.path, at, at + 9,
                                              "namespace", "odd", "1", 1.0, None))
    """, imports="from ctxfst.facts.model import Candidate, Evidence")
    root = project(tmp_path / "kb", '[facts]\nextractors = ["odd_extractor:make"]\n')
    write(root, "content/a.md", doc("note:a", "a tuple here"))
    write(root, "content/b.md", doc("note:b", "a namespace here"))
    write(root, "content/c.md", doc("note:c", "plain"))
    out = build(root, capsys)
    assert "Traceback" not in out
    status = {r["source_path"]: (r["status"], r["failure_reason"] or "") for r in runs(root)}
    assert status["content/a.md"][0] == "failed" and "not a Candidate" in status["content/a.md"][1]
    assert status["content/b.md"][0] == "failed" and "'Bad NS' is invalid" in \
        status["content/b.md"][1]
    assert status["content/c.md"] == ("completed", "")


def test_a_partial_ledger_is_an_error_not_a_silent_restart(tmp_path, capsys):

    root = project(tmp_path)
    write(root, "content/a.md", doc("note:a", "Some text."))
    build(root, capsys)
    (root / ".ctxfst/facts/semantic_facts_delta.json").unlink()
    write(root, "content/a.md", doc("note:a", "Other text."))
    assert "incomplete facts ledger" in build_fails(root, capsys)


def test_first_delta_is_a_snapshot_and_rereading_a_span_is_no_update(tmp_path, capsys):
    from .test_facts import delta, facts

    root = project(tmp_path)
    write(root, "content/a.md", doc("note:a", "A Xylophone solo.", extra="title: Tunes\n",
                                    entities="  - id: entity:xylo\n    name: Xylophone\n"
                                             "    type: tool\n"))
    write(root, "content/b.md", doc("note:b", "Nothing else."))
    build(root, capsys)
    first = delta(root)
    assert first["snapshot"] and first["base_build_seq"] == 0
    assert first["added"] == [] and first["counts"]["added"] == len(facts(root))
    # An edit that moves no span of a.md's other facts: only what changed is reported.
    write(root, "content/a.md", doc("note:a", "A Xylophone solo!", extra="title: Tunes\n",
                                    entities="  - id: entity:xylo\n    name: Xylophone\n"
                                             "    type: tool\n"))
    build(root, capsys)
    second = delta(root)
    assert not second["snapshot"] and second["base_build_seq"] == 1
    assert second["updated"] == [] and second["counts"]["updated"] == 0


def test_evidence_of_values_not_written_literally_stays_on_the_value(tmp_path, capsys):
    """Escapes, block scalars and aliases: the evidence is the value as written at its
    place, never a later occurrence of the same words in the body."""
    from .test_facts import facts, file_text

    root = project(tmp_path)
    write(root, "content/u.md", """
        ---
        chunks:
          - id: note:u
            context: "notes"
        title: "Caf\\u00e9 guide"
        facts:
          - key: summary
            namespace: domain
            value_type: text
            value: >
              folded lines
              of a summary
          - {namespace: domain, key: motto, value: &m plain words}
          - {namespace: domain, key: again, value: *m}
        ---
        <Chunk id="note:u">
        Café guide, folded lines of a summary, plain words.
        </Chunk>
    """)
    build(root, capsys)
    text = file_text(root, "content/u.md")
    body = text.index("<Chunk")
    rows = {(r["fact_namespace"], r["fact_key"]): r for r in facts(root)
            if r["entity_type"] == "document"}
    for key in (("document", "title"), ("domain", "summary"), ("domain", "motto"),
                ("domain", "again")):
        row = rows[key]
        start, end = row["evidence_start"], row["evidence_end"]
        assert text[start:end] == row["evidence_excerpt"] and end <= body, (key, row)
    assert rows[("domain", "summary")]["evidence_excerpt"].startswith(">")
    assert "of a summary" in rows[("domain", "summary")]["evidence_excerpt"]


SKILL = """---
name: {name}
description: A skill of one tenant.
{tenant}preconditions: []
postconditions: [state:done-{name}]
---
Do it.
"""


def test_a_skill_declares_its_tenant_and_stays_in_it(tmp_path, capsys, cli):
    root = project(tmp_path)
    write(root, "content/a.md", doc("note:a", "Some text.", tenant="acme"))
    write(root, "skills/acme-skill/SKILL.md", SKILL.format(name="acme-skill",
                                                           tenant="tenant: acme\n"))
    write(root, "skills/open-skill/SKILL.md", SKILL.format(name="open-skill", tenant=""))
    build(root, capsys)

    def skills(tenant: str) -> set[str]:
        result = cli("facts", "ask", "--tenant", tenant, "--op", "list", "--entity-type",
                     "skill", "--format", "json", cwd=root)
        assert result.code == 0, result.err
        return {e["entity_id"] for e in result.json()["entities"]}

    assert skills("acme") == {"skill:acme-skill"}
    assert skills("default") == {"skill:open-skill"}
    write(root, "skills/acme-skill/SKILL.md", SKILL.format(name="acme-skill",
                                                           tenant="tenant: \"acme corp\"\n"))
    result = cli("validate", "--format", "json", cwd=root)
    assert result.code == 1
    errors = [(d["code"], d["line"]) for d in result.json()["diagnostics"]
              if d["severity"] == "error"]
    assert errors == [("CTX709", 4)]


def test_a_source_edited_during_the_stage_fails_it_instead_of_recording_old_facts(
        tmp_path, capsys, monkeypatch):
    """An edit between validation and extraction (same length, so only the bytes tell)
    must not be fingerprinted as extracted: the stage stops and the next build sees it."""
    from ctxfst.facts import build as facts_build

    from .test_facts import runs

    root = project(tmp_path)
    source = write(root, "content/a.md", doc("note:a", "Xylophone text."))
    build(root, capsys)
    source.write_text(doc("note:a", "Marimba!! text."), encoding="utf-8")
    collect = facts_build.collect_sources

    def edit_while_extracting(*args):
        found = collect(*args)
        source.write_text(doc("note:a", "Vibraphon text."), encoding="utf-8")
        return found

    monkeypatch.setattr(facts_build, "collect_sources", edit_while_extracting)
    assert "content/a.md changed during the build" in build_fails(root, capsys)
    monkeypatch.setattr(facts_build, "collect_sources", collect)
    build(root, capsys)  # the next build extracts what the file now says
    assert [r["build_seq"] for r in runs(root) if r["source_path"] == "content/a.md"] == [1, 2]
