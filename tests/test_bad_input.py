"""Every kind of bad input gets a located diagnostic and exit 1, never a traceback."""

from __future__ import annotations

import json
import os
import time
import tracemalloc

import pytest

from ctxfst.document.parse import parse_text
from ctxfst.document.source import MAX_FILE_BYTES

from .conftest import run_process, write


def _alias_bomb() -> str:
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for level in range(1, 10):
        refs = ", ".join([f"*a{level - 1}"] * 9)
        lines.append(f"a{level}: &a{level} [{refs}]")
    return "---\n" + "\n".join(lines) + "\nchunks: []\n---\n"


GOOD_CHUNK = '  - id: note:a\n    context: "A note"\n'
# name -> (file content, expected code, expected line)
CASES = {
    "malformed_yaml": ("---\nchunks:\n  - id: [note:a\n---\n", "CTX012", 4),
    "not_a_mapping": ("---\n- a\n- b\n---\n", "CTX013", 2),
    "scalar_frontmatter": ("---\njust text\n---\n", "CTX013", 2),
    "unclosed_frontmatter": ("---\nchunks:\n" + GOOD_CHUNK, "CTX011", 1),
    "missing_frontmatter": ('<Chunk id="note:a">\nx\n</Chunk>\n', "CTX010", 1),
    "not_utf8": (b"---\ntitle: caf\xe9\nchunks: []\n---\n", "CTX002", 2),
    "binary": (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "CTX003", 3),
    "empty": (b"", "CTX005", 1),
    "whitespace_only": ("\n  \n", "CTX005", 1),
    "alias_bomb": (_alias_bomb(), "CTX015", None),
    "recursive_alias": ("---\na: &a [*a]\nchunks: []\n---\n", "CTX015", 2),
    "deep_nesting": ("---\na: " + "[" * 5000 + "]" * 5000 + "\nchunks: []\n---\n", "CTX015", 2),
    "tab_indent": ("---\nchunks:\n\t- id: note:a\n---\n", "CTX016", 3),
    "duplicate_key": ("---\ntitle: a\nchunks: []\ntitle: b\n---\n", "CTX014", 4),
    "id_with_space": ('---\nchunks:\n  - id: "note:a b"\n    context: x\n---\n', "CTX104", 3),
    "id_upper_case": ('---\nentities:\n  - id: entity:FastAPI\n    name: FastAPI\n'
                      '    type: framework\nchunks: []\n---\n', "CTX104", 3),
    "chunk_without_id": ("---\nchunks:\n" + GOOD_CHUNK + "---\n<Chunk>\nx\n</Chunk>\n",
                         "CTX306", 6),
    "same_chunk_twice": ("---\nchunks:\n" + GOOD_CHUNK + '---\n<Chunk id="note:a">\nx\n'
                         '</Chunk>\n<Chunk id="note:a">\ny\n</Chunk>\n', "CTX307", 9),
    "complex_key": ("---\n? [a, b]\n: 1\nchunks: []\n---\n", "CTX017", 2),
    "python_tag": ("---\nx: !!python/object/apply:os.system [ls]\nchunks: []\n---\n",
                   "CTX012", 2),
    "two_yaml_documents": ("---\nchunks: []\n--- \n", None, None),
    "bad_bool_tag": ("---\nchunks: []\nx: !!bool maybe\n---\n", "CTX012", 3),
    "empty_int_tag": ("---\nchunks: []\nx: !!int ''\n---\n", "CTX012", 3),
    "bad_timestamp_key": ("---\nchunks: []\n!!timestamp abc: 1\n---\n", "CTX012", 3),
    "not_a_number": ("---\nchunks: []\nx: .nan\n---\n", "CTX105", 3),
    "binary_value": ("---\nchunks: []\nx: !!binary aGVsbG8=\n---\n", "CTX012", 3),
    "control_character": ("---\nchunks: []\n\nfoo: a\x07b\n---\n", "CTX012", 4),
    "chunks_not_a_list": ("---\ntitle: 'a\u2028b'\nchunks: 5\n---\n", "CTX102", 3),
    "mixed_case_tag": ("---\nchunks:\n" + GOOD_CHUNK + '---\n<CHunk>\nx\n</chunk>\n',
                       "CTX306", 6),
}


def _write_case(tmp_path, name):
    content, _, _ = CASES[name]
    return write(tmp_path, f"{name}.md", content if isinstance(content, bytes)
                 else content.encode("utf-8"))


@pytest.mark.parametrize("name", [n for n in CASES if CASES[n][1]])
@pytest.mark.parametrize("fmt", ["text", "json", "github"])
def test_bad_input_is_located(tmp_path, cli, name, fmt):
    _, code, line = CASES[name]
    path = _write_case(tmp_path, name)
    result = cli("validate", path, "--format", fmt)
    assert result.code == 1, result.out
    assert result.err == ""
    if fmt == "json":
        found = [d for d in result.json()["diagnostics"] if d["code"] == code]
        assert found, result.out
        assert found[0]["path"] == str(path)
        assert found[0]["severity"] == "error"
        if line is not None:
            assert found[0]["line"] == line
        assert found[0]["column"] >= 1
    elif fmt == "text":
        assert f"{path}:" in result.out and f"error {code}:" in result.out
    else:
        assert f"::error file={path},line=" in result.out and f"title={code}::" in result.out


def test_crlf_and_bom_are_accepted(tmp_path, cli):
    text = ('---\nchunks:\n  - id: note:a\n    context: "A note"\n---\n'
            '<Chunk id="note:a">\nx\n</Chunk>\n')
    crlf = write(tmp_path, "crlf.md", text.replace("\n", "\r\n").encode())
    bom = write(tmp_path, "bom.md", b"\xef\xbb\xbf" + text.replace("note:a", "note:b").encode())
    result = cli("validate", crlf, bom, "--format", "json")
    assert result.code == 0, result.out
    assert result.json()["diagnostics"] == []


def test_crlf_keeps_line_numbers(tmp_path, cli):
    text = "---\r\nchunks:\r\n  - id: note:a\r\n    context: x\r\n    priority: urgent\r\n---\r\n"
    path = write(tmp_path, "crlf.md", text.encode())
    found = cli("validate", path, "--format", "json").json()["diagnostics"]
    assert ("CTX103", 5) in {(d["code"], d["line"]) for d in found}


def test_huge_file_is_refused_without_reading_it(tmp_path, cli):
    path = tmp_path / "huge.md"
    with open(path, "wb") as handle:
        handle.write(b"---\nchunks: []\n---\n")
        handle.seek(50 * 1024 * 1024)
        handle.write(b"x")
    tracemalloc.start()
    result = cli("validate", path, "--format", "json")
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert result.code == 1
    assert result.codes() == ["CTX004"]
    assert peak < MAX_FILE_BYTES


def test_a_huge_source_stops_the_build_without_being_read(tmp_path, cli, monkeypatch):
    """A sparse terabyte in content/ (a pull request can hold one): the build's input
    check and doit's state never read it; validation refuses it (CTX004)."""
    import ctxfst.artifacts.io as io_module
    import ctxfst.pipeline.doit_state as doit_state

    from .conftest import copy_example, counted_sha256

    kb = copy_example(tmp_path)
    assert cli("build", "--root", kb).code == 0
    with open(kb / "content" / "big.ctxfst.md", "wb") as handle:
        handle.truncate(1 << 40)
    hashed = counted_sha256(monkeypatch, io_module)
    md5 = doit_state.get_file_md5

    def refuse_big(path):
        assert os.path.getsize(path) <= MAX_FILE_BYTES, path
        return md5(path)

    monkeypatch.setattr(doit_state, "get_file_md5", refuse_big)
    before = (kb / "build" / "manifest.json").read_bytes()
    for _ in range(2):  # and again, with doit's state of the failed run
        result = cli("build", "--root", kb)
        assert result.code == 1 and "CTX004" in result.out + result.err
    assert sum(hashed) < MAX_FILE_BYTES
    assert (kb / "build" / "manifest.json").read_bytes() == before


def test_a_file_name_that_is_not_utf8_is_refused_as_the_build_refuses_it(tmp_path, cli):
    """No artifact can name it: the project's validation refuses it (CTX811) as the
    build does, shown as an escape, never with an internal error."""
    from .conftest import make_project

    root = make_project(tmp_path)
    (root / "content" / os.fsdecode(b"caf\xe9.ctxfst.md")).write_text(
        "---\nchunks:\n  - id: note:b\n    priority: urgent\n---\n")
    for fmt in ("text", "json", "github"):
        result = cli("validate", "--format", fmt, cwd=root)
        assert result.code == 1 and "CTX811" in result.out and "internal" not in result.err
        assert "caf\\udce9" in result.out  # shown as an escape, never raw
    # a real process whose output is strict UTF-8 (a UTF-8 locale's default)
    done = run_process("validate", cwd=root, env={"PYTHONIOENCODING": "utf-8:strict"})
    assert done.returncode == 1 and "internal" not in done.stderr


def test_alias_bomb_is_refused_quickly_with_bounded_memory():
    tracemalloc.start()
    started = time.perf_counter()
    doc = parse_text(_alias_bomb(), "bomb.md")
    elapsed = time.perf_counter() - started
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert [d.code for d in doc.diagnostics] == ["CTX015"]
    assert peak < 50 * 1024 * 1024
    # Refusing the bomb must cost about what parsing a small file costs, not its expansion.
    started = time.perf_counter()
    parse_text("---\nchunks: []\n---\n", "small.md")
    assert elapsed < 1000 * max(time.perf_counter() - started, 1e-4)


def test_two_yaml_documents_in_frontmatter(tmp_path, cli):
    path = write(tmp_path, "two.md", "---\nchunks: []\n---\ntitle: x\n---\n")
    # The second '---' closes the frontmatter; the rest is body text.
    assert cli("validate", path).code == 0


def test_every_bad_file_in_one_real_process_without_traceback(tmp_path):
    for name in CASES:
        _write_case(tmp_path, name)
    for fmt in ("text", "json", "github"):
        proc = run_process("validate", tmp_path, "--format", fmt)
        assert proc.returncode == 1
        assert "Traceback" not in proc.stderr + proc.stdout
        assert proc.stderr == ""
    report = json.loads(run_process("validate", tmp_path, "--format", "json").stdout)
    located = {(d["path"].rsplit("/", 1)[-1], d["code"]) for d in report["diagnostics"]}
    for name, (_, code, _) in CASES.items():
        if code:
            assert (f"{name}.md", code) in located
