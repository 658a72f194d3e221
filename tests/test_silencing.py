"""Choosing and silencing warnings: [lint] select/ignore/per_file_ignores, --select and
--ignore, `ctxfst: noqa` comments; errors stay; did-you-mean and no misleading CTX204."""

from __future__ import annotations

from .conftest import make_project, write

DOC = """
---
entities:
  - id: entity:system   # ctxfst: noqa CTX508
    name: System
    type: concept
  - id: entity:other
    name: Project
    type: concept
chunks:
  - id: c:one
    context: Too short here  # ctxfst: noqa CTX502
    entities: [entity:system]
  - id: c:two
    context: Also short
---
<Chunk id="c:one">
First body. <!-- ctxfst: noqa CTX511 -->
</Chunk>
<Chunk id="c:two">
Second body.
</Chunk>
"""


def codes(cli, *args, cwd):
    result = cli("lint", *args, "--format", "json", cwd=cwd)
    return result, sorted((d["code"], d["line"]) for d in result.json()["diagnostics"])


def project(tmp_path, settings: str = "", doc: str = DOC):
    make_project(tmp_path)
    if settings:
        with (tmp_path / "ctxfst.toml").open("a", encoding="utf-8") as handle:
            handle.write(settings)
    write(tmp_path, "content/a.md", doc)
    return tmp_path


def test_noqa_comments_silence_their_own_record_only(tmp_path, cli):
    root = project(tmp_path)
    result, found = codes(cli, cwd=root)
    assert result.code == 0
    # entity:system's CTX508 and c:one's CTX502 are silenced; entity:other's CTX508 and
    # c:two's CTX502 and CTX511 are not.
    assert ("CTX508", 7) in found and ("CTX502", 14) in found and ("CTX511", 13) in found
    assert [c for c, _ in found].count("CTX508") == 1
    assert [c for c, _ in found].count("CTX502") == 1
    assert [c for c, _ in found].count("CTX511") == 1  # c:one's body comment silenced it
    # without the comments every one of them is back
    bare = "\n".join(line.split("  # ctxfst")[0].replace(" <!-- ctxfst: noqa CTX511 -->", "")
                     for line in DOC.splitlines())
    write(root, "content/a.md", bare)
    _, all_found = codes(cli, cwd=root)
    assert [c for c, _ in all_found].count("CTX508") == 2
    assert [c for c, _ in all_found].count("CTX502") == 2


def test_bare_noqa_silences_every_warning_of_the_chunk_but_no_error(tmp_path, cli):
    doc = DOC.replace("# ctxfst: noqa CTX502", "# ctxfst: noqa").replace(
        "entities: [entity:system]", "entities: [entity:system, entity:missing]")
    root = project(tmp_path, doc=doc)
    _, found = codes(cli, cwd=root)
    assert not [line for code, line in found if code.startswith("CTX5") and 10 <= line <= 12]
    write(root, "content/a.md", doc.replace("    context: Too short here", ""))
    result = cli("validate", "--strict", "--format", "json", cwd=root)
    assert result.code == 1  # the error stays; the chunk's CTX106 warning does not
    assert [d["code"] for d in result.json()["diagnostics"]] == ["CTX204"]


def test_settings_select_ignore_and_per_file_ignores(tmp_path, cli):
    root = project(tmp_path, '[lint]\nignore = ["CTX511"]\n')
    _, found = codes(cli, cwd=root)
    assert "CTX511" not in {c for c, _ in found} and "CTX502" in {c for c, _ in found}
    write(root, "ctxfst.toml", 'content_dir = "content"\n[lint]\nselect = ["CTX50"]\n')
    _, found = codes(cli, cwd=root)
    assert {c for c, _ in found} == {"CTX502", "CTX508"}
    write(root, "ctxfst.toml", '[lint.per_file_ignores]\n"content" = ["CTX5"]\n')
    _, found = codes(cli, cwd=root)
    assert found == []
    write(root, "ctxfst.toml", '[lint.per_file_ignores]\n"content/b*.md" = ["CTX5"]\n')
    _, found = codes(cli, cwd=root)
    assert found  # another file's pattern


def test_command_line_select_replaces_and_ignore_adds(tmp_path, cli):
    root = project(tmp_path, '[lint]\nselect = ["CTX502"]\n')
    _, found = codes(cli, "--select", "CTX508,CTX511", cwd=root)
    assert {c for c, _ in found} == {"CTX508", "CTX511"}
    _, found = codes(cli, "--ignore", "CTX502", cwd=root)
    assert found == []


def test_bad_codes_are_usage_and_setting_errors(tmp_path, cli):
    root = project(tmp_path)
    for args, words in ((("--ignore", "CTX204"), "CTX204 is an error"),
                        (("--select", "CTX5X"), "is not a code"),
                        (("--ignore", "CTX599"), "matches no warning or info")):
        result = cli("lint", *args, cwd=root)
        assert result.code == 2 and words in result.err, (args, result.err)
    write(root, "ctxfst.toml", '[lint]\nignore = ["CTX201"]\n')
    result = cli("lint", cwd=root)
    assert result.code == 2
    assert "ctxfst.toml:2:10: error CTX803: [lint] 'ignore': CTX201 is an error" in result.err
    write(root, "ctxfst.toml", '[lint]\nignor = ["CTX511"]\n')
    result = cli("lint", cwd=root)
    assert result.code == 2 and "CTX802" in result.err and "ignor" in result.err
    write(root, "ctxfst.toml", '[lint.per_file_ignores]\n"../x" = ["CTX511"]\n')
    result = cli("lint", cwd=root)
    assert result.code == 2 and "CTX803" in result.err and "without '..'" in result.err


def test_noqa_that_cannot_apply_is_reported(tmp_path, cli):
    doc = DOC.replace("# ctxfst: noqa CTX502", "# ctxfst: noqa CTX204, CTX5O2")
    root = project(tmp_path, doc=doc)
    _, found = codes(cli, cwd=root)
    assert found.count(("CTX513", 11)) == 2
    result = cli("lint", cwd=root)
    assert "CTX204 is an error" in result.out and "; did you mean CTX5" in result.out


def test_validate_and_the_build_honour_the_settings(tmp_path, cli):
    doc = DOC.replace("    context: Also short\n", "")  # a CTX106 warning
    root = project(tmp_path, doc=doc)
    result = cli("validate", "--strict", cwd=root)
    assert result.code == 1 and "CTX106" in result.out
    write(root, "ctxfst.toml", 'content_dir = "content"\nembedding_model = "hash-16"\n'
          '[lint]\nignore = ["CTX106"]\n')
    result = cli("validate", "--strict", cwd=root)
    assert result.code == 0 and "CTX106" not in result.out
    result = cli("build", "--root", root, cwd=root)
    assert result.code == 0 and "CTX106" not in result.out


def test_refused_entity_adds_no_second_error_and_typos_get_a_hint(tmp_path, cli):
    doc = """
    ---
    entities:
      - id: entity:fastapi
        name: FastAPI
        type: framework-x
      - id: entity:python
        name: Python
        type: skill
    chunks:
      - id: c:one
        context: FastAPI is a web framework for building APIs with Python quickly
        entities: [entity:fastapi, entity:pyhton, entity:nothing-like-it]
    ---
    <Chunk id="c:one">
    FastAPI text.
    </Chunk>
    """
    root = project(tmp_path, doc=doc)
    result = cli("validate", "--format", "json", cwd=root)
    found = result.json()["diagnostics"]
    assert [d["code"] for d in found] == ["CTX103", "CTX204", "CTX204"]
    assert "fastapi" not in " ".join(d["message"] for d in found if d["code"] == "CTX204")
    messages = [d["message"] for d in found if d["code"] == "CTX204"]
    assert messages[0].endswith("did you mean 'entity:python'?")
    assert "did you mean" not in messages[1]
