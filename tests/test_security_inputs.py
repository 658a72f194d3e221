"""Hostile knowledge-base input: scanners stay linear, and what validates also builds.

Timing tests compare the time of one input at 1x and 8x size within one run (a ratio,
never a wall-clock limit); 1x is the first size, doubling, that takes 50 ms or more.
CPU time of this process: other processes on a busy machine do not skew the ratio.
"""

from __future__ import annotations

import gc
import math
import os
import shutil
import time
from pathlib import Path

import pytest

from ctxfst.document.kb import KnowledgeBase
from ctxfst.document.lint import lint
from ctxfst.document.parse import parse_text
from ctxfst.document.rules import validate
from ctxfst.document.source import MAX_FILE_BYTES

from .conftest import run_process, write

LINEAR = 12  # 8x the input may cost at most this many times as much


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
    assert all(ratio < LINEAR for ratio in ratios.values()), ratios


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
