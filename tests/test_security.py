"""Untrusted knowledge bases: one test (or more) per class of hole
(docs/security.md's table).

Each test builds a hostile knowledge base in a temporary folder and goes through the
public CLI or API; each failed on the code before the fix. docs/security.md gives the
trust model. Sections follow its classes: caches, paths and tenants, scanners and
values, the world state and outputs, readers of build/.
"""

from __future__ import annotations

import gc
import hashlib
import json
import math
import os
import pickle
import re
import shutil
import sqlite3
import stat
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

import ctxfst
from ctxfst.artifacts.cache import ParseCache
from ctxfst.artifacts.reader import published_folder
from ctxfst.config import find_project
from ctxfst.document.lint import lint
from ctxfst.document.parse import parse_text
from ctxfst.document.source import MAX_FILE_BYTES
from ctxfst.files import display_path
from ctxfst.kb import KnowledgeBase, load_kb, validate
from ctxfst.pipeline.runner import run_build
from ctxfst.retrieval.search import Index, search
from ctxfst.validation import project_inputs

from .conftest import add_skill_script, copy_example, make_project, reseal, run_process, write

# ======================================================================================
# Hole 1: caches under .ctxfst/ hold plain data, checked on read. A hostile or damaged
# row (parse cache, embeddings, lexical index, facts ledger) runs no code and is a miss
# or a clear error, never a traceback; --no-cache and CTXFST_NO_CACHE=1 ignore them.
# ======================================================================================


GOOD = """\
---
title: Alpha
entities:
  - id: entity:alpha
    name: Alpha
    type: concept
chunks:
  - id: note:alpha
    context: "What alpha is"
    entities: [entity:alpha]
    created_at: 2026-03-12
---
<Chunk id="note:alpha">
Alpha is the first letter.
</Chunk>
"""
FIXED = GOOD.replace("alpha", "beta")
BAD = FIXED.replace("    name: Alpha\n", "")  # CTX101: an entity without a name

# Every kind of value the frontmatter YAML can hold, for the cold/warm round trip.
TRICKY = """\
---
title: "Tricky \\u00e9 \\U0001F600 \\x01 line\\u2028sep back\\\\slash \\"q\\""
when: 2026-03-12
stamp: 2026-03-12T10:20:30+05:30
naive: 2001-12-14 21:59:43.10
1: int key
true: bool key
null: null key
2024-01-01: date key
3.5: float key
numbers: [0.1, -0.0, 1.0e+300, 123456789012345678901234567890, 0x1F, 1_000, 190:20:30, .5]
strings: ["", "1.0", "true", "null", "~", "  spaced  ", "tab\\there", 'single ''q''']
base: &base
  tags: [shared, "x"]
  priority: high
block: |
  multi
  line
folded: >
  folded
  text
entities:
  - id: entity:tricky
    name: Tricky
    type: concept
    since: 2024-01-01
    nested: {a: [1, {b: [2, {c: null}]}], "": empty key}
chunks:
  - id: note:tricky
    <<: *base
    context: "About tricky"
    entities: [entity:tricky]
    created_at: 2026-03-12T10:20:30Z
    reviewed: 2025-02-03
    extra: *base
  - id: note:second
    context: "Second"
    created_at: 2026-03-12
---
<Chunk id="note:tricky">
Tricky body with "quotes", a \u2028 separator and an emoji \U0001F600.
</Chunk>

%% chunk-start id="note:second" %%
Second body.
%% chunk-end %%
"""


def project(root: Path, **files: str) -> Path:
    write(root, "ctxfst.toml", 'content_dir = "content"\nskills_dir = "skills"\n'
          'embedding_model = "hash-64"\n')
    (root / "skills").mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        write(root, f"content/{name}.md", text)
    return root


def parse_db(root: Path) -> Path:
    return root / ".ctxfst" / "cache" / "parse.sqlite"


def row_key(root: Path, name: str) -> str:
    """The parse cache key of content/<name>.md, as validate run from root computes it."""
    path = root / "content" / f"{name}.md"
    return ParseCache.key(display_path(path), path.read_bytes())


def read_row(root: Path, key: str):
    with sqlite3.connect(parse_db(root)) as db:
        found = db.execute("SELECT value FROM parsed WHERE key = ?", (key,)).fetchone()
    return found[0] if found else None


def put_row(root: Path, key: str, value) -> None:
    db = sqlite3.connect(parse_db(root))
    with db:
        db.execute("INSERT OR REPLACE INTO parsed VALUES (?, ?)", (key, value))
    db.close()


def validate_with_cli(cli, root: Path, *args: str):
    result = cli("validate", "--format", "json", *args, cwd=root)
    assert "Traceback" not in result.err and result.code != 70, result.err
    return result


class _MakeMarker:
    """Unpickling this creates a folder: what any code a pickle runs could do."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


def test_a_precomputed_pickle_row_runs_no_code(tmp_path, cli, monkeypatch):
    root = project(tmp_path / "kb", good=GOOD, bad=BAD)
    expected = validate_with_cli(cli, root)
    assert expected.code == 1 and "CTX101" in expected.codes()
    monkeypatch.chdir(root)
    marker = tmp_path / "code-ran"
    # The key is a hash of the path and bytes: anyone can precompute a row for a file.
    put_row(root, row_key(root, "bad"), pickle.dumps(_MakeMarker(marker), protocol=5))
    result = validate_with_cli(cli, root)
    assert not marker.exists(), "unpickling a cache row ran code"
    assert result.code == 1 and result.json() == expected.json()
    assert pickle.dumps(_MakeMarker(marker)) not in (read_row(root, row_key(root, "bad")) or b"")


def test_damaged_or_foreign_parse_rows_are_parsed_again(tmp_path, cli, monkeypatch):
    root = project(tmp_path / "kb", good=GOOD, bad=BAD)
    expected = validate_with_cli(cli, root)
    monkeypatch.chdir(root)
    key = row_key(root, "bad")
    written = read_row(root, key)

    def altered(change):
        def make() -> bytes:
            copy = json.loads(written)  # plain data
            change(copy)
            return json.dumps(copy).encode()  # ensure_ascii: lone surrogates stay escapes
        return make

    deep: dict = {"chunks": []}
    for _ in range(500):  # JSON reads it; code that walks it would exhaust the stack
        deep = {"x": deep}
    damaged = {
        "garbage": lambda: os.urandom(64),
        "truncated": lambda: written[: len(written) // 2],
        "empty list": lambda: b"[]",
        "an object": lambda: b'{"frontmatter": null}',
        "wrong field types": lambda: b"[1, 2, 3, 4, 5, 6, 7]",
        "a row of the format before": altered(lambda r: r.pop()),
        "marks not text": altered(lambda r: r.__setitem__(6, [1, 2])),
        "text, not a blob": lambda: written.decode("utf-8", "replace"),
        "a number": lambda: 7,
        "plain Markdown": lambda: b"null",  # would hide the document from validation
        "very deep": lambda: b"[" * 100_000 + b"]" * 100_000,
        "too large": lambda: written[:-1] + b" " * (9 * len(BAD) + 70_000) + b"]",
        "nan": altered(lambda r: r[0].update(title=float("nan"))),
        "1e999": lambda: written.replace(b'"title":', b'"size":1e999,"title":', 1),
        "nesting": altered(lambda r: r.__setitem__(0, deep)),
        "surrogate id": altered(lambda r: r[3][0].__setitem__(0, "\ud800")),
        "bool line": altered(lambda r: r[3][0].__setitem__(2, True)),
        "unknown code": altered(lambda r: r[4].append([1, 1, "CTX999", "x", "error"])),
        "bad severity": altered(lambda r: r[4].append([1, 1, "CTX101", "x", "fatal"])),
        "bad sha": altered(lambda r: r.__setitem__(5, "not a sha")),
        "frontmatter a list": altered(lambda r: r.__setitem__(0, ["chunks"])),
    }
    for name, make in damaged.items():
        put_row(root, key, make())
        result = validate_with_cli(cli, root)
        assert result.code == 1 and result.json() == expected.json(), name
        assert read_row(root, key) == written, f"{name}: the row was not written again"
    assert json.loads(written)[0]["entities"], "a row holds the frontmatter as plain data"


def test_a_foreign_parse_cache_database_is_replaced(tmp_path, cli):
    root = project(tmp_path / "kb", good=GOOD, bad=BAD)
    expected = validate_with_cli(cli, root)
    foreign = [
        "CREATE TABLE parsed (key TEXT PRIMARY KEY, other INTEGER)",  # no value column
        "CREATE TABLE parsed (key TEXT PRIMARY KEY, value BLOB NOT NULL); "
        "CREATE TRIGGER refuse BEFORE INSERT ON parsed BEGIN SELECT RAISE(ABORT, 'no'); END",
        "CREATE VIEW parsed AS SELECT 'k' AS key, x'80' AS value",
    ]
    for schema in foreign:
        parse_db(root).unlink()
        db = sqlite3.connect(parse_db(root))
        db.executescript(schema)
        db.close()
        result = validate_with_cli(cli, root)
        assert result.code == 1 and result.json() == expected.json(), schema


def test_no_cache_ignores_a_well_formed_hostile_row(tmp_path, cli, monkeypatch):
    root = project(tmp_path / "kb", good=GOOD, bad=BAD)
    validate_with_cli(cli, root)
    monkeypatch.chdir(root)
    (root / "content" / "bad.md").write_text(FIXED)
    validate_with_cli(cli, root)
    good_row = read_row(root, row_key(root, "bad"))  # what validate cached for FIXED
    (root / "content" / "bad.md").write_text(BAD)
    # A row that says "no problems" for the bad file: the key is not secret, so with the
    # cache the row's word is taken. A CI job on an untrusted change turns caches off.
    put_row(root, row_key(root, "bad"), good_row)
    assert validate_with_cli(cli, root).code == 0
    for args in (["validate"], ["lint"], ["validate", "--staged"]):
        assert "--no-cache" in cli(*args[:1], "--help", cwd=root).out
    ignored = validate_with_cli(cli, root, "--no-cache")
    assert ignored.code == 1 and "CTX101" in ignored.codes()
    # lint: the row's frontmatter (an entity named Alpha) against the file's (no name)
    assert "CTX509" in cli("lint", "--format", "json", cwd=root).codes()
    assert "CTX509" not in cli("lint", "--format", "json", "--no-cache", cwd=root).codes()
    process = run_process("validate", "--format", "json", cwd=root, env={"CTXFST_NO_CACHE": "1"})
    assert process.returncode == 1 and "CTX101" in process.stdout
    assert read_row(root, row_key(root, "bad")) == good_row  # and no cache was written


def _build(root: Path, capsys, *args: str) -> dict:
    code = run_build(root, list(args))
    out = capsys.readouterr()
    assert code == 0 and "Traceback" not in out.out + out.err, out.out + out.err
    if args:
        return {}
    results = json.loads((root / "build" / "run_results.json").read_text())
    return {s["stage"]: s for s in results["stages"]}


def test_cold_and_warm_parses_give_identical_results(tmp_path, capsys, cli, monkeypatch):
    root = project(tmp_path / "kb", tricky=TRICKY, good=GOOD)
    write(root, "content/README.md", "# Plain Markdown\n\nNo frontmatter here.\n")
    raw = tmp_path / "raw"
    shutil.copytree(root, raw)
    cold = _build(root, capsys)
    assert cold["validate"]["documents_from_cache"] == 0
    first = {p.name: p.read_bytes() for p in (root / "build").iterdir() if p.is_file()
             and p.name != "run_results.json"}
    # A cold build takes each parse through its cache row (the worker encodes it); with
    # no rows at all the documents are used as parsed: the same artifacts.
    from ctxfst.document import syntax_cache

    with monkeypatch.context() as env:
        env.setattr(syntax_cache, "encode", lambda doc, limit: None)
        _build(raw, capsys)
    assert {p.name: p.read_bytes() for p in (raw / "build").iterdir() if p.is_file()
            and p.name != "run_results.json"} == first
    chunks = {c["id"]: c for c in json.loads(first["chunks.json"])["chunks"]}
    assert chunks["note:tricky"]["extra"] == {"tags": ["shared", "x"], "priority": "high"}
    _build(root, capsys, "clean")
    warm = _build(root, capsys)  # from the compilation units: nothing is parsed
    assert warm["validate"]["documents_parsed"] == 0
    assert warm["validate"]["documents_from_cache"] == 0
    assert {p.name: p.read_bytes() for p in (root / "build").iterdir() if p.is_file()
            and p.name != "run_results.json"} == first
    _build(root, capsys, "clean")
    (root / ".ctxfst/cache/units.sqlite").unlink()
    warm = _build(root, capsys)  # from the parse cache's rows
    assert warm["validate"]["documents_from_cache"] == 3
    assert {p.name: p.read_bytes() for p in (root / "build").iterdir() if p.is_file()
            and p.name != "run_results.json"} == first
    # Diagnostics located by the deferred source map are the same from a cached row.
    for broken, cached in ((TRICKY.replace("    name: Tricky\n", "    name: [not, text]\n"), 3),
                           (TRICKY.replace("    name: Tricky\n", "    name: Tricky\n\tx: 1\n"), 3),
                           (TRICKY.replace("title:", "title: [unclosed\nnext:"), 3),
                           (TRICKY.replace("    context: \"Second\"\n",
                                           "    context: \"Second\"\n    context: twice\n"),
                            2)):  # a duplicate key: positions already computed, not cached
        write(root, "content/tricky.md", broken)
        fresh = validate_with_cli(cli, root, "--no-cache")
        assert fresh.code == 1 and "content/tricky.md" in fresh.out
        validate_with_cli(cli, root)  # caches the broken document
        assert validate_with_cli(cli, root).json() == fresh.json()
        cache = ParseCache(parse_db(root))
        load_kb(root, project_inputs(find_project(root)), cache)
        cache.close()
        assert cache.hits == cached


def test_the_row_format_covers_every_document_field():
    from dataclasses import fields

    from ctxfst.document import syntax_cache
    from ctxfst.document.model import ParsedDocument

    assert sorted(f.name for f in fields(ParsedDocument)) == sorted(
        syntax_cache.ROW_FIELDS + syntax_cache.READER_FIELDS + syntax_cache.TYPED_FIELDS)


def _vectors(root: Path) -> sqlite3.Connection:
    return sqlite3.connect(root / ".ctxfst" / "cache" / "embeddings.sqlite")


def test_hostile_embedding_rows_are_embedded_again(tmp_path, capsys):
    root = project(tmp_path / "kb", good=GOOD, other=GOOD.replace("alpha", "gamma"))
    _build(root, capsys)
    first = (root / "build" / "chunk_vectors.parquet").read_bytes()
    with _vectors(root) as db:
        rows = db.execute("SELECT text_sha, dim, vector FROM vectors ORDER BY text_sha").fetchall()
    assert len(rows) >= 4 and all(dim == 64 for _, dim, _ in rows)
    damage = [
        lambda dim, blob: (dim, blob[:-4]),  # short blob
        lambda dim, blob: (dim, np.full(dim, np.nan, np.float32).tobytes()),  # not finite
        lambda dim, blob: (dim, (np.frombuffer(blob, np.float32) * 3).tobytes()),  # not unit
        lambda dim, blob: (32, blob[:128]),  # another dimension than the model's
    ]
    with _vectors(root) as db:
        for change, (sha, dim, blob) in zip(damage, rows[:len(damage)], strict=True):
            db.execute("UPDATE vectors SET dim = ?, vector = ? WHERE text_sha = ?",
                       (*change(dim, blob), sha))
    _build(root, capsys, "clean")
    stages = _build(root, capsys)
    assert stages["embed"]["embedded"] == len(damage)
    assert (root / "build" / "chunk_vectors.parquet").read_bytes() == first
    # A whole cache of another, consistent dimension (a foreign model's, say).
    with _vectors(root) as db:
        unit = np.zeros(3, np.float32)
        unit[0] = 1.0
        db.execute("UPDATE vectors SET dim = 3, vector = ?", (unit.tobytes(),))
    _build(root, capsys, "clean")
    stages = _build(root, capsys)
    assert stages["embed"]["embedded"] == len(rows)
    assert (root / "build" / "chunk_vectors.parquet").read_bytes() == first


def test_a_damaged_lexical_index_is_rebuilt(tmp_path, capsys):
    root = project(tmp_path / "kb", good=GOOD, other=GOOD.replace("alpha", "gamma"))
    _build(root, capsys)
    cache = tmp_path / "lexical"
    cache.mkdir()
    query = "alpha letter"
    expected = [(h.chunk_id, round(h.score, 5)) for h in
                search(Index(root / "build", "hash-64", cache), query, None, "lexical", 5).hits]
    saved = next(cache.glob("lexical-*.npz"))
    with np.load(saved) as data:
        arrays = dict(data)
    damaged = [
        {**arrays, "idf": arrays["idf"].astype(str)},  # numbers as text
        {**arrays, "rows": arrays["rows"].astype(np.float64)},  # rows that index nothing
        {**arrays, "starts": arrays["starts"].astype(np.float64)},
        {**arrays, "weights": np.full_like(arrays["weights"], np.nan)},
        {**arrays, "rows": arrays["rows"].reshape(1, -1)},  # another shape
    ]
    for bad in damaged:
        with open(saved, "wb") as handle:
            np.savez(handle, **bad)
        index = Index(root / "build", "hash-64", cache)
        got = [(h.chunk_id, round(h.score, 5)) for h in search(index, query, None, "lexical",
                                                                5).hits]
        assert got == expected
    # Compressed members could inflate to any size: the index save() writes is stored.
    with open(saved, "wb") as handle:
        np.savez_compressed(handle, **arrays)
    search(Index(root / "build", "hash-64", cache), query, None, "lexical", 5)
    with zipfile.ZipFile(next(cache.glob("lexical-*.npz"))) as archive:
        assert {i.compress_type for i in archive.infolist()} == {zipfile.ZIP_STORED}


def test_a_damaged_facts_ledger_is_a_clear_error(tmp_path, capsys):
    root = project(tmp_path / "kb", good=GOOD, other=GOOD.replace("alpha", "gamma"))
    _build(root, capsys)
    ledger = root / ".ctxfst" / "facts"
    runs_file = ledger / "semantic_fact_extraction_runs.parquet"
    facts_file = ledger / "semantic_facts.parquet"
    saved = {p: p.read_bytes() for p in ledger.iterdir()}
    runs, facts = pq.read_table(runs_file), pq.read_table(facts_file)

    def with_rows(table, change):
        rows = table.to_pylist()
        for row in rows:
            change(row)
        return pa.Table.from_pylist(rows, schema=table.schema)

    damaged = [
        (runs_file, pa.table({"x": [1, 2]})),  # another table altogether
        (runs_file, with_rows(runs, lambda r: r.update(source_path=None))),
        (facts_file, with_rows(facts, lambda r: r.update(evidence=None))),
        (facts_file, with_rows(facts, lambda r: r.update(fact_id=None, is_active=None))),
        (facts_file, facts.replace_schema_metadata(
            {**facts.schema.metadata, b"ctxfst.build_seq": b"-5"})),
    ]
    for number, (path, table) in enumerate(damaged):
        for original, data in saved.items():
            original.write_bytes(data)
        pq.write_table(table, path)
        write(root, "content/good.md", GOOD + f"\nEdit {number}.\n")  # the facts stage runs
        code = run_build(root, [])
        out = capsys.readouterr()
        text = out.out + out.err
        assert code not in (0, 70) and "Traceback" not in text, text
        assert "unreadable facts ledger" in text and "remove the folder" in text, text
    for original, data in saved.items():
        original.write_bytes(data)
    write(root, "content/good.md", GOOD + "\nFinal edit.\n")
    assert run_build(root, []) == 0


def test_no_pickle_marshal_shelve_or_eval_in_the_package():
    package = Path(ctxfst.__file__).parent
    unsafe = re.compile(r"\b(import (pickle|marshal|shelve|dill)|cloudpickle|allow_pickle=True"
                        r"|(?<![.\w])(eval|exec)\(|yaml\.(unsafe_)?load\()")
    for path in package.rglob("*.py"):
        found = unsafe.search(path.read_text(encoding="utf-8"))
        assert found is None, f"{path.relative_to(package)}: {found.group(0)}"


def test_a_damaged_doit_state_is_replaced_not_a_traceback(tmp_path, capsys):
    root = project(tmp_path / "kb", good=GOOD, other=GOOD.replace("alpha", "gamma"))
    _build(root, capsys)
    state = root / ".ctxfst" / "doit.db"
    first = (root / "build" / "chunks.json").read_bytes()
    saved = state.read_bytes()
    damaged = ["{not json", "[1, 2]", json.dumps({"_values_:": 5, "deps:": 3}), None,
               b'{"\xff": 1}']
    for number, value in enumerate([b"not a database" * 100, *damaged]):
        state.write_bytes(saved)
        if isinstance(value, bytes) and value.startswith(b"not a database"):
            state.write_bytes(value)
        else:
            with sqlite3.connect(state) as db:
                db.execute("UPDATE doit SET task_data = ?", (value,))
            db.close()
        write(root, "content/good.md", GOOD + f"\nEdit {number}.\n")
        code = run_build(root, [])
        out = capsys.readouterr()
        assert code == 0 and "Traceback" not in out.out + out.err, out.out + out.err
        assert "doit.db is not doit's state" in out.err
    write(root, "content/good.md", GOOD)
    _build(root, capsys)
    assert (root / "build" / "chunks.json").read_bytes() == first


# ======================================================================================
# Untrusted knowledge bases, holes 2 and 3: every path stays inside the project, and a
# tenant mapping that matches nothing fails closed. Each test builds a hostile KB in tmp_path.
# ======================================================================================


PATHS_DOC = """\
---
chunks:
  - id: {chunk}
    context: "about {chunk}"
{extra}---
<Chunk id="{chunk}">
{text}
</Chunk>
"""


def doc(chunk: str, text: str = "Some text.", extra: str = "") -> str:
    return PATHS_DOC.format(chunk=chunk, text=text, extra=extra)


def settings(root: Path, extra: str) -> Path:
    return write(root, "ctxfst.toml", 'content_dir = "content"\nskills_dir = "skills"\n'
                 f'embedding_model = "hash-16"\n{extra}')


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def victim(tmp_path: Path) -> tuple[Path, dict[str, bytes]]:
    """A folder beside the KB holding files named like artifacts."""
    folder = tmp_path / "victim"
    for name in ("manifest.json", "chunks.json", "notes.md"):
        write(folder, name, f"precious {name}\n")
    (folder / ".staging").mkdir()
    write(folder / ".staging", "keep.txt", "keep\n")
    return folder, snapshot(folder)


def located(err: str, code: str, line: int, path: str = "ctxfst.toml") -> bool:
    return f"{path}:{line}:" in err and f"error {code}:" in err


def doit(project: Path, *args: str) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).with_name("doit")
    write(project, "dodo.py", (Path(__file__).parents[1] / "dodo.py").read_text())
    return subprocess.run([str(exe), *args], cwd=project, capture_output=True, text=True,
                          check=False)


def test_build_dir_outside_the_project_is_never_written_or_cleaned(tmp_path, cli):
    target, before = victim(tmp_path)
    kb = tmp_path / "kb"
    settings(kb, 'build_dir = "../victim"\n')
    write(kb, "content/a.md", doc("note:a"))
    result = cli("build", "--root", kb)
    assert result.code == 2 and located(result.err, "CTX804", 4), result.err
    assert cli("build", "--root", kb, "clean").code == 2
    assert cli("validate", cwd=kb).code == 2
    for args in ((), ("clean",)):  # the real doit, through the project's dodo.py
        run = doit(kb, *args)
        assert run.returncode == 2 and "error CTX804" in run.stderr, run.stdout + run.stderr
    assert snapshot(target) == before
    assert not (kb / ".ctxfst").exists()  # checked before anything was touched
    # The same through a link: build/ -> ../victim, and an absolute path.
    (kb / "ctxfst.toml").write_text('embedding_model = "hash-16"\n')
    (kb / "build").symlink_to(target)
    assert cli("build", "--root", kb).code == 2 and doit(kb, "clean").returncode == 2
    (kb / "build").unlink()
    settings(kb, f'build_dir = "{target}"\n')
    assert cli("build", "--root", kb).code == 2
    assert snapshot(target) == before


def test_build_dir_that_holds_the_sources_is_refused(tmp_path, cli):
    for text, line in (('build_dir = "."\n', 1), ('content_dir = "data/content"\n'
                                                   'build_dir = "data"\n', 2)):
        kb = tmp_path / str(line)
        write(kb, "data/content/a.md", doc("note:a"))
        write(kb, "ctxfst.toml", text)
        before = snapshot(kb)
        result = cli("build", "--root", kb)
        assert result.code == 2 and located(result.err, "CTX805", line), result.err
        assert cli("build", "--root", kb, "clean").code == 2
        assert snapshot(kb) == before


def test_content_dir_outside_the_project_is_refused(tmp_path, cli):
    write(tmp_path, "other/secret.md", doc("secret:s", "someone else's text"))
    kb = tmp_path / "kb"
    write(kb, "ctxfst.toml", 'content_dir = "../other"\nembedding_model = "hash-16"\n')
    for args in (("validate",), ("build",), ("query", "text", "--mode", "lexical")):
        result = cli(*args, cwd=kb)
        assert result.code == 2 and located(result.err, "CTX804", 1), result.err
    assert not (kb / "build").exists()
    # pyproject.toml's [tool.ctxfst] is located as well; skills_dir through a link too.
    (kb / "ctxfst.toml").unlink()
    (kb / "linked").symlink_to(tmp_path / "other")
    write(kb, "pyproject.toml", '[project]\nname = "x"\n\n[tool.ctxfst]\n'
          'skills_dir = "linked"\n')
    result = cli("validate", cwd=kb)
    assert result.code == 2 and located(result.err, "CTX804", 5, "pyproject.toml"), result.err


def test_input_names_that_are_not_utf8_are_refused_and_never_compiled(tmp_path, cli):
    """A document, folder, skill or extra-edge file named by bytes that are not UTF-8
    (another system's file names): located errors, not read, never a traceback (no
    artifact, JSON or Parquet, can name them)."""
    kb = tmp_path / "kb"
    settings(kb, "")
    write(kb, "content/a.md", doc("note:a"))
    odd = os.fsdecode(b"\xff")
    write(kb, f"content/x{odd}.md", doc("note:x"))
    write(kb, f"content/d{odd}/inside.md", doc("note:inside"))
    write(kb, f"content/e{odd}.edges.json", "[]")
    write(kb, f"skills/s{odd}/SKILL.md", "---\nname: s\ndescription: x\n---\nbody\n")
    result = cli("validate", "--format", "json", cwd=kb)
    assert result.code == 1
    found = {(d["code"], d["path"]) for d in result.json()["diagnostics"]}
    assert found == {("CTX811", "content/x\udcff.md"), ("CTX811", "content/d\udcff"),
                     ("CTX811", "content/e\udcff.edges.json"), ("CTX811", "skills/s\udcff")}
    build = cli("build", "--root", kb)
    assert build.code == 1 and "Traceback" not in build.out + build.err
    assert "content/x\\udcff.md:1:1: error CTX811" in build.out + build.err
    assert not (kb / "build/manifest.json").exists()
    for name in (f"content/x{odd}.md", f"content/d{odd}/inside.md", f"content/e{odd}.edges.json",
                 f"skills/s{odd}/SKILL.md"):
        (kb / name).unlink()
    (kb / f"content/d{odd}").rmdir()
    (kb / f"skills/s{odd}").rmdir()
    assert cli("build", "--root", kb).code == 0


def test_input_files_linking_out_of_the_project_are_refused_and_never_compiled(tmp_path, cli):
    outside = write(tmp_path, "outside/secret.md", doc("secret:s", "the neighbour's secret"))
    kb = tmp_path / "kb"
    settings(kb, "")
    write(kb, "content/a.md", doc("note:a"))
    (kb / "content/secret.md").symlink_to(outside)
    write(tmp_path, "outside/skill/SKILL.md", "---\nname: skill\ndescription: x\n---\nbody\n")
    (kb / "skills/own").mkdir(parents=True)
    (kb / "skills/own/SKILL.md").symlink_to(tmp_path / "outside/skill/SKILL.md")
    edges = write(tmp_path, "outside/x.edges.json", "not json")
    (kb / "content/x.edges.json").symlink_to(edges)
    result = cli("validate", "--format", "json", cwd=kb)
    assert result.code == 1
    found = {(d["code"], d["path"]) for d in result.json()["diagnostics"]}
    assert found >= {("CTX809", "content/secret.md"), ("CTX809", "skills/own/SKILL.md"),
                     ("CTX809", "content/x.edges.json")}, found
    assert all(code == "CTX809" for code, _ in found)  # not read: no parse errors of theirs
    named = cli("validate", "--format", "json", "content", cwd=kb)  # a folder named
    assert named.code == 1 and "CTX809" in named.codes()
    build = cli("build", "--root", kb)
    assert build.code != 0 and "content/secret.md:1:1: error CTX809" in build.out + build.err
    assert not (kb / "build/chunks.json").exists()
    (kb / "content/x.edges.json").unlink()
    (kb / "skills/own/SKILL.md").unlink()
    (kb / "skills/own").rmdir()
    (kb / "content/secret.md").unlink()
    assert cli("build", "--root", kb).code == 0  # a link inside the project is fine
    (kb / "content/again.md").symlink_to(kb / "content/a.md")
    assert cli("validate", "--format", "json", cwd=kb).codes() == ["CTX203"]  # read, twice


def test_extra_edges_patterns_cannot_reach_outside(tmp_path, cli):
    write(tmp_path, "x/e.edges.json", "[]")
    kb = tmp_path / "kb"
    write(kb, "content/a.md", doc("note:a"))
    for pattern in ("../x/*.json", f"{tmp_path}/x/*.json", "sub/../../x/*.json"):
        settings(kb, f'extra_edges = [\n  "**/*.edges.json",\n  "{pattern}",\n]\n')
        result = cli("validate", cwd=kb)
        assert result.code == 2 and located(result.err, "CTX804", 6), result.err
        assert "internal error" not in result.err


def test_ctxfst_folder_and_staging_links_out_are_refused(tmp_path, cli):
    target, before = victim(tmp_path)
    kb = copy_example(tmp_path / "kb", "hash-16")
    (kb / ".ctxfst").symlink_to(target)
    result = cli("build", "--root", kb)
    assert result.code == 2 and "error CTX804" in result.err, result.err
    (kb / ".ctxfst").unlink()
    (kb / ".ctxfst/cache").mkdir(parents=True)
    (kb / ".ctxfst/cache/parse.sqlite").symlink_to(target / "notes.md")
    assert cli("validate", cwd=kb).code == 2 and cli("build", "--root", kb).code == 2
    (kb / ".ctxfst/cache/parse.sqlite").unlink()
    (kb / "build").mkdir()
    (kb / "build/.staging").symlink_to(target / ".staging")
    result = cli("build", "--root", kb)
    assert result.code == 2 and "build/.staging" in result.err
    assert snapshot(target) == before


def test_a_forged_publication_journal_writes_nothing_outside(tmp_path, cli):
    kb = copy_example(tmp_path / "kb", "hash-16")
    write(kb, "payload.txt", "written by a stranger\n")
    (kb / "build/.staging").mkdir(parents=True)
    # build/.staging/../../payload.txt is kb/payload.txt; build/../../payload.txt is outside.
    write(kb, "build/.publish.json", json.dumps({"files": ["../../payload.txt"]}))
    result = cli("build", "--root", kb)
    assert result.code == 0, result.err
    assert not (tmp_path / "payload.txt").exists()


TENANT_DOCS = {
    "content/secret/pay.md": doc("secret:pay", "Payroll details.", "    facts:\n      - "
                                 "{namespace: hr, key: salary, value: ultrasecret}\n"),
    "content/public/a.md": doc("public:a", "Open text.", "    facts:\n      - "
                               "{namespace: hr, key: salary, value: public}\n"),
}


@pytest.mark.parametrize("key, code", [("content/Secret", "CTX806"), ("content/secrte", "CTX806"),
                                      ("/abs", "CTX804"), ("content/public/a.md", "CTX806")])
def test_tenant_folders_that_match_nothing_fail_closed(tmp_path, cli, key, code):
    kb = tmp_path / "kb"
    settings(kb, f'\n[facts]\ntenants = {{ "{key}" = "secret" }}\n')
    for name, text in TENANT_DOCS.items():
        write(kb, name, text)
    result = cli("build", "--root", kb)
    assert result.code == 2 and located(result.err, code, 6), result.err
    answer = cli("facts", "ask", "--tenant", "default", "--op", "list", "--format", "json",
                 cwd=kb)
    assert answer.code != 0 and "ultrasecret" not in answer.out
    # Built with a correct key first, then mistyped: the old build is never served either.
    settings(kb, '\n[facts.tenants]\n"content/secret" = "secret"\n')
    assert cli("build", "--root", kb).code == 0
    settings(kb, f'\n[facts.tenants]\n"{key}" = "secret"\n')
    answer = cli("facts", "ask", "--tenant", "default", "--op", "list", "--format", "json",
                 cwd=kb)
    assert answer.code == 2 and located(answer.err, code, 6) and "ultrasecret" not in answer.out


def test_a_tenant_folder_without_sources_stops_the_build(tmp_path, cli):
    kb = tmp_path / "kb"
    settings(kb, '\n[facts]\ntenants = { "content/secret" = "secret", "content/empty" = "x" }\n')
    for name, text in TENANT_DOCS.items():
        write(kb, name, text)
    write(kb, "content/empty/README.txt", "no documents here")
    result = cli("build", "--root", kb)
    assert result.code != 0 and located(result.out + result.err, "CTX807", 6), result.err
    assert not (kb / "build/semantic_facts.parquet").exists()


def test_a_source_whose_tenant_cannot_be_decided_is_never_served(tmp_path):
    from ctxfst.config import BuildSettings, find_project
    from ctxfst.facts.build import collect_sources, document_tenant
    from ctxfst.facts.extractors import ExtractionError
    from ctxfst.kb import load_kb
    from ctxfst.validation import project_inputs

    kb = make_project(tmp_path)
    write(kb, "content/a.md", doc("note:a", extra="", text="x").replace(
        "---\nchunks", "---\ntenant: \"not a tenant\"\nchunks", 1))
    assert document_tenant({"tenant": "not a tenant"}, "content/a.md", BuildSettings()) is None
    assert document_tenant({"tenant": 5}, "content/a.md", BuildSettings()) is None
    config = find_project(kb)
    loaded = load_kb(config.root, project_inputs(config))
    with pytest.raises(ExtractionError, match="cannot be decided"):
        collect_sources(config.root, loaded, config.build)


def test_a_state_path_typed_on_the_command_line_is_the_users(tmp_path, cli):
    """--state may name a file outside the project (the person typed it); one written
    inside the project must not leave it through a link there, nor land in the sources;
    the default world state must stay inside."""
    kb = copy_example(tmp_path / "kb", "hash-16")
    assert cli("build", "--root", kb).code == 0
    goal = "goal:edge-api-learning-plan"
    for state in ("../agent/ws.json", str(tmp_path / "elsewhere.json")):
        (tmp_path / "agent").mkdir(exist_ok=True)
        result = cli("state", "init", "--goal", goal, "--state", state, cwd=kb)
        assert result.code == 0, result.err
        assert cli("state", "show", "--state", state, cwd=kb).code == 0
    assert (tmp_path / "agent/ws.json").is_file() and (tmp_path / "elsewhere.json").is_file()
    # A world state (or its event log) planted as a link out of the project.
    (kb / "mine.json.events.jsonl").symlink_to(tmp_path / "log.jsonl")
    result = cli("state", "init", "--goal", goal, "--state", "mine.json", cwd=kb)
    assert result.code == 2 and "CTX804" in result.err and "through a link" in result.err
    (kb / ".ctxfst/world-state.json").symlink_to(tmp_path / "state.json")
    result = cli("state", "init", "--goal", goal, cwd=kb)
    assert result.code == 2 and "CTX804" in result.err
    assert not (tmp_path / "log.jsonl").exists() and not (tmp_path / "state.json").exists()
    (kb / ".ctxfst/world-state.json").unlink()
    result = cli("state", "init", "--goal", goal, "--state", "content/ws.json", cwd=kb)
    assert result.code == 2 and "CTX810" in result.err, result.err
    assert not (kb / "content/ws.json").exists()
    assert cli("state", "init", "--goal", goal, "--state", "inside.json", cwd=kb).code == 0


def test_output_paths_typed_on_the_command_line_are_the_users(tmp_path, cli):
    """report --out, export graph --out and export lancedb --db write where the person
    said, in the project or out of it, but never out of it through a link in it, and
    never over the sources."""
    kb = copy_example(tmp_path / "kb", "hash-16")
    assert cli("build", "--root", kb).code == 0
    (tmp_path / "reports").mkdir()
    report = cli("report", "--out", str(tmp_path / "reports/kb.html"), "--no-lint", cwd=kb)
    assert report.code == 0, report.err
    assert (tmp_path / "reports/kb.html").read_text().startswith("<!DOCTYPE html>")
    graph = cli("export", "graph", "--format", "graphml", "--out", "../reports/kb.graphml",
                cwd=kb)
    assert graph.code == 0, graph.err
    assert (tmp_path / "reports/kb.graphml").is_file()
    (kb / "out").symlink_to(tmp_path / "reports")
    before = sorted(os.listdir(tmp_path / "reports"))
    for command in (("report", "--out", "out/r.html", "--no-lint"),
                    ("export", "graph", "--format", "gexf", "--out", "out/g.gexf")):
        result = cli(*command, cwd=kb)
        assert result.code == 2 and "CTX804" in result.err, result.err
    for command in (("report", "--out", "content/r.html", "--no-lint"),
                    ("export", "graph", "--format", "gexf", "--out", "ctxfst.toml"),
                    ("export", "graph", "--format", "gexf", "--out", "skills")):
        result = cli(*command, cwd=kb)
        assert result.code == 2 and "CTX810" in result.err, (command, result.err)
    assert sorted(os.listdir(tmp_path / "reports")) == before
    assert "[graph]" not in (kb / "ctxfst.toml").read_text()
    # A settings path out of the project is still refused: the project is a stranger's.
    write(kb, "ctxfst.toml", 'content_dir = "../reports"\nembedding_model = "hash-16"\n')
    result = cli("report", "--out", str(tmp_path / "reports/again.html"), cwd=kb)
    assert result.code == 2 and "CTX804" in result.err, result.err


def test_an_export_db_is_a_folder_the_user_names_anywhere_but_over_the_sources(tmp_path,
                                                                               cli):
    pytest.importorskip("lancedb")
    kb = copy_example(tmp_path / "kb", "hash-16")
    assert cli("build", "--root", kb).code == 0
    write(kb, "db.txt", "a file\n")
    result = cli("export", "lancedb", "--db", "db.txt", cwd=kb)
    assert result.code == 2 and "CTX808" in result.err and "is a file" in result.err
    assert (kb / "db.txt").read_text() == "a file\n"
    (kb / "lance").symlink_to(tmp_path)
    result = cli("export", "lancedb", "--db", "lance", cwd=kb)
    assert result.code == 2 and "CTX804" in result.err, result.err
    for db in (".", "content", "skills/extra"):
        result = cli("export", "lancedb", "--db", db, cwd=kb)
        assert result.code == 2 and "CTX810" in result.err, (db, result.err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kb"]
    assert cli("export", "lancedb", "--db", "../data/career.lance", cwd=kb).code == 0
    assert (tmp_path / "data/career.lance").is_dir()
    assert cli("export", "lancedb", "--db", "own-db", cwd=kb).code == 0


def test_an_unreadable_folder_is_an_error_not_skipped(tmp_path, cli, monkeypatch):
    kb = make_project(tmp_path / "kb")
    write(kb, "content/a.md", doc("note:a"))
    write(kb, "content/private/b.md", doc("note:b", extra="    entities: [entity:none]\n"))
    real = os.scandir

    def scandir(path="."):  # as os.scandir fails for a normal user on a 0o000 folder
        if Path(path).name == "private":
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)

    monkeypatch.setattr(os, "scandir", scandir)
    result = cli("validate", "--format", "json", cwd=kb)
    assert result.code == 1, result.out + result.err
    diagnostics = result.json()["diagnostics"]
    assert [(d["code"], d["path"]) for d in diagnostics] == [("CTX001", "content/private")]
    assert "Permission denied" in diagnostics[0]["message"]
    build = cli("build", "--root", kb)
    assert build.code != 0 and "content/private:1:1: error CTX001" in build.out
    outside = cli("validate", tmp_path / "kb" / "content")  # a folder named on its own
    assert outside.code in (1, 2) and "content/private" in outside.out + outside.err


@pytest.mark.skipif(os.geteuid() != 0 or not Path("/usr/bin/setpriv").exists(),
                    reason="needs root to run the check as another user")
def test_an_unreadable_folder_as_a_normal_user(tmp_path):
    base = Path("/tmp") / f"ctxfst-perm-{os.getpid()}"
    kb = make_project(base / "kb")
    try:
        write(kb, "content/a.md", doc("note:a"))
        write(kb, "content/private/b.md", doc("note:b"))
        os.chmod(base, 0o755)
        for folder in (kb, kb / "content", kb / "skills"):
            os.chmod(folder, 0o755)
        os.chmod(kb / "content/private", 0)
        import ctxfst

        src = Path(ctxfst.__file__).parents[1]  # the code under test, as imported here
        result = subprocess.run(
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
             sys.executable, "-c", "import sys; from ctxfst.cli import main; "
             "sys.exit(main(['validate', '--format', 'json']))"],
            cwd=kb, capture_output=True, text=True, check=False,
            env={**os.environ, "PYTHONPATH": str(src), "HOME": str(base)})
        if result.returncode not in (0, 1) or not result.stdout.startswith("{"):
            pytest.skip(f"cannot run as nobody here: {result.stderr[-300:]}")
        codes = [(d["code"], d["path"]) for d in json.loads(result.stdout)["diagnostics"]]
        assert result.returncode == 1 and ("CTX001", "content/private") in codes
    finally:
        os.chmod(kb / "content/private", 0o755)
        import shutil

        shutil.rmtree(base, ignore_errors=True)


def test_settings_errors_are_located_with_a_code(tmp_path, cli):
    cases = [
        ("similar_topk = 3\n", "CTX802", 1, 1),
        ('embedding_model = "hash-16"\nsimilar_top_k = "five"\n', "CTX803", 2, 17),
        ('content_dir = "content"\nbuild_dir = [\n', "CTX801", 3, 1),
        ('[facts]\nfallback_limit = 1000\n', "CTX803", 2, 18),
        ('embedding_device = "gpu0"\n', "CTX803", 1, 20),
        ('engine = "spark"\n', "CTX803", 1, 10),
        ('ray_concurrency = -1\n', "CTX803", 1, 19),
        ('similar_exact_max = 1\n', "CTX803", 1, 21),
        ('[facts]\nunknown = 1\n', "CTX802", 2, 1),
        ('[facts.tenants]\n"content/a" = "has space"\n', "CTX803", 2, 15),
        ('content_dir = "a\\u0000b"\n', "CTX803", 1, 15),
    ]
    for text, code, line, column in cases:
        (tmp_path / "content/a").mkdir(parents=True, exist_ok=True)
        (tmp_path / "ctxfst.toml").write_text(text)
        result = cli("validate", cwd=tmp_path)
        assert result.code == 2, (text, result.err)
        assert result.err.startswith(f"ctxfst.toml:{line}:{column}: error {code}: "), \
            (text, result.err)


def test_a_settings_file_linking_out_of_the_project_is_not_used(tmp_path, cli):
    write(tmp_path, "elsewhere.toml", 'skills_dir = "nothing"\n')
    write(tmp_path, "elsewhere-pyproject.toml", '[tool.ctxfst]\nskills_dir = "nothing"\n')
    kb = make_project(tmp_path / "kb")
    (kb / "ctxfst.toml").unlink()
    (kb / "ctxfst.toml").symlink_to(tmp_path / "elsewhere.toml")
    result = cli("validate", cwd=kb)
    assert result.code == 2 and result.err.startswith("ctxfst.toml:1:1: error CTX804"), \
        result.err
    (kb / "ctxfst.toml").unlink()
    (kb / "pyproject.toml").symlink_to(tmp_path / "elsewhere-pyproject.toml")
    assert "error CTX804" in cli("validate", cwd=kb).err
    # Another tool's pyproject.toml may be a link: without [tool.ctxfst] it is not ours.
    write(tmp_path, "elsewhere-pyproject.toml", '[project]\nname = "x"\n')
    (kb / "pyproject.toml").unlink()
    settings(kb, "")
    write(kb, "content/a.md", doc("note:a"))
    (kb / "content/pyproject.toml").symlink_to(tmp_path / "elsewhere-pyproject.toml")
    assert cli("validate", cwd=kb / "content").code == 0


# ======================================================================================
# Hostile knowledge-base input: scanners stay linear, and what validates also builds.
#
# Timing tests compare the time of one input at 1x and 8x size within one run (a ratio,
# never a wall-clock limit); 1x is the first size, doubling, that takes 50 ms or more.
# CPU time of this process: other processes on a busy machine do not skew the ratio.
# ======================================================================================


LINEAR = 12  # 8x the input may cost at most this many times as much
KB_WIDE_GROWTH = 16  # the same for KB-wide checks that sort what they find


def _cpu_seconds(work, times: int = 1) -> float:
    """CPU time of running work() times times, without the cyclic GC's pauses."""
    gc.collect()
    gc.disable()
    try:
        started = time.process_time()
        for _ in range(times):
            work()
        return time.process_time() - started
    finally:
        gc.enable()


def _growth(prepare, start: int) -> float:
    """Time of prepare(8n)() over time of prepare(n)(), n doubling from start until the
    work takes 50 ms (a quadratic scanner reaches it at a small n and then shows 64x).

    The 1x work runs 8 times per round, so both sides are timed over as long a stretch
    of a busy machine; rounds repeat (best of each side) while noise may explain a
    ratio over LINEAR.
    """
    size = start
    while True:
        small = prepare(size)
        small()  # caches filled
        if _cpu_seconds(small) >= 0.05:
            break
        size *= 2
    large = prepare(8 * size)
    base = grown = math.inf
    for _ in range(4):
        base = min(base, _cpu_seconds(small, 8) / 8)
        grown = min(grown, _cpu_seconds(large))
        if not LINEAR <= grown / base <= 4 * LINEAR:
            break
    return grown / base


HEAD = '---\nchunks:\n  - id: note:a\n    context: "A note"\n---\n'
# name -> body of n units; each took quadratic time or memory before
HOSTILE_BODIES = {
    "unclosed tag openers on one line": lambda n: '<Chunk id="' * n,
    "tag openers without '>'": lambda n: "<Chunk" * n,
    "closing tags on one line": lambda n: "</Chunk>" * n,
    "closing tags after backticks": lambda n: "`</Chunk>" * n,
    "a backtick run before tags": lambda n: "x " + "`" * (8 * n) + " </Chunk>" * n,
    "a long attribute name": lambda n: "<Chunk " + "a" * (64 * n) + ">",
    "chunks nested deep": lambda n: "".join(f'<Chunk id="c{i}">\n{"x" * 40}\n'
                                            for i in range(n)) + "</Chunk>\n" * n,
    "chunk-start markers": lambda n: "%% chunk-start " * n,
    "percent runs": lambda n: "%%chunk-start" + "%" * (16 * n) + " chunk",
    "long lines of '<'": lambda n: ("<" * 1000 + " chunk\n") * n,
    "nested code fences": lambda n: "````\n```\n<Chunk>\n" * n,
}


def test_body_scanners_are_linear():
    """Hole 4: no document body makes the hook slow (a line of `<Chunk id="` repeated
    ran for minutes, '</Chunk>' * 80000 for 11 s)."""
    def prepare(body):
        def at(size):
            text = HEAD + body(size)
            return lambda: parse_text(text, "hostile.md")
        return at

    ratios = {name: _growth(prepare(body), 64) for name, body in HOSTILE_BODIES.items()}
    assert all(ratio < LINEAR for ratio in ratios.values()), ratios


def test_nested_chunks_keep_each_character_once():
    """A passage ends where a (wrongly) nested chunk opens: N deep is not N copies."""
    depth = 2000
    body = "".join(f'<Chunk id="c{i}">\n{"x" * 10}\n' for i in range(depth))
    doc = parse_text(HEAD + body + "</Chunk>\n" * depth, "nested.md")
    assert sum(len(b.content) for b in doc.bodies.values()) <= len(body)
    assert {d.code for d in doc.diagnostics} >= {"CTX303"}


def _kb(tmp_path: Path, texts: list[str]) -> KnowledgeBase:
    kb = KnowledgeBase(root=tmp_path)
    kb.documents = [parse_text(text, f"d{n}.md") for n, text in enumerate(texts)]
    return kb


def test_lint_near_duplicates_are_linear_on_copies(tmp_path, cli):
    """Hole 4: lint on identical chunks (1,000: 8.8 s; 2,000: 34 s), and on near-copies
    (a common token in every prefix); the findings stay those of a pair-by-pair search."""
    def prepare(unique: bool):
        def at(size):
            texts = [f'---\nchunks:\n  - id: note:c{n}\n    context: "the same context'
                     f' here"\n    tags: [t{n}]\n---\n<Chunk id="note:c{n}">\nalpha beta '
                     f'gamma delta epsilon zeta eta theta{f" u{n}" if unique else ""}\n'
                     '</Chunk>\n' for n in range(size)]
            kb = _kb(tmp_path, texts)
            validation = validate(kb)
            return lambda: lint(kb, validation)
        return at

    identical, near = _growth(prepare(False), 16), _growth(prepare(True), 16)
    assert identical < LINEAR and near < LINEAR, (identical, near)
    # Each copy after the first names the first, as comparing every pair would.
    for n in range(4):
        write(tmp_path, f"content/d{n}.md", f'---\nchunks:\n  - id: note:c{n}\n    context: '
              f'"a context that says what this is about"\n    tags: [t{n}]\n---\n'
              f'<Chunk id="note:c{n}">\nalpha beta gamma delta epsilon zeta\n</Chunk>\n')
    result = cli("lint", tmp_path / "content", "--format", "json")
    found = sorted(d["message"] for d in result.json()["diagnostics"] if d["code"] == "CTX501")
    assert [m.split("'")[1] for m in found] == ["note:c1", "note:c2", "note:c3"]
    assert all("100% alike 'note:c0'" in m for m in found)


def test_kb_checks_are_linear(tmp_path):
    """Dependency cycles (every chunk back to the first: messages grew with the chain),
    unknown references (each scanned the catalog for a hint), evidence excerpts (each
    read every passage) and re-declared entities (each merge rescanned the lists) cost
    no more per item at 8x size."""
    def cycles(size):
        chunks = "".join(f"  - {{id: n:c{i}, context: x, dependencies: [n:c{i + 1}, n:c0]}}\n"
                         for i in range(size))
        body = "".join(f'<Chunk id="n:c{i}">x</Chunk>\n' for i in range(size))
        kb = _kb(tmp_path, [f"---\nchunks:\n{chunks}---\n{body}"])
        return lambda: validate(kb)

    def unknown_references(size):
        entities = "".join(f"  - {{id: entity:e{i}, name: E{i}, type: concept}}\n"
                           for i in range(size))
        refs = ", ".join(f"state:u{i}" for i in range(size))
        kb = _kb(tmp_path, [f"---\nentities:\n{entities}chunks:\n  - id: n:a\n    context: x"
                            f"\n    state_refs: [{refs}]\n---\n<Chunk id=\"n:a\">x</Chunk>\n"])
        return lambda: validate(kb)

    def evidence(size):
        facts = "".join(f'  - {{namespace: d, key: k, value: v{i}, evidence: "q{i}z"}}\n'
                        for i in range(size))
        text = (f"---\nfacts:\n{facts}chunks:\n  - id: n:a\n    context: x\n---\n"
                f'<Chunk id="n:a">\n' + ("abcdefghij" * 7 + "\n") * size + "</Chunk>\n")
        return lambda: parse_text(text, "facts.md")

    def redeclarations(size):
        kb = _kb(tmp_path, [
            "---\nentities:\n  - id: entity:x\n    name: X\n    type: concept\n    aliases: ["
            + ", ".join(f"a{n}x{k}" for k in range(10)) + f"]\nchunks:\n  - id: n:c{n}\n"
            f"    context: x\n---\n<Chunk id=\"n:c{n}\">x</Chunk>\n" for n in range(size)])
        return lambda: validate(kb)

    ratios = {"cycles": _growth(cycles, 64), "unknown references":
              _growth(unknown_references, 64), "evidence": _growth(evidence, 64),
              "an entity declared in every document": _growth(redeclarations, 16)}
    # These KB-wide passes end in sorting their findings (n log n: about 10x at 8x the
    # size on a quiet machine); the quadratic versions they replace showed 64x.
    assert all(ratio < KB_WIDE_GROWTH for ratio in ratios.values()), ratios


def test_long_cycles_are_reported_by_their_ends(tmp_path):
    size = 500
    chunks = "".join(f"  - {{id: n:c{i}, context: x, dependencies: [n:c{(i + 1) % size}]}}\n"
                     for i in range(size))
    body = "".join(f'<Chunk id="n:c{i}">x</Chunk>\n' for i in range(size))
    cycle = [d for d in validate(_kb(tmp_path, [f"---\nchunks:\n{chunks}---\n{body}"])
                                 ).diagnostics if d.code == "CTX207"]
    assert len(cycle) == 1 and len(cycle[0].message) < 400
    assert cycle[0].message.startswith("dependency cycle: n:c0 -> n:c1 -> ")
    assert cycle[0].message.endswith("n:c499 -> n:c0") and "481 more" in cycle[0].message


def test_evidence_past_the_reading_budget_is_refused(tmp_path, monkeypatch):
    """A document whose excerpts would need too much reading gets one located error."""
    from ctxfst.document import facts

    monkeypatch.setattr(facts, "MAX_EVIDENCE_READ", 10_000)
    entries = "".join(f'  - {{namespace: d, key: k, value: v{i}, evidence: "q{i}z"}}\n'
                      for i in range(50))
    doc = parse_text(f"---\nfacts:\n{entries}chunks:\n  - id: n:a\n    context: x\n---\n"
                     f'<Chunk id="n:a">\n{"abc " * 1000}\n</Chunk>\n', "facts.md")
    refused = [d for d in doc.diagnostics if d.code == "CTX312"]
    assert len(refused) == 1 and refused[0].line > 2
    assert not doc.facts[("document",)]  # nothing kept unchecked


# --- Hole 5: what validates must build -----------------------------------------------

DOC = """---
title: T
entities:
  - id: entity:a
    name: A
    type: concept
  - id: entity:b
    name: B
    type: concept
chunks:
  - id: note:a
    context: "A note about a and b"
    entities: [entity:a, entity:b]
{chunk}---
<Chunk id="note:a">
Some text about a and b.
</Chunk>
"""
SKILL = "---\nname: s\ndescription: A skill\n{fields}---\nDo it.\n"


def _edge(field: str) -> str:
    return '[{"source": "entity:a", "target": "entity:b", "relation": "REQUIRES", ' + field + "}]"


# name -> (file, its text, code, line)
UNBUILDABLE = {
    "score NaN": ("content/x.edges.json", _edge('"score": NaN'), "CTX105", 1),
    "score 'NaN'": ("content/x.edges.json", _edge('"score": "NaN"'), "CTX105", 1),
    "score Infinity": ("content/x.edges.json", _edge('"score": Infinity'), "CTX105", 1),
    "score 1e999": ("content/x.edges.json", _edge('"score": 1e999'), "CTX105", 1),
    "yaml score 1e999": ("content/x.edges.yaml", "- source: entity:a\n  target: entity:b\n"
                         "  relation: REQUIRES\n  score: '1e999'\n", "CTX105", 4),
    "runtime edge score": (".ctxfst/runtime.edges.json", _edge('"score": "-Infinity"'),
                           "CTX105", 1),
    "shared_chunk_count 3e9": ("content/x.edges.json", _edge('"shared_chunk_count": '
                                                             "3000000000"), "CTX105", 1),
    "shared_chunk_count 1e20": ("content/x.edges.json", _edge(
        '"shared_chunk_count": 100000000000000000000'), "CTX105", 1),
    "version 2^63": ("content/doc.md", DOC.format(chunk=f"    version: {2 ** 63}\n"),
                     "CTX105", 14),
    "skill cost inf": ("skills/s/SKILL.md", SKILL.format(fields="metadata:\n  cost: 'inf'\n"),
                       "CTX103", 5),
}


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """A small knowledge base, built once."""
    root = tmp_path_factory.mktemp("built")
    write(root, "ctxfst.toml", 'content_dir = "content"\nskills_dir = "skills"\n'
          'embedding_model = "hash-64"\n')
    write(root, "content/doc.md", DOC.format(chunk=""))
    write(root, "skills/s/SKILL.md", SKILL.format(fields=""))
    result = run_process("build", cwd=root)
    assert result.returncode == 0, result.stdout + result.stderr
    return root


def _artifacts(root: Path) -> dict[str, bytes]:
    return {path.relative_to(root).as_posix(): path.read_bytes()
            for path in sorted((root / "build").rglob("*")) if path.is_file()}


@pytest.mark.parametrize("name", UNBUILDABLE)
def test_what_the_build_cannot_write_is_a_validation_error(built, tmp_path, cli, name):
    """Hole 5: NaN/Infinity/1e999 scores, int32/int64 overflows validated, then crashed
    the build (a doit traceback, exit 2)."""
    file, text, code, line = UNBUILDABLE[name]
    root = tmp_path / "kb"
    shutil.copytree(built, root)
    before = _artifacts(root)
    write(root, file, text)
    report = cli("validate", "--format", "json", cwd=root)
    assert report.code == 1
    found = [(d["code"], d["path"], d["line"]) for d in report.json()["diagnostics"]]
    assert found == [(code, file, line)], found
    result = run_process("build", cwd=root)
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    assert "Traceback" not in output and f"{file}:{line}:" in output and code in output
    assert _artifacts(root) == before  # nothing half-written


def test_a_chunk_field_named_like_a_build_column_still_builds(built, tmp_path):
    """A chunk's `document_title: 5` (an extra field) went into the string column."""
    root = tmp_path / "kb"
    shutil.copytree(built, root)
    write(root, "content/doc.md", DOC.format(chunk="    document_title: 5\n").replace(
        "title: T\n", "", 1))
    result = run_process("build", cwd=root)
    assert result.returncode == 0, result.stdout + result.stderr


# --- Hole 6: located errors where an internal error (exit 70) was --------------------

LOCATED = {
    "content_path NUL": ("content/doc.md", DOC.format(chunk='    content_path: "a\\0b.md"\n')
                         .replace('<Chunk id="note:a">\nSome text about a and b.\n</Chunk>\n',
                                  ""), "CTX311", 14),
    "content_path 300-byte name": ("content/doc.md", DOC.format(
        chunk=f"    content_path: {'a' * 300}.md\n").replace(
        '<Chunk id="note:a">\nSome text about a and b.\n</Chunk>\n', ""), "CTX311", 14),
    "content_path link loop": ("content/doc.md", DOC.format(
        chunk="    content_path: loop.txt\n").replace(
        '<Chunk id="note:a">\nSome text about a and b.\n</Chunk>\n', ""), "CTX311", 14),
    "content_path over the size limit": ("content/doc.md", DOC.format(
        chunk="    content_path: huge.txt\n").replace(
        '<Chunk id="note:a">\nSome text about a and b.\n</Chunk>\n', ""), "CTX004", 14),
    "entity state_refs 5": ("content/doc.md", DOC.replace(
        "    type: concept\n  - id: entity:b", "    type: concept\n    state_refs: 5\n"
        "  - id: entity:b").format(chunk=""), "CTX102", 7),
    "entity state_refs 'abc'": ("content/doc.md", DOC.replace(
        "    type: concept\n  - id: entity:b", "    type: concept\n    state_refs: abc\n"
        "  - id: entity:b").format(chunk=""), "CTX102", 7),
    "skill script NUL": ("skills/s/SKILL.md", SKILL.format(fields='script: "run\\0.sh"\n'),
                         "CTX414", 4),
    "skill script outside its folder": ("skills/s/SKILL.md", SKILL.format(
        fields="metadata:\n  script: ../../../bin/sh\n"), "CTX414", 5),
}


@pytest.mark.parametrize("name", LOCATED)
def test_unusable_paths_and_lists_are_located_errors(tmp_path, name):
    """Hole 6: content_path with a NUL byte or a 300-byte name, entity `state_refs: 5`
    (exit 70) or a string (read one character per id); a skill script path; a
    content_path file the build cannot read."""
    file, text, code, line = LOCATED[name]
    write(tmp_path, "ctxfst.toml", 'content_dir = "content"\nskills_dir = "skills"\n')
    write(tmp_path, "content/doc.md", DOC.format(chunk=""))
    write(tmp_path, "skills/s/SKILL.md", SKILL.format(fields=""))
    os.symlink("loop.txt", tmp_path / "content" / "loop.txt")
    with open(tmp_path / "content" / "huge.txt", "wb") as huge:
        huge.truncate(MAX_FILE_BYTES + 1)  # the build could not read it
    write(tmp_path, file, text)
    result = run_process("validate", "--format", "json", cwd=tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    import json

    found = [(d["code"], d["path"], d["line"]) for d in json.loads(result.stdout)["diagnostics"]]
    assert found == [(code, file, line)], found


def test_reading_a_file_under_a_limit_allocates_what_it_holds(tmp_path):
    """read_regular() under a size limit allocates what the file holds, not the limit:
    an 8 MB buffer per file read left glibc a memory map per document kept, and a
    100,000-document build ran out of the process's 65,530 maps. A file that grows past
    the limit while it is read is still refused."""
    import tracemalloc

    from ctxfst.artifacts.io import FileTooLarge, read_regular

    small = tmp_path / "small.md"
    small.write_bytes(b"x" * 7000)
    tracemalloc.start()
    try:
        data = read_regular(small, MAX_FILE_BYTES)[0]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert data == b"x" * 7000
    assert peak < 100_000, f"{peak:,} bytes allocated to read 7,000"
    grown = tmp_path / "grown.md"
    grown.write_bytes(b"y" * 10)
    with pytest.raises(FileTooLarge):
        read_regular(grown, 5)

# ======================================================================================
# Untrusted knowledge bases, the world state and outputs: hostile executor output, state
# files and runtime edges, file modes, control characters in output, init and generate-mock.
#
# Each test builds a hostile project in tmp_path and goes through the public CLI.
# ======================================================================================


GOAL = "goal:edge-api-learning-plan"
SEED = "state:has-resume"
STATE = Path(".ctxfst/world-state.json")


@pytest.fixture
def kb(tmp_path, capsys):
    root = tmp_path / "kb"
    copy_example(root, "hash-32")
    assert run_build(root, []) == 0
    capsys.readouterr()
    return root


def _build_project(kb: Path, capsys) -> None:
    assert run_build(kb, []) == 0
    capsys.readouterr()


def _state(cli, kb: Path) -> dict:
    shown = cli("state", "show", "--format", "json", cwd=kb)
    assert shown.code == 0, shown.err
    return shown.json()


def _no_internal_error(result) -> None:
    assert result.code not in (0, 70) and "internal error" not in result.err, result.err


# Hole 7: malformed executor output ------------------------------------------------------

@pytest.mark.parametrize("printed, complaint", [
    ({"status": "success", "add_states": "state:has-skill-inventory"}, "add_states"),
    ({"status": "success", "add_states": ["NOT state:has-resume", 5, None]}, "add_states"),
    ({"status": "success", "add_states": ["state:made-up"]}, "state:made-up"),
    ({"status": "success", "remove_states": SEED}, "remove_states"),
    ({"status": "success", "summary": {"nested": 1}}, "summary"),
    ({"status": "success", "add_state": ["state:has-skill-inventory"]}, "add_state"),
])
def test_malformed_executor_output_fails_the_step_and_keeps_the_state(kb, cli, capsys,
                                                                      printed, complaint):
    add_skill_script(kb, "inventory-skills",
                     f"import sys\nsys.stdin.read()\nprint({json.dumps(printed)!r})\n")
    _build_project(kb, capsys)
    assert cli("state", "init", "--goal", GOAL, "--seed", SEED, cwd=kb).code == 0
    before = _state(cli, kb)["active_states"]
    ran = cli("run", "--executor", "command", "--format", "json", cwd=kb)
    assert ran.code == 1, ran.err
    data = ran.json()
    assert data["stop_reason"] == "execution_failure"
    step = data["steps"][0]
    assert step["status"] == "failed" and complaint in step["summary"]
    after = _state(cli, kb)
    assert after["active_states"] == before == [SEED]
    assert [c["result"] for c in after["completed_skills"]] == ["failed"]


@pytest.mark.parametrize("option", [
    ("--timeout", "nan"), ("--timeout", "0"), ("--timeout", "-5"), ("--timeout", "inf"),
    ("--timeout", "1e300"), ("--max-steps", "0"), ("--retries", "-1"),
])
def test_run_options_out_of_range_are_usage_errors_that_record_nothing(kb, cli, capsys,
                                                                        option):
    marker = kb / "ran.txt"
    add_skill_script(kb, "inventory-skills", f"import sys\nopen({str(marker)!r}, 'w').write('x')\n"
                                    "print('{\"status\": \"success\"}')\n")
    _build_project(kb, capsys)
    cli("state", "init", "--goal", GOAL, "--seed", SEED, cwd=kb)
    log = (kb / STATE).with_name("world-state.json.events.jsonl")
    events = log.read_bytes()
    result = cli("run", "--executor", "command", *option, cwd=kb)
    assert result.code == 2 and option[0] in result.err
    assert log.read_bytes() == events and not marker.exists()


def test_snapshot_of_an_unknown_schema_version_is_refused(kb, cli):
    cli("state", "init", "--goal", GOAL, "--seed", SEED, cwd=kb)
    snapshot = kb / STATE
    data = json.loads(snapshot.read_text())
    data["schema_version"] = "99"
    snapshot.write_text(json.dumps(data))
    log = snapshot.with_name(snapshot.name + ".events.jsonl")
    saved = (snapshot.read_bytes(), log.read_bytes())
    for args in (("state", "show"), ("state", "add", "state:has-skill-inventory"),
                 ("state", "replay"), ("run",)):
        result = cli(*args, cwd=kb)
        assert result.code == 2 and "schema_version '99'" in result.err, (args, result.err)
    assert (snapshot.read_bytes(), log.read_bytes()) == saved
    log.unlink()  # an upstream-style snapshot with no log is refused the same way
    result = cli("state", "show", cwd=kb)
    assert result.code == 2 and "schema_version '99'" in result.err


# Hole 6 (runtime part): state files that are not what they should be --------------------

@pytest.mark.parametrize("name", ["world-state.json", "world-state.json.events.jsonl",
                                  "world-state.json.lock"])
def test_a_folder_in_place_of_a_state_file_is_a_clear_error(kb, cli, name):
    (kb / ".ctxfst" / name).mkdir(parents=True)
    (kb / ".ctxfst" / name / "keep.txt").write_text("mine")
    for args in (("state", "init", "--goal", GOAL, "--force"), ("state", "show"),
                 ("state", "add", SEED), ("state", "history")):
        result = cli(*args, cwd=kb)
        _no_internal_error(result)
    assert (kb / ".ctxfst" / name / "keep.txt").read_text() == "mine"


@pytest.mark.parametrize("event", [
    {"type": "add", "serial": "x", "states": ["state:has-skill-inventory"]},
    {"type": "add", "serial": 10 ** 30, "states": ["state:has-skill-inventory"]},
    {"type": "add", "serial": 2, "states": ["state:has-skill-inventory"], "at": 5},
    {"type": "complete", "serial": 2, "skill": "inventory-skills", "result": "won"},
    {"type": "complete", "serial": 2, "skill": ["inventory-skills"], "result": "success"},
    {"type": "step_started", "serial": 2, "step_id": [2], "skill": "inventory-skills"},
    {"type": "init", "serial": 2, "session_id": "s", "goal": GOAL, "seeds": [GOAL]},
    {"type": "subgraph", "serial": 2, "subgraph": {"nodes": "abc", "edges": 5}},
    {"type": "teleport", "serial": 2},
    "[" * 100_000,
])
def test_hostile_event_log_lines_are_located_errors(kb, cli, event):
    cli("state", "init", "--goal", GOAL, "--seed", SEED, cwd=kb)
    log = kb / ".ctxfst/world-state.json.events.jsonl"
    first = json.loads(log.read_text().splitlines()[0])
    if isinstance(event, dict):
        event = json.dumps({"lineage": first["lineage"], "at": "2026-01-01T00:00:00",
                            **event})
    with open(log, "a") as out:
        out.write(event + "\n")
    saved = log.read_bytes()
    for args in (("state", "show"), ("state", "add", "state:has-skill-inventory"),
                 ("run",), ("select",), ("plan",)):
        result = cli(*args, cwd=kb)
        assert result.code == 2 and "events.jsonl:2" in result.err, (args, result.err)
    assert log.read_bytes() == saved


def test_state_logs_and_locks_are_never_followed_through_links(kb, cli, tmp_path):
    cli("state", "init", "--goal", GOAL, "--seed", SEED, cwd=kb)
    victim = tmp_path / "victim.txt"
    for name in ("world-state.json.lock", "world-state.json.events.jsonl"):
        victim.write_text("precious\n")
        planted = kb / ".ctxfst" / name
        saved = planted.read_bytes() if planted.is_file() else None
        planted.unlink(missing_ok=True)
        planted.symlink_to(victim)
        result = cli("state", "add", "state:has-skill-inventory", cwd=kb)
        assert result.code == 2 and "link" in result.err, result.err
        assert victim.read_text() == "precious\n"
        planted.unlink()
        if saved is not None:
            planted.write_bytes(saved)


def test_hostile_runtime_edges_file_is_set_aside(kb, cli, tmp_path):
    cli("state", "init", "--goal", GOAL, "--seed", SEED, cwd=kb)
    edges = kb / ".ctxfst/runtime.edges.json"
    edges.write_text(json.dumps([{"source": ["x"], "target": "t", "relation": "r"}]))
    ran = cli("run", "--format", "json", cwd=kb)
    assert ran.code == 0 and ran.json()["stop_reason"] == "goal_reached", ran.err
    assert json.loads(edges.with_name("runtime.edges.json.corrupt").read_text())[0]["source"] \
        == ["x"]
    assert all(isinstance(e["source"], str) for e in json.loads(edges.read_text()))


def test_runtime_edges_are_not_read_through_a_link_out_of_the_project(kb, cli, tmp_path):
    outside = tmp_path / "elsewhere.json"
    outside.write_text(json.dumps([{"source": "skill:secret", "target": "entity:secret",
                                    "relation": "LEAKED"}]))
    cli("state", "init", "--goal", GOAL, "--seed", SEED, cwd=kb)
    edges = kb / ".ctxfst/runtime.edges.json"
    edges.symlink_to(outside)
    result = cli("run", cwd=kb)  # refused, or run without reading through the link
    assert result.code in (0, 2) and "internal error" not in result.err, result.err
    assert "LEAKED" in outside.read_text()
    assert edges.is_symlink() or "LEAKED" not in edges.read_text()


def test_a_skill_script_outside_the_project_is_never_run(kb, cli, tmp_path, capsys):
    """The command executor runs skills' scripts by design, but only inside the project:
    a skill index (build/ may come from someone else) naming a folder outside is refused."""
    marker = tmp_path / "ran.txt"
    evil = tmp_path / "evil" / "x"
    write(evil, "run.py", f"#!{sys.executable}\nopen({str(marker)!r}, 'w').write('x')\n"
                          "print('{\"status\": \"success\"}')\n").chmod(0o755)
    index_path = kb / "build/skill-index.json"
    index = json.loads(index_path.read_text())
    for skill in index["skills"]:
        skill["path"] = "../evil/x/SKILL.md"
        skill["script"] = "run.py"
    index_path.write_text(json.dumps(index))
    reseal(kb / "build", index_path.name)  # past the manifest check: to the shape checks
    cli("state", "init", "--goal", GOAL, "--seed", SEED, cwd=kb)
    result = cli("run", "--executor", "command", cwd=kb)
    assert result.code != 70 and "internal error" not in result.err
    assert not marker.exists()


def test_a_skill_index_of_the_wrong_shape_is_a_clear_error(kb, cli):
    index_path = kb / "build/skill-index.json"
    index = json.loads(index_path.read_text())
    index["skills"][0]["cost"] = "cheap"
    index_path.write_text(json.dumps(index))
    reseal(kb / "build", index_path.name)  # past the manifest check: to the shape checks
    cli("state", "init", "--goal", GOAL, "--seed", SEED, cwd=kb)
    for args in (("plan",), ("select",), ("run",)):
        result = cli(*args, cwd=kb)
        assert result.code == 2 and "internal error" not in result.err, (args, result.err)


# Hole 9: file modes -----------------------------------------------------------------------

@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    yield
    os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_written_files_honour_the_umask_and_keep_their_mode(tmp_path, cli, capsys, umask_022):
    root = tmp_path / "kb"
    copy_example(root, "hash-32")
    assert run_build(root, []) == 0
    capsys.readouterr()
    for name in ("manifest.json", "chunks.json", "skill-index.json", "entity-graph.json"):
        assert _mode(root / "build" / name) == 0o644, name
    assert cli("state", "init", "--goal", GOAL, "--seed", SEED, cwd=root).code == 0
    snapshot = root / STATE
    assert _mode(snapshot) == 0o644
    snapshot.chmod(0o640)
    assert cli("state", "add", "state:has-skill-inventory", cwd=root).code == 0
    assert _mode(snapshot) == 0o640 and "state:has-skill-inventory" in snapshot.read_text()
    skill = write(root, "skills/old-style/SKILL.md", """\
        ---
        name: old-style
        description: "A v2 skill with top-level extension fields."
        preconditions: ["state:has-resume"]
        postconditions: ["state:has-skill-inventory"]
        cost: low
        ---

        # Old style
        """)
    skill.chmod(0o640)
    assert cli("skills", "migrate", skill, cwd=root).code == 0
    assert "metadata:" in skill.read_text() and _mode(skill) == 0o640


# Hole 9: control characters in output ----------------------------------------------------

FORGED = "forged.md:9:9: error CTX999: forged"


def test_crafted_ids_and_paths_cannot_forge_output_lines(tmp_path, cli):
    bad_id = f"entity:a\\n{FORGED}\\r\\x1b[2J\\u2028\\x85"
    write(tmp_path, "doc.ctxfst.md", f"""\
        ---
        title: x
        entities:
          - id: "{bad_id}"
            name: A
            type: concept
        chunks: []
        ---
        """)
    write(tmp_path, f"x\n{FORGED}.ctxfst.md", "---\ntitle: 5\nchunks: 3\n---\n")
    count = len(cli("validate", "--format", "json", tmp_path, cwd=tmp_path).json()[
        "diagnostics"])
    text = cli("validate", tmp_path, cwd=tmp_path)
    assert text.code == 1
    lines = text.out.splitlines()
    assert len(lines) == count + 1 and not any(line.startswith("forged") for line in lines)
    assert "\x1b" not in text.out and "\u2028" not in text.out and "\x85" not in text.out
    assert "\\n" in text.out and "\\x1b" in text.out
    github = cli("validate", "--format", "github", tmp_path, cwd=tmp_path)
    assert len(github.out.splitlines()) == count + 1 and "\x1b" not in github.out
    assert all(line.startswith("::error ") for line in github.out.splitlines()[:count])
    raw = cli("validate", "--format", "json", tmp_path, cwd=tmp_path)
    assert "\u2028" not in raw.out and "\x85" not in raw.out
    assert any("\u2028" in d["message"] for d in raw.json()["diagnostics"])  # same data


def test_runtime_text_output_escapes_ids_from_the_state(tmp_path, cli):
    root = tmp_path / "kb"
    copy_example(root, "hash-32")
    upstream = {"session_id": "s1", "goal": GOAL,
                "active_states": [f"{SEED}\nserial 999, lineage forged"],
                "completed_skills": []}
    write(root, str(STATE), json.dumps(upstream))
    shown = cli("state", "show", cwd=root)
    assert shown.code == 0
    assert not any(line.startswith("serial 999") for line in shown.out.splitlines())
    assert len(shown.out.splitlines()) == 4


# Hole 9: init and generate-mock ----------------------------------------------------------

def test_init_refuses_empty_file_link_and_impossible_targets(tmp_path, cli):
    here = tmp_path / "here"
    here.mkdir()
    result = cli("init", "", cwd=here)
    assert result.code == 2 and list(here.iterdir()) == []
    regular = write(tmp_path, "file.txt", "mine\n")
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "missing")
    for target in (regular, dangling, regular / "kb"):
        result = cli("init", target, cwd=here)
        assert result.code == 2 and str(target) in result.err, (target, result.err)
        assert "internal error" not in result.err
    assert regular.read_text() == "mine\n" and not (tmp_path / "missing").exists()
    # A link planted inside the target is never written through.
    outside = tmp_path / "outside"
    outside.mkdir()
    target = tmp_path / "kb"
    target.mkdir()
    (target / "content").symlink_to(outside)
    result = cli("init", target, cwd=here)
    assert result.code == 2 and list(outside.iterdir()) == []


def test_init_failing_part_way_keeps_nothing(tmp_path, cli):
    target = tmp_path / "kb"
    target.mkdir()
    write(target, "skills", "a file where the skills folder would go\n")
    result = cli("init", target, cwd=tmp_path)
    assert result.code == 2 and "internal error" not in result.err
    assert [p.name for p in target.iterdir()] == ["skills"]


def test_generate_mock_refuses_an_existing_kb_and_huge_counts(tmp_path, cli, monkeypatch):
    import ctxfst.mock as mock

    asked = []  # the document counts generate was called with (at most 2 are written)
    real_generate = mock.generate

    def small_generate(out, docs, seed=0):
        asked.append(docs)
        return real_generate(out, min(docs, 2), seed)

    monkeypatch.setattr(mock, "generate", small_generate)
    kb = tmp_path / "kb"
    copy_example(kb, "hash-32")
    config = (kb / "ctxfst.toml").read_bytes()
    before = sorted(p.relative_to(kb) for p in kb.rglob("*"))
    result = cli("generate-mock", kb, "--docs", "3", cwd=tmp_path)
    assert result.code == 2 and "not empty" in result.err
    assert sorted(p.relative_to(kb) for p in kb.rglob("*")) == before
    assert (kb / "ctxfst.toml").read_bytes() == config
    result = cli("generate-mock", tmp_path / "new", "--docs", str(10 ** 9), cwd=tmp_path)
    assert result.code == 2 and "--docs" in result.err
    assert asked == [] and not (tmp_path / "new").exists()
    regular = write(tmp_path, "file.txt", "mine\n")
    result = cli("generate-mock", regular, "--docs", "2", cwd=tmp_path)
    assert result.code == 2 and "internal error" not in result.err
    assert regular.read_text() == "mine\n"


# ======================================================================================
# Hole 8 and damaged artifacts: readers (query, eval, export, facts) check every build
# artifact they open against manifest.json, then its shape, and refuse clearly.
# ======================================================================================


QUERY = ("query", "Hono on Cloudflare Workers", "--bridge-model", "none")
FACTS_ASK = ("facts", "ask", "--tenant", "default", "--op", "exists", "--key", "topic",
             "--value", "no such topic at all")  # unknown: the lexical fallback reads chunks
READS = {  # what each reader opens besides manifest.json
    "query": ["chunks.parquet", "chunk_vectors.parquet", "entity_vectors.parquet",
              "entities.parquet", "entity-graph.json"],
    "facts": ["semantic_facts.parquet", "semantic_fact_extraction_runs.parquet",
              "chunks.parquet"],
}


@pytest.fixture
def built_kb(tmp_path, capsys):
    root = copy_example(tmp_path / "kb")
    assert run_build(root, []) == 0
    capsys.readouterr()
    return root


def assert_clear(result, *names: str) -> None:
    assert result.code == 2, (result.code, result.err)
    assert "internal error" not in result.err and "Traceback" not in result.err, result.err
    assert "run `doit" in result.err, result.err
    for name in names:
        assert name in result.err, (name, result.err)


def queries_file(root: Path) -> Path:
    return write(root, "queries.yaml", yaml.safe_dump({"queries": [
        {"id": "edge", "query": "edge framework for Workers",
         "expected_entities": ["entity:hono"]}]}))


def test_readers_refuse_artifacts_that_do_not_match_the_manifest(built_kb, cli):
    build = built_kb / "build"
    pristine = {p.name: p.read_bytes() for p in build.iterdir() if p.is_file()}
    # A forged case: chunk vectors copied over the entity vectors still answered.
    shutil.copy(build / "chunk_vectors.parquet", build / "entity_vectors.parquet")
    for args in (QUERY, ("eval", queries_file(built_kb)),
                 ("export", "lancedb", "--db", built_kb / "db")):
        result = cli(*args, cwd=built_kb)
        assert_clear(result, "entity_vectors.parquet", "does not match the build's manifest")
    assert not (built_kb / "db").exists()  # nothing exported from a swapped build
    (build / "entity_vectors.parquet").write_bytes(pristine["entity_vectors.parquet"])
    assert cli(*QUERY, cwd=built_kb).code == 0
    # Same size, other bytes (a build cut short, a bit flipped): the hash says so.
    for name in ("chunks.parquet", "semantic_facts.parquet"):
        data = bytearray(pristine[name])
        data[len(data) // 2] ^= 0xFF
        (build / name).write_bytes(bytes(data))
        command = QUERY if name == "chunks.parquet" else FACTS_ASK
        assert_clear(cli(*command, cwd=built_kb), name, "sha256")
        (build / name).write_bytes(pristine[name])
    # A manifest that does not list what a reader opens.
    manifest = json.loads(pristine["manifest.json"])
    manifest["artifacts"] = [a for a in manifest["artifacts"] if a["path"] != "chunks.parquet"]
    (build / "manifest.json").write_text(json.dumps(manifest))
    for command in (QUERY, FACTS_ASK):
        assert_clear(cli(*command, cwd=built_kb), "chunks.parquet", "not in the build's manifest")


def test_truncated_empty_or_garbage_artifacts_are_clear_errors(built_kb, cli):
    build = built_kb / "build"
    pristine = {p.name: p.read_bytes() for p in build.iterdir() if p.is_file()}
    damages = {"truncated": lambda data: data[: len(data) // 2], "empty": lambda data: b"",
               "garbage": lambda data: b"\x00\xffPAR1 not what it says" * 7}
    failures = []
    for command, args in (("query", QUERY), ("facts", FACTS_ASK)):
        for name in [*READS[command], "manifest.json"]:
            for how, damage in damages.items():
                (build / name).write_bytes(damage(pristine[name]))
                result = cli(*args, cwd=built_kb)
                (build / name).write_bytes(pristine[name])
                if result.code != 2 or "internal error" in result.err or \
                        name not in result.err or "run `doit" not in result.err:
                    failures.append((command, name, how, result.code, result.err.strip()))
    assert not failures, failures
    assert cli(*QUERY, cwd=built_kb).code == 0 and cli(*FACTS_ASK, cwd=built_kb).code == 0


def _parquet_with(path: Path, **columns) -> None:
    """The Parquet file at path with some columns replaced (or added) as given."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    for name, values in columns.items():
        array = pa.array(values) if not isinstance(values, pa.Array) else values
        if name in table.column_names:
            table = table.set_column(table.column_names.index(name), name, array)
        else:
            table = table.append_column(name, array)
    pq.write_table(table, path)


def test_a_hostile_build_whose_manifest_matches_is_still_a_clear_error(built_kb, cli):
    """Garbage that the manifest vouches for (someone wrote both): readers check what
    they parse, too."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    build = built_kb / "build"
    pristine = {p.name: p.read_bytes() for p in build.iterdir() if p.is_file()}
    chunks = pq.read_table(build / "chunks.parquet").num_rows
    facts = pq.read_table(build / "semantic_facts.parquet")
    deep = b"[" * 100_000 + b"]" * 100_000  # deeper than Python's stack
    cases = [  # (command, artifact, how to damage it, what the error names)
        (QUERY, "chunks.parquet", lambda p: p.write_bytes(b"garbage, not Parquet"), "Parquet"),
        (QUERY, "chunks.parquet", lambda p: _parquet_with(p, chunk_id=list(range(chunks))),
         "chunk_id"),
        (QUERY, "chunks.parquet", lambda p: _parquet_with(
            p, entities=[None] * chunks), "entities"),
        (FACTS_ASK, "chunks.parquet", lambda p: p.write_bytes(pristine["chunk_vectors.parquet"]),
         "no column"),
        (QUERY, "entities.parquet", lambda p: pq.write_table(pa.table({"x": [1]}), p),
         "entity_id"),
        (QUERY, "entity-graph.json", lambda p: p.write_bytes(deep), "entity-graph.json"),
        (QUERY, "entity-graph.json", lambda p: p.write_text('{"nodes": [{"id": 5}], '
                                                            '"edges": []}'), "node #1"),
        (QUERY, "entity-graph.json", lambda p: p.write_text(
            '{"nodes": [], "edges": [{"source": "a", "target": "b", "relation": "SIMILAR", '
            '"score": "high"}]}'), "score"),
        (QUERY, "entity_vectors.parquet", lambda p: _parquet_with(
            p, entity_id=[1] * pq.read_table(p).num_rows), "entity_vectors.parquet"),
        (QUERY, "entity_vectors.parquet", lambda p: pq.write_table(  # 1.0.0's `id`
            pq.read_table(p).rename_columns(["id", "vector"]).replace_schema_metadata({
                **pq.read_table(p).schema.metadata, b"ctxfst.schema_version": b"1.0.0"}), p),
         "schema 2.0.0"),
        (QUERY, "chunk_vectors.parquet", lambda p: pq.write_table(pa.table({
            "chunk_id": pq.read_table(p).column("chunk_id"),
            "vector": pa.FixedSizeListArray.from_arrays(pa.array([0.5] * 3 * chunks,
                                                                 pa.float32()), 3)
        }).replace_schema_metadata({**pq.read_table(p).schema.metadata,
                                    b"ctxfst.dim": b"3"}), p), "dimensions"),
        (FACTS_ASK, "semantic_facts.parquet", lambda p: _parquet_with(
            p, confidence=pa.array([None] * facts.num_rows, pa.float64())), "confidence"),
        (FACTS_ASK, "semantic_facts.parquet", lambda p: pq.write_table(
            facts.replace_schema_metadata({**facts.schema.metadata,
                                           b"ctxfst.build_seq": b"many"}), p), "build_seq"),
        (FACTS_ASK, "semantic_fact_extraction_runs.parquet", lambda p: pq.write_table(
            pa.table({"run_id": ["r"]}), p), "no column"),
    ]
    failures = []
    for args, name, damage, expected in cases:
        damage(build / name)
        reseal(build, name)
        result = cli(*args, cwd=built_kb)
        for restore in (name, "manifest.json"):
            (build / restore).write_bytes(pristine[restore])
        if result.code != 2 or "internal error" in result.err or name not in result.err \
                or expected not in result.err:
            failures.append((args[0], name, expected, result.code, result.err.strip()[-300:]))
    # The manifest itself: nested past the stack, or with fields of the wrong types.
    manifest = json.loads(pristine["manifest.json"])
    for bad in (deep, json.dumps({**manifest, "inputs": [5]}).encode(),
                json.dumps({**manifest, "artifacts": [
                    {**a, "bytes": str(a["bytes"])} for a in manifest["artifacts"]]}).encode(),
                json.dumps({**manifest, "artifacts": [
                    {**a, "path": "../" + a["path"]} for a in manifest["artifacts"]]}).encode()):
        (build / "manifest.json").write_bytes(bad)
        for args in (QUERY, FACTS_ASK, ("query", "Hono", "--allow-stale")):
            result = cli(*args, cwd=built_kb)
            if result.code != 2 or "internal error" in result.err or \
                    "manifest.json" not in result.err:
                failures.append((args[0], "manifest.json", bad[:40], result.code,
                                 result.err.strip()))
    assert not failures, failures


def test_artifacts_are_never_read_through_links_out_of_the_build(built_kb, cli, tmp_path):
    """A link in build/ (to a copy outside the project, so the manifest matches) is not
    followed: readers never read outside the project root."""
    outside = tmp_path / "outside"
    outside.mkdir()
    published = published_folder(built_kb / "build")
    for name in ("chunks.parquet", "semantic_facts.parquet"):
        target = outside / name
        shutil.move(published / name, target)
        (published / name).symlink_to(target)
        command = QUERY if name == "chunks.parquet" else FACTS_ASK
        assert_clear(cli(*command, cwd=built_kb), name, "link")
        (published / name).unlink()
        shutil.move(target, published / name)
    assert cli(*QUERY, cwd=built_kb).code == 0


def test_a_verified_build_is_not_hashed_again(built_kb, cli, monkeypatch):
    """Queries stay fast: a file's sha256 is remembered by its size, mtime, inode and
    ctime; only a changed file is hashed again. A cache that cannot be written, or that
    holds junk, only costs a hash."""
    build = built_kb / "build"
    sizes = {p.stat().st_size: p.name for p in build.iterdir() if p.is_file()}
    hashed: list[str] = []
    real = hashlib.sha256

    def counting(data=b"", **kwargs):
        if len(data) in sizes:
            hashed.append(sizes[len(data)])
        return real(data, **kwargs)

    monkeypatch.setattr(hashlib, "sha256", counting)
    assert cli(*QUERY, cwd=built_kb).code == 0
    assert set(READS["query"]) <= set(hashed)  # verified the first time ...
    remembered = json.loads((built_kb / ".ctxfst/cache/artifacts.json").read_text())
    assert {Path(key).name for key in remembered} >= set(READS["query"])
    hashed.clear()
    first = cli(*QUERY, "--format", "json", cwd=built_kb)
    assert first.code == 0 and hashed == []  # ... and not again
    os.utime(build / "entity-graph.json")  # touched, same bytes: hashed again, accepted
    assert cli(*QUERY, cwd=built_kb).code == 0 and hashed == ["entity-graph.json"]
    # A damaged cache file is a miss, never an error; an unwritable one is skipped.
    for junk in ('{"x": 5}', "[1, 2]", "[" * 100_000, json.dumps(
            {key: ["a", 1, 2, 3, "f" * 64] for key in remembered})):
        (built_kb / ".ctxfst/cache/artifacts.json").write_text(junk)
        (built_kb / ".ctxfst/cache/freshness.json").write_text(junk)
        hashed.clear()
        again = cli(*QUERY, "--format", "json", cwd=built_kb)
        assert again.code == 0 and again.out == first.out, again.err
        assert set(READS["query"]) <= set(hashed)

    from ctxfst.artifacts import io

    def unwritable(path, data):
        raise PermissionError(13, "read-only", str(path))

    monkeypatch.setattr(io, "write_atomic", unwritable)
    (built_kb / ".ctxfst/cache/artifacts.json").unlink()
    assert cli(*QUERY, "--format", "json", cwd=built_kb).out == first.out
    assert not (built_kb / ".ctxfst/cache/artifacts.json").exists()


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_a_fifo_in_the_caches_or_the_build_never_hangs_a_reader(built_kb):
    """Reading a FIFO blocks until someone writes to it: a reader opens files without
    blocking and refuses what is not a regular file (a real process, so a hang on the
    old code is a failed test rather than a stuck run)."""
    freshness = built_kb / ".ctxfst/cache/freshness.json"
    freshness.unlink(missing_ok=True)
    os.mkfifo(freshness)
    try:
        done = subprocess.run([sys.executable, "-m", "ctxfst", *QUERY], cwd=built_kb,
                              capture_output=True, text=True, timeout=120, check=False)
    except subprocess.TimeoutExpired:
        pytest.fail("a FIFO as .ctxfst/cache/freshness.json hung the query")
    assert done.returncode == 0, done.stderr
    freshness.unlink()
    graph = published_folder(built_kb / "build") / "entity-graph.json"
    graph.unlink()
    os.mkfifo(graph)
    done = subprocess.run([sys.executable, "-m", "ctxfst", *QUERY], cwd=built_kb,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2 and "entity-graph.json" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_eval_queries_and_skill_graphs_of_the_wrong_shape_are_clear_errors(built_kb, cli):
    """The other files the retrieval commands read: a queries file (shipped with a KB) and
    the project's hand-made skill graph."""
    failures = []
    for queries in ({"queries": [{"query": "Hono", "expected_chunks": 5}]},
                    {"queries": [{"query": "Hono", "expected_entities": [{"a": 1}]}]},
                    {"queries": [{"query": "Hono", "id": ["x"]}]}, "[" * 100_000):
        path = write(built_kb, "queries.yaml", queries if isinstance(queries, str)
                     else yaml.safe_dump(queries))
        result = cli("eval", path, cwd=built_kb)  # bad input: 2, as every command has it
        if result.code != 2 or "internal error" in result.err:
            failures.append((queries if isinstance(queries, dict) else "deep", result.code,
                             result.err))
    for graph in ("[" * 100_000, '{"nodes": 5}'):
        write(built_kb, "skill-graph.json", graph)
        result = cli("query", "Hono", "--mode", "keyword-graph", cwd=built_kb)
        if result.code != 2 or "internal error" in result.err or \
                "skill-graph.json" not in result.err:
            failures.append((graph[:10], result.code, result.err))
    assert not failures, failures


def test_the_runtime_reads_only_the_skill_index_and_graph_the_manifest_names(built_kb, cli):
    """plan, select, state and run read build/skill-index.json and entity-graph.json:
    an edited one (a skill removed, still well formed) is refused, naming the file."""
    goal, seed = "goal:edge-api-learning-plan", "state:has-resume"
    assert cli("state", "init", "--goal", goal, "--seed", seed, cwd=built_kb).code == 0
    index_path = built_kb / "build" / "skill-index.json"
    pristine = index_path.read_bytes()
    index = json.loads(pristine)
    index["skills"] = index["skills"][1:]
    index_path.write_text(json.dumps(index))
    for args in (("plan",), ("select",), ("state", "subgraph")):
        result = cli(*args, cwd=built_kb)
        assert result.code == 2 and "internal error" not in result.err, (args, result.err)
        assert "skill-index.json does not match the build's manifest" in result.err
    index_path.write_bytes(pristine)
    assert cli("plan", cwd=built_kb).code == 0


# ======================================================================================
# Found while fixing the holes above: code in a KB's root, collection tags, link loops,
# and model folders named by settings.
# ======================================================================================

GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid"}


def test_python_files_at_the_kb_root_never_run_in_the_hook_or_python_m(tmp_path):
    """`python -m ctxfst` and the installed hook put the working directory first on the
    import path: a KB's own yaml.py or ctxfst/ package would run on every commit."""
    root = make_project(tmp_path)
    env = {**os.environ, **GIT_ENV}
    subprocess.run(["git", "init", "-q"], cwd=root, check=True, env=env)
    assert run_process("install-hook", cwd=root).returncode == 0
    marker = tmp_path.parent / f"{tmp_path.name}-ran"
    payload = f"open({str(marker)!r}, 'w').write('ran')\n"
    write(root, "yaml.py", payload)
    write(root, "pyarrow.py", payload)
    write(root, "ctxfst/__init__.py", payload)
    write(root, "content/a.md", "---\nentities:\n  - {id: entity:a, name: A, type: concept}\n---\n")
    subprocess.run(["git", "add", "content"], cwd=root, check=True, env=env)
    commit = subprocess.run(["git", "commit", "-qm", "a"], cwd=root, capture_output=True,
                            text=True, env=env)
    assert commit.returncode == 0, commit.stdout + commit.stderr
    assert not marker.exists()
    # `python -m ctxfst` itself is found on that path (a ctxfst/ folder would be it), but
    # what it imports later is not.
    shutil.rmtree(root / "ctxfst")
    checked = subprocess.run([sys.executable, "-m", "ctxfst", "validate", "content"],
                             cwd=root, capture_output=True, text=True)
    assert not marker.exists()
    assert checked.returncode == 0, checked.stdout + checked.stderr


@pytest.mark.parametrize("tag", ["!!set", "!!omap", "!!pairs", "!!seq", "!!map"])
def test_a_collection_tag_on_a_plain_value_is_a_located_error(tmp_path, tag):
    write(tmp_path, "a.md", f"---\ntitle: {tag} x\nentities: []\n---\n")
    result = run_process("validate", "a.md", "--format", "json", cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    found = json.loads(result.stdout)["diagnostics"]
    assert [(d["code"], d["line"], d["column"]) for d in found] == [("CTX012", 2, 8)]


def test_a_link_loop_in_the_content_folder_is_a_located_error(tmp_path):
    root = make_project(tmp_path)
    (root / "content" / "loop.md").symlink_to("loop.md")
    (root / "content" / "deeper").symlink_to("deeper")
    for command in (("validate",), ("build",)):
        result = run_process(*command, cwd=root)
        assert result.returncode == 1, result.stdout + result.stderr
        assert "content/loop.md:1:1: error CTX809" in result.stdout
        assert "Traceback" not in result.stdout + result.stderr


def test_settings_never_name_a_model_folder_of_the_kb(tmp_path):
    """A model folder is code-like input (module classes, tokenizers, weights)."""
    root = copy_example(tmp_path, model="./models/evil")
    result = run_process("validate", cwd=root)
    assert result.returncode == 2
    assert "ctxfst.toml:3:19: error CTX803" in result.stderr
    # A Hub id that also exists as a folder here would be loaded from the folder.
    copy_example(tmp_path / "hub", model="evil/model")
    (tmp_path / "hub" / "evil" / "model").mkdir(parents=True)
    (tmp_path / "hub" / "evil" / "model" / "modules.json").write_text("[]")
    built = run_process("build", cwd=tmp_path / "hub")
    assert built.returncode == 1, built.stdout + built.stderr
    assert "refusing to load a model from the working tree" in built.stdout + built.stderr
    assert "Traceback" not in built.stdout + built.stderr


# From the security review of the change: FIFOs, sparse files, dangling links, glob
# patterns, and KB text in facts and query output.

def _no_hang(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """A real process with a safety timeout far above its normal second: a hang fails."""
    try:
        return subprocess.run([sys.executable, "-m", "ctxfst", *args], cwd=cwd, timeout=120,
                              capture_output=True, text=True)
    except subprocess.TimeoutExpired:
        pytest.fail(f"ctxfst {' '.join(args)} hung")


def test_fifos_where_files_belong_never_hang_a_command(tmp_path):
    root = copy_example(tmp_path / "kb")
    assert run_build(root, []) == 0
    os.mkfifo(root / "content" / "x.ctxfst.md")
    for command in (("validate",), ("lint",)):
        result = _no_hang(*command, cwd=root)
        assert result.returncode == 1
        assert "content/x.ctxfst.md:1:1: error CTX001: cannot read file: not a regular file" \
            in result.stdout
    result = _no_hang("query", "Hono", "--bridge-model", "none", cwd=root)
    assert result.returncode == 2 and "older than the sources" in result.stderr
    (root / "content" / "x.ctxfst.md").unlink()
    state = root / ".ctxfst" / "world-state.json"
    os.mkfifo(state)
    for command in (("state", "show"), ("select",), ("plan",)):
        result = _no_hang(*command, cwd=root)
        assert result.returncode == 2 and "not a regular file" in result.stderr, result.stderr


def test_a_fifo_edge_file_or_passage_is_named_not_skipped(tmp_path):
    root = copy_example(tmp_path / "kb")
    os.mkfifo(root / "content" / "x.edges.json")
    result = _no_hang("validate", cwd=root)
    assert result.returncode == 1
    assert "content/x.edges.json:1:1: error CTX001: cannot read file: not a regular file" \
        in result.stdout
    (root / "content" / "x.edges.json").unlink()
    os.mkfifo(root / "content" / "passage.md")
    (root / "content" / "folder.md").mkdir()
    write(root, "content/p.ctxfst.md", """\
        ---
        chunks:
          - {id: p:fifo, context: "A passage read from a FIFO", content_path: passage.md}
          - {id: p:dir, context: "A passage read from a folder", content_path: folder.md}
        ---
        """)
    result = _no_hang("validate", cwd=root)
    assert result.returncode == 1
    assert result.stdout.count("CTX311") == 2 and "names no regular file" in result.stdout


def test_a_skill_script_linked_out_of_its_folder_fails_validation(tmp_path, cli):
    root = copy_example(tmp_path / "kb")
    outside = write(tmp_path, "elsewhere/run.py", "print('{}')\n")
    skill = root / "skills" / "inventory-skills"
    (skill / "run.py").symlink_to(outside)
    text = (skill / "SKILL.md").read_text()
    (skill / "SKILL.md").write_text(text.replace("cost:", "script: run.py\ncost:", 1))
    result = cli("validate", cwd=root)
    assert result.code == 1
    assert re.search(r"skills/inventory-skills/SKILL\.md:\d+:\d+: error CTX414: script "
                     r"'run\.py' resolves to .*outside the skill's folder", result.out)
    (skill / "run.py").unlink()
    write(skill, "run.py", "print('{}')\n")  # inside: fine
    assert "CTX414" not in cli("validate", cwd=root).out


def test_a_published_file_made_a_link_is_published_again(tmp_path, cli):
    """A stranger's link among the fixed names is not read (readers go through
    build/current) and the next build makes ctxfst's link again; a link in the published
    folder itself is refused by readers, and the next build puts the file back."""
    root = copy_example(tmp_path / "kb")
    assert run_build(root, []) == 0
    manifest = root / "build" / "manifest.json"
    copy = root / "manifest-copy.json"
    copy.write_bytes(manifest.read_bytes())
    manifest.unlink()
    manifest.symlink_to(copy)
    assert cli("query", "Hono", "--bridge-model", "none", cwd=root).code == 0
    assert cli("build", "--root", root).code == 0
    assert os.readlink(manifest) == "current/manifest.json"
    published = published_folder(root / "build") / "manifest.json"
    published.unlink()
    published.symlink_to(copy)
    assert cli("query", "Hono", "--bridge-model", "none", cwd=root).code == 2  # refused
    assert cli("build", "--root", root).code == 0
    assert not published.is_symlink() and published.read_bytes() == copy.read_bytes()
    assert cli("query", "Hono", "--bridge-model", "none", cwd=root).code == 0


def test_sparse_huge_artifacts_are_refused_before_they_are_read(tmp_path):
    root = copy_example(tmp_path / "kb")
    assert run_build(root, []) == 0
    for name, command in (("chunks.parquet", ("query", "fastapi", "--mode", "lexical")),
                          ("manifest.json", ("facts", "list", "--tenant", "default"))):
        path = root / "build" / name
        saved = path.read_bytes()
        with open(path, "r+b") as handle:
            handle.truncate(1 << 40)  # 1 TB, sparse: reading it would exhaust memory
        result = _no_hang(*command, cwd=root)
        assert result.returncode == 2, result.stderr
        assert name in result.stderr and "internal error" not in result.stderr
        path.write_bytes(saved)


def test_a_dangling_link_in_the_sources_makes_readers_refuse_not_crash(tmp_path, cli):
    root = copy_example(tmp_path / "kb")
    assert run_build(root, []) == 0
    (root / "content" / "gone.ctxfst.md").symlink_to("nothing-here.md")
    for command in (("query", "Hono", "--bridge-model", "none"),
                    ("facts", "ask", "--tenant", "default", "--op", "exists", "--value", "x")):
        result = cli(*command, cwd=root)
        assert result.code == 2 and "older than the sources" in result.err, result.err
    assert cli("validate", cwd=root).code == 1


@pytest.mark.parametrize("pattern", [".", "./", "**/**/**/**/*.edges.json", "**/a/**/*.json"])
def test_extra_edge_patterns_that_name_no_files_or_nest_globs_are_refused(tmp_path, pattern):
    root = make_project(tmp_path)
    write(root, "ctxfst.toml", f'content_dir = "content"\nextra_edges = ["{pattern}"]\n')
    result = _no_hang("validate", cwd=root)
    assert result.returncode == 2
    assert "ctxfst.toml:2:16: error CTX803" in result.stderr


def test_a_content_folder_linking_out_of_the_project_is_reported(tmp_path):
    outside = tmp_path / "outside"
    write(outside, "secret.ctxfst.md", "---\nentities: []\n---\n")
    root = make_project(tmp_path / "kb")
    (root / "content" / "sub").symlink_to(outside)
    result = _no_hang("validate", cwd=root)
    assert result.returncode == 1
    assert "content/sub:1:1: error CTX809" in result.stdout


HOSTILE_TEXT = "Hono \x1b]0;PWN\x07\x1b[2J is\r\nFAKE: error CTX001 \u202eevil\u2028end"


def test_kb_text_in_facts_and_query_output_cannot_forge_lines_or_control_a_terminal(
        tmp_path, cli):
    root = copy_example(tmp_path / "kb")
    write(root, "content/tiny.ctxfst.md", '---\nchunks:\n  - id: note:tiny\n    context: "tiny '
          f'{json.dumps(HOSTILE_TEXT)[1:-1]}"\n---\n<Chunk id="note:tiny">\ntiny '
          f'{HOSTILE_TEXT}\n</Chunk>\n')
    assert run_build(root, []) == 0
    outputs = []
    for args in (("facts", "ask", "--tenant", "default", "--op", "exists", "--namespace", "x",
                  "--key", "y", "--value", "tiny"),
                 ("facts", "list", "--tenant", "default"),
                 ("query", "tiny", "--mode", "lexical")):
        for fmt in ("text", "json"):
            result = cli(*args, "--format", fmt, cwd=root)
            assert result.code == 0, result.err
            outputs.append(result.out)
            if fmt == "json":
                json.loads(result.out)
    for out in outputs:
        assert not any(char in out for char in "\x1b\x07\r\u202e\u2028"), out[:2000]
        assert not any(line.startswith("FAKE") for line in out.splitlines())


def test_facts_ask_never_imports_the_extractors_the_settings_name(tmp_path, capsys,
                                                                  monkeypatch):
    """The build imports configured plugin extractors (trusted, like dodo.py); `facts ask`
    is a reader and runs no code a KB's settings name."""
    marker = tmp_path / "imported"
    write(tmp_path / "plugins", "marking_extractor.py",
          f"open({str(marker)!r}, 'a').write('x')\n\n"
          "class Extractor:\n    name, version = 'marking', '1'\n\n"
          "    def extract(self, view):\n        return []\n\n\n"
          "def make():\n    return Extractor()\n")
    monkeypatch.syspath_prepend(str(tmp_path / "plugins"))
    root = copy_example(tmp_path / "kb",
                        extra='[facts]\nextractors = ["marking_extractor:make"]\n')
    assert run_build(root, []) == 0
    capsys.readouterr()
    assert marker.exists()
    marker.unlink()
    env = {"PYTHONPATH": os.pathsep.join([str(tmp_path / "plugins"),
                                          os.environ.get("PYTHONPATH", "")])}
    asked = run_process("facts", "ask", "--tenant", "default", "--op", "exists",
                        "--namespace", "domain", "--key", "topic", cwd=root, env=env)
    assert asked.returncode == 0, asked.stderr
    assert "answer: yes" in asked.stdout
    assert not marker.exists()
