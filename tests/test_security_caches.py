"""Hole 1: caches under .ctxfst/ hold plain data, checked on read. A hostile or damaged
row (parse cache, embeddings, lexical index, facts ledger) runs no code and is a miss
or a clear error, never a traceback; --no-cache and CTXFST_NO_CACHE=1 ignore them."""

from __future__ import annotations

import json
import os
import pickle
import re
import sqlite3
import zipfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import ctxfst
from ctxfst.build.cache import ParseCache
from ctxfst.build.runner import run_build
from ctxfst.config import find_project
from ctxfst.document.kb import load_kb
from ctxfst.files import display_path
from ctxfst.retrieval.search import Index, search
from ctxfst.validation import project_inputs

from .conftest import run_process, write

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


def validate(cli, root: Path, *args: str):
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
    expected = validate(cli, root)
    assert expected.code == 1 and "CTX101" in expected.codes()
    monkeypatch.chdir(root)
    marker = tmp_path / "code-ran"
    # The key is a hash of the path and bytes: anyone can precompute a row for a file.
    put_row(root, row_key(root, "bad"), pickle.dumps(_MakeMarker(marker), protocol=5))
    result = validate(cli, root)
    assert not marker.exists(), "unpickling a cache row ran code"
    assert result.code == 1 and result.json() == expected.json()
    assert pickle.dumps(_MakeMarker(marker)) not in (read_row(root, row_key(root, "bad")) or b"")


def test_damaged_or_foreign_parse_rows_are_parsed_again(tmp_path, cli, monkeypatch):
    root = project(tmp_path / "kb", good=GOOD, bad=BAD)
    expected = validate(cli, root)
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
        "wrong field types": lambda: b"[1, 2, 3, 4, 5, 6]",
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
        result = validate(cli, root)
        assert result.code == 1 and result.json() == expected.json(), name
        assert read_row(root, key) == written, f"{name}: the row was not written again"
    assert json.loads(written)[0]["entities"], "a row holds the frontmatter as plain data"


def test_a_foreign_parse_cache_database_is_replaced(tmp_path, cli):
    root = project(tmp_path / "kb", good=GOOD, bad=BAD)
    expected = validate(cli, root)
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
        result = validate(cli, root)
        assert result.code == 1 and result.json() == expected.json(), schema


def test_no_cache_ignores_a_well_formed_hostile_row(tmp_path, cli, monkeypatch):
    root = project(tmp_path / "kb", good=GOOD, bad=BAD)
    validate(cli, root)
    monkeypatch.chdir(root)
    (root / "content" / "bad.md").write_text(FIXED)
    validate(cli, root)
    good_row = read_row(root, row_key(root, "bad"))  # what validate cached for FIXED
    (root / "content" / "bad.md").write_text(BAD)
    # A row that says "no problems" for the bad file: the key is not secret, so with the
    # cache the row's word is taken. A CI job on an untrusted change turns caches off.
    put_row(root, row_key(root, "bad"), good_row)
    assert validate(cli, root).code == 0
    for args in (["validate"], ["lint"], ["validate", "--staged"]):
        assert "--no-cache" in cli(*args[:1], "--help", cwd=root).out
    ignored = validate(cli, root, "--no-cache")
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


def test_cold_and_warm_parses_give_identical_results(tmp_path, capsys, cli):
    root = project(tmp_path / "kb", tricky=TRICKY, good=GOOD)
    write(root, "content/README.md", "# Plain Markdown\n\nNo frontmatter here.\n")
    cold = _build(root, capsys)
    assert cold["validate"]["documents_from_cache"] == 0
    first = {p.name: p.read_bytes() for p in (root / "build").iterdir() if p.is_file()
             and p.name != "run_results.json"}
    chunks = {c["id"]: c for c in json.loads(first["chunks.json"])["chunks"]}
    assert chunks["note:tricky"]["extra"] == {"tags": ["shared", "x"], "priority": "high"}
    _build(root, capsys, "clean")
    warm = _build(root, capsys)
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
        fresh = validate(cli, root, "--no-cache")
        assert fresh.code == 1 and "content/tricky.md" in fresh.out
        validate(cli, root)  # caches the broken document
        assert validate(cli, root).json() == fresh.json()
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
        for change, (sha, dim, blob) in zip(damage, rows):
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
