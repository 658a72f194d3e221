"""The link tables (pipeline/link_index.py) and the unit store they live in: builds
that answer from the touched ids agree with `ctxfst validate` and with clean builds, in
folder layouts that test the documents' order, and survive a store that is off, cannot
be saved, or is damaged."""
from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

from .conftest import write
from .test_build import _declaring_document, _diagnostic_lines, build, entities_yaml, project

NAMES = ("chunks.json", "entity-profiles.json", "entities.parquet")


def _clean_copy(root: Path, dest: Path, capsys) -> tuple[int, str]:
    shutil.copytree(root, dest, symlinks=True,
                    ignore=shutil.ignore_patterns(".ctxfst", "build", ".doit*"))
    return build(dest, capsys)


def _steps(tmp_path, capsys, cli, root, steps, compare=True):
    outs = []
    for number, (path, text) in enumerate(steps):
        if callable(text):
            text(root)
        elif text is None:
            (root / path).unlink()
        else:
            write(root, path, text)
        code, out = build(root, capsys)
        assert "Traceback" not in out, (number, out)
        full = cli("validate", cwd=root)
        assert _diagnostic_lines(out) == _diagnostic_lines(full.out), (number, out, full.out)
        assert (code == 0) == (full.code == 0), (number, out)
        if code == 0 and compare:
            clean = tmp_path / f"clean-{number}"
            ccode, cout = _clean_copy(root, clean, capsys)
            assert ccode == 0, cout
            for name in NAMES:
                assert (root / "build" / name).read_bytes() == (
                    clean / "build" / name).read_bytes(), (number, name)
        outs.append((code, out))
    return outs


def test_a_document_walked_twice_keeps_its_place(tmp_path, capsys):
    """skills_dir inside content_dir: a document in it is walked twice (content/, then
    skills/) and is one unit, at its first place; the first declaration of a tail, as
    the full link step found it, stays first after an edit elsewhere."""
    root = project(tmp_path / "kb")
    write(root, "ctxfst.toml", 'content_dir = "content"\nskills_dir = "content/skills"\n'
          'embedding_model = "hash-64"\n')
    write(root, "content/skills/s/notes.ctxfst.md", _declaring_document(
        "n", [("state:x", "X", "state", [])], []))
    write(root, "content/z.ctxfst.md", _declaring_document(
        "z", [("entity:x", "X", "concept", [])], []))
    write(root, "content/b.ctxfst.md", _declaring_document("b", [], ["goal:x"]))
    first = [line for line in _diagnostic_lines(build(root, capsys)[1]) if "goal:x" in line]
    assert first and first[0].endswith("did you mean 'state:x'?")
    write(root, "content/b.ctxfst.md", _declaring_document("b", [], ["goal:x", "note:b"]))
    again = [line for line in _diagnostic_lines(build(root, capsys)[1]) if "goal:x" in line]
    assert again == first


def test_damaged_declaration_of_an_unchanged_document(tmp_path, capsys):
    """A kept declaration row that no longer reads back, of a document the edit does not
    touch: the build recomputes (no traceback) and its artifacts are a clean build's."""
    from .test_build import assert_equals_a_clean_build, example

    root = example(tmp_path)
    assert build(root, capsys)[0] == 0
    with sqlite3.connect(root / ".ctxfst/cache/units.sqlite") as db:
        path, key = db.execute("SELECT path, dump FROM link_entities WHERE path != ? "
                               "LIMIT 1", ("content/backend-frameworks.ctxfst.md",)).fetchone()
        assert db.execute("UPDATE link_dumps SET text = CAST('{}' AS BLOB) WHERE key = ?",
                          (key,)).rowcount == 1
    db.close()
    edit = root / "content/backend-frameworks.ctxfst.md"
    text = edit.read_text()
    edit.write_text(text.replace("Goroutines made", "Goroutines kept"))
    code, out = build(root, capsys)
    assert code == 0 and "Traceback" not in out, out
    assert_equals_a_clean_build(root, tmp_path / "clean", capsys, (
        "chunks.parquet", "entities.parquet", "entity-profiles.json", "entity-graph.json",
        "chunk_vectors.parquet"))


def test_damaged_catalog_row_and_declaration(tmp_path, capsys):
    """A catalog row and a kept declaration that do not read back (of documents the
    edit does not touch): compile makes the catalog again, not a traceback."""
    from .test_build import example

    root = example(tmp_path)
    assert build(root, capsys)[0] == 0
    with sqlite3.connect(root / ".ctxfst/cache/units.sqlite") as db:
        entity_id, key = db.execute(
            "SELECT id, dump FROM link_entities WHERE path != ? LIMIT 1",
            ("content/backend-frameworks.ctxfst.md",)).fetchone()
        db.execute("UPDATE link_catalog SET row = '[]' WHERE id = ?", (entity_id,))
        db.execute("UPDATE link_dumps SET text = CAST('{}' AS BLOB) WHERE key = ?", (key,))
    db.close()
    edit = root / "content/backend-frameworks.ctxfst.md"
    edit.write_text(edit.read_text().replace("Goroutines made", "Goroutines kept"))
    code, out = build(root, capsys)
    assert "Traceback" not in out, out


def test_a_build_without_caches_has_the_entity_catalog(tmp_path, capsys, monkeypatch):
    """CTXFST_NO_CACHE=1 (each stage opens an empty in-memory unit store): the same
    artifacts as a build with caches."""
    from .test_build import example

    cached = example(tmp_path / "cached")
    assert build(cached, capsys)[0] == 0
    monkeypatch.setenv("CTXFST_NO_CACHE", "1")
    bare = example(tmp_path / "bare")
    code, out = build(bare, capsys)
    assert code == 0, out
    entities = json.loads((bare / "build/chunks.json").read_text())["entities"]
    assert entities == json.loads((cached / "build/chunks.json").read_text())["entities"]
    for name in NAMES:
        assert (bare / "build" / name).read_bytes() == (cached / "build" / name).read_bytes(), name


def test_a_unit_store_that_cannot_be_saved_gives_no_stale_catalog(tmp_path, capsys, cli,
                                                                   monkeypatch):
    """save() swallows sqlite3.Error ("a read-only or full disk: the next build
    recomputes"); compile must not then read the catalog the store held before."""
    import ctxfst.pipeline.incremental as incremental
    import ctxfst.pipeline.units as units

    root = project(tmp_path / "kb")
    write(root, "content/a.ctxfst.md", _declaring_document(
        "a", [("entity:x", "X", "concept", ["ex"])], ["entity:x"]))
    assert build(root, capsys)[0] == 0
    original = incremental.check_incrementally

    def failing_save(self):  # what save() leaves when its commit fails
        self.db.rollback()
        self.pending.clear()
        self.removed.clear()

    def check(*args, **kwargs):
        with monkeypatch.context() as m:
            m.setattr(units.UnitStore, "save", failing_save)
            return original(*args, **kwargs)

    monkeypatch.setattr(incremental, "check_incrementally", check)
    write(root, "content/a.ctxfst.md", _declaring_document(
        "a", [("entity:x", "X", "concept", ["ex", "more"])], ["entity:x"]))
    assert build(root, capsys)[0] == 0
    entities = json.loads((root / "build/chunks.json").read_text())["entities"]
    assert [e["aliases"] for e in entities] == [["ex", "more"]]


def test_renames_nested_folders_and_the_skills_folder_keep_the_order(tmp_path, capsys, cli):
    root = project(tmp_path / "kb")

    def X(al):  # an entity row, as the documents write it
        return ("entity:x", "X", "concept", al)

    write(root, "content/a.ctxfst.md", _declaring_document("a", [X(["ex"])], ["entity:x"]))
    write(root, "content/sub/a.ctxfst.md", _declaring_document("sa", [X(["sub"])], []))
    write(root, "content/sub-b.ctxfst.md", _declaring_document("sb", [X(["dash"])], []))
    write(root, "content/sub.c.ctxfst.md", _declaring_document("sc", [X(["dot"])], []))
    write(root, "content/é.ctxfst.md", _declaring_document("e", [X(["e"])], []))
    write(root, "skills/s/SKILL.md", "---\nname: s\ndescription: A skill.\n---\nBody.\n")
    write(root, "skills/s/notes.ctxfst.md", _declaring_document("sk", [X(["skill"])], []))
    code, out = build(root, capsys)
    assert code == 0, out

    def rename(src, dst):
        def go(r):
            (r / src).rename(r / dst)
        return go
    y_concept, y_state = ("entity:y", "Y", "concept", []), ("state:y", "Y", "state", [])
    _steps(tmp_path, capsys, cli, root, [
        ("", rename("content/a.ctxfst.md", "content/z.ctxfst.md")),
        ("skills/s/notes.ctxfst.md", _declaring_document("sk", [X(["skill", "more"]),
            ("state:y", "Y", "state", [])], [])),
        ("content/sub/b.ctxfst.md", _declaring_document("sbb", [y_concept], [])),
        ("", rename("content/sub/b.ctxfst.md", "content/zz.ctxfst.md")),
        ("content/zz.ctxfst.md", None),
        ("", rename("content/z.ctxfst.md", "content/a.ctxfst.md")),
        ("content/sub/a.ctxfst.md", _declaring_document("sa", [X(["sub", "two"])], [])),
        ("content/sub/a.ctxfst.md", None),
        ("content/é.ctxfst.md", _declaring_document("e", [X(["e"])], ["goal:y"])),
        ("content/sub/b.ctxfst.md", _declaring_document("sbb", [y_state], [])),
        ("content/sub-b.ctxfst.md", _declaring_document("sb", [X(["dash"]), y_concept], [])),
        ("content/sub/b.ctxfst.md", None),
        ("content/é.ctxfst.md", _declaring_document("e", [X(["e"])], [])),
    ])


def test_damaged_pages_of_the_unit_tables(tmp_path, capsys):
    """A page of unit_docs that no longer reads (disk damage): the build starts its
    units over, as it did when units were key-value rows (_rows: "damaged pages")."""
    from .test_build import example

    root = example(tmp_path)
    assert build(root, capsys)[0] == 0
    path = root / ".ctxfst/cache/units.sqlite"
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        (page_size,) = db.execute("PRAGMA page_size").fetchone()
        (rootpage,) = db.execute("SELECT rootpage FROM sqlite_master WHERE name = "
                                 "'unit_docs'").fetchone()
    db.close()
    data = bytearray(path.read_bytes())
    start = (rootpage - 1) * page_size
    data[start:start + page_size] = b"\xff" * page_size
    path.write_bytes(bytes(data))
    edit = root / "content/backend-frameworks.ctxfst.md"
    edit.write_text(edit.read_text().replace("Goroutines made", "Goroutines kept"))
    code, out = build(root, capsys)
    assert code == 0 and "Traceback" not in out and "internal error" not in out, out


def test_adding_an_entity_is_linked_from_the_ids_it_touches(tmp_path, capsys, monkeypatch):
    """An edit that declares a new id (or drops one) after a clean link: the link step
    answers from the rows, not from every summary (link())."""
    import ctxfst.pipeline.incremental as incremental

    root = project(tmp_path / "kb")
    for name in "abc":
        write(root, f"content/{name}.ctxfst.md", _declaring_document(
            name, [(f"entity:{name}", name.upper(), "concept", [])], []))
    assert build(root, capsys)[0] == 0
    calls = []
    original = incremental.link
    monkeypatch.setattr(incremental, "link", lambda *a, **k: calls.append(1) or original(*a, **k))
    write(root, "content/b.ctxfst.md", _declaring_document(  # an alias: rows alone
        "b", [("entity:b", "B", "concept", ["bee"])], []))
    assert build(root, capsys)[0] == 0 and calls == []
    write(root, "content/d.ctxfst.md", _declaring_document(  # a new id
        "d", [("entity:d", "D", "concept", [])], []))
    assert build(root, capsys)[0] == 0
    assert calls == [], "a new entity id sent the link step through every summary"


def _without_chunks(declares: list[tuple[str, str, str, list[str]]]) -> str:
    """A document declaring (id, name, type, aliases) each, with no chunk."""
    entities = entities_yaml(declares)
    return f"""
        ---
        title: t
        entities:{entities}
        chunks: []
        ---
        Nothing.
        """


def test_a_skills_folder_sorting_first_links_and_type_changes_keep_the_order(tmp_path, capsys, cli):
    root = tmp_path / "kb"
    write(root, "ctxfst.toml", 'content_dir = "zdocs"\nskills_dir = "askills"\n'
          'embedding_model = "hash-64"\n')

    def X(al, t="concept", n="X"):
        return ("entity:x", n, t, al)

    write(root, "askills/s/SKILL.md", "---\nname: s\ndescription: A skill.\n---\nBody.\n")
    write(root, "askills/s/notes.ctxfst.md", _declaring_document("sk", [X(["skill"])], []))
    write(root, "zdocs/b.ctxfst.md", _declaring_document("b", [X(["b"])], ["entity:x"]))
    y_state, y_goal = ("state:y", "Y", "state", []), ("state:y", "Y", "goal", [])
    write(root, "zdocs/sub/t.ctxfst.md", _declaring_document("t", [y_state], []))
    code, out = build(root, capsys)
    assert code == 0, out

    def link(src, dst):
        def go(r):
            (r / src).symlink_to(dst)
        return go

    def cond(name, pre):
        return f"""
        ---
        title: {name}
        entities: []
        chunks:
          - id: note:{name}
            context: A chunk.
            preconditions: [{", ".join(pre)}]
        ---
        <Chunk id="note:{name}">The {name} chunk.</Chunk>
        """
    _steps(tmp_path, capsys, cli, root, [
        ("zdocs/a.ctxfst.md", _declaring_document("a", [X(["a"])], [])),  # content first now
        ("zdocs/c.ctxfst.md", cond("c", ["state:y", "goal:x"])),
        ("zdocs/sub/t.ctxfst.md", _declaring_document("t", [y_goal], [])),
        ("zdocs/sub/t.ctxfst.md",
         _declaring_document("t", [y_state, ("goal:x", "G", "goal", [])], [])),
        ("zdocs/c.ctxfst.md", cond("c", ["state:y"])),
        ("zdocs/a.ctxfst.md", None),
        ("", link("zdocs/l.ctxfst.md", "sub/t.ctxfst.md")),
        ("zdocs/sub/t.ctxfst.md", _without_chunks([("state:y", "Y", "state", ["why"])])),
        ("zdocs/sub/t.ctxfst.md", _without_chunks([("state:y", "Y", "state", ["why", "y2"]),
                                                   ("goal:x", "G", "goal", [])])),
        ("zdocs/l.ctxfst.md", None),
        ("askills/s/notes.ctxfst.md", None),
    ])


def test_a_shared_declaration_gets_its_catalog_row_patched_not_linked_again(
        tmp_path, capsys, cli, monkeypatch):
    """An entity many documents declare alike: adding, removing or moving one of them
    changes only the documents its catalog row names, so the row is patched from the
    kept one, without reading every declaration of the entity (catalog_of); a document
    that declares it otherwise (another alias) has it linked from its declarations
    again. The build equals a clean build each time."""
    from ctxfst.pipeline.link_index import LinkIndex

    asked: list[set[str]] = []
    original = LinkIndex.catalog_of

    def catalog_of(self, ids, position):
        asked.append(set(ids))
        return original(self, ids, position)

    monkeypatch.setattr(LinkIndex, "catalog_of", catalog_of)
    root = project(tmp_path / "kb")
    shared = ("entity:shared", "Shared", "concept", ["common"])

    def declaring(name: str, declared=shared) -> str:
        return _declaring_document(name, [declared, (f"entity:{name}", name, "concept", [])],
                                   ["entity:shared"])

    for name in "abcd":
        write(root, f"content/{name}.ctxfst.md", declaring(name))
    assert build(root, capsys)[0] == 0

    def catalog() -> dict:
        rows = json.loads((root / "build/chunks.json").read_text())["entities"]
        return next(row for row in rows if row["id"] == "entity:shared")

    asked.clear()
    steps = [("content/e.ctxfst.md", declaring("e")),  # added
             ("content/b.ctxfst.md", None),  # removed
             ("content/sub/c.ctxfst.md", lambda kb: (kb / "content/sub").mkdir() or (
                 kb / "content/c.ctxfst.md").rename(kb / "content/sub/c.ctxfst.md"))]
    _steps(tmp_path, capsys, cli, root, steps)
    assert not any("entity:shared" in ids for ids in asked), asked
    assert catalog()["declared_in"] == ["content/a.ctxfst.md", "content/d.ctxfst.md",
                                        "content/e.ctxfst.md", "content/sub/c.ctxfst.md"]
    _steps(tmp_path / "otherwise", capsys, cli, root, [(
        "content/f.ctxfst.md", declaring("f", ("entity:shared", "Shared", "concept",
                                               ["common", "usual"])))])
    assert any("entity:shared" in ids for ids in asked), asked
    assert catalog()["aliases"] == ["common", "usual"]


def test_documents_that_declare_an_entity_alike_hold_one_declaration(tmp_path, capsys, cli,
                                                                     monkeypatch):
    """Documents re-declare the same entities: the units a validation makes hold each
    equal declaration (and its key, id and name) once, a different one apart, and the
    catalog merges them as before."""
    import ctxfst.pipeline.incremental as incremental

    root = project(tmp_path / "kb")
    alike = [("entity:x", "X", "concept", ["ex"])]
    for name in ("a", "b", "c"):
        write(root, f"content/{name}.ctxfst.md", _declaring_document(name, alike, []))
    write(root, "content/d.ctxfst.md", _declaring_document(
        "d", [("entity:x", "X", "concept", ["other"])], []))
    seen = []
    original = incremental.check_incrementally

    def check(*args, **kwargs):
        seen.append(original(*args, **kwargs))
        return seen[-1]

    monkeypatch.setattr(incremental, "check_incrementally", check)
    code, out = build(root, capsys)
    assert code == 0, out
    units = {unit.path.rsplit("/", 1)[-1]: unit for unit in seen[0].units}
    declared = {name: units[f"{name}.ctxfst.md"].summary.entities[0] for name in "abcd"}
    assert declared["a"][4] is declared["b"][4] is declared["c"][4]
    assert declared["a"][1] is declared["c"][1] and declared["a"][2] is declared["c"][2]
    assert units["a.ctxfst.md"].declares[0] is units["c.ctxfst.md"].declares[0]
    assert declared["d"][4] is not declared["a"][4]
    assert declared["d"][4]["aliases"] == ["other"] and declared["a"][4]["aliases"] == ["ex"]
    entities = json.loads((root / "build/chunks.json").read_text())["entities"]
    assert [e["aliases"] for e in entities] == [["ex", "other"]]
