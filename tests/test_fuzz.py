"""Random and mutated documents: the parser either parses or returns located diagnostics."""

from __future__ import annotations

import base64
from array import array

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxfst.diagnostics import RULES
from ctxfst.document.parse import parse_document
from ctxfst.document.source import Source
from ctxfst.document.yamlpos import SourceMap, load_yaml
from ctxfst.kb import KnowledgeBase, validate

from .conftest import REPO

SEEDS = [p.read_bytes() for p in sorted((REPO / "content").glob("*.md"))]
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))


def check(data: bytes) -> None:
    doc = parse_document(Source("fuzz.md", None, data))
    kb = KnowledgeBase(root=REPO, documents=[doc])
    found = validate(kb).diagnostics
    lines = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n").count(b"\n") + 2
    for item in found:
        assert item.code in RULES
        assert 1 <= item.line <= lines and item.column >= 1
        assert item.message
    if doc.frontmatter is None:
        assert any(item.severity.value == "error" for item in found)


@FUZZ
@given(st.binary(max_size=2000))
def test_random_bytes(data):
    check(data)


_yamlish = st.text(
    alphabet=st.sampled_from(list("-:[]{}&*!|>'\"#%@` \n\t\r<>/=abcxyz01\u00e9\u4e2d")),
    max_size=400)


@FUZZ
@given(_yamlish)
def test_random_yaml_like_text(text):
    check(("---\n" + text + "\n---\n").encode())


@st.composite
def mutated(draw):
    data = bytearray(draw(st.sampled_from(SEEDS)))
    for _ in range(draw(st.integers(1, 8))):
        position = draw(st.integers(0, len(data)))
        action = draw(st.sampled_from(["insert", "delete", "replace", "duplicate"]))
        chunk = draw(st.sampled_from([b"\n", b"---\n", b"<Chunk>", b"</Chunk>", b'<Chunk id="x:y">',
                                      b"\t", b":", b"- ", b"[", b"&a ", b"*a", b"\xff", b"\x00",
                                      b"  ", b"NOT ", b"'", b'"']))
        if action == "insert":
            data[position:position] = chunk
        elif action == "delete":
            del data[position:position + draw(st.integers(1, 40))]
        elif action == "replace":
            data[position:position + len(chunk)] = chunk
        else:
            end = min(len(data), position + draw(st.integers(1, 200)))
            data[end:end] = data[position:end]
    return bytes(data)


@FUZZ
@given(mutated())
def test_mutated_documents(data):
    check(data)


# --- Positions laid out from the load's marks (the facts stage's way) are the full load's.

def assert_same_positions(text: str) -> None:
    fast = load_yaml(text, "fuzz.md", 2)
    if not fast.ok:
        return
    full = load_yaml(text, "fuzz.md", 2, positions=True)
    assert (fast.source_map.keys, fast.source_map.values) == (full.source_map.keys,
                                                              full.source_map.values)


_scalars = st.one_of(st.text(max_size=12), st.integers(), st.booleans(), st.none(),
                     st.dates(), st.floats(allow_nan=False, allow_infinity=False))
_keys = st.one_of(st.text(max_size=8), st.integers(-50, 3000), st.booleans(), st.dates())
_trees = st.recursive(_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(_keys, inner, max_size=4)), max_leaves=25)


@FUZZ
@given(_trees, st.sampled_from([None, True, False]), st.booleans())
def test_positions_from_events_are_the_full_loads(tree, flow, wide):
    assert_same_positions(yaml.safe_dump(tree, default_flow_style=flow, allow_unicode=True,
                                         width=20 if wide else 80))


@FUZZ
@given(_yamlish)
def test_positions_from_events_of_odd_text(text):
    assert_same_positions(text)


def _shipped_frontmatters() -> list[str]:
    seeds = [p.read_text(encoding="utf-8") for p in sorted(REPO.glob("tests/fixtures/**/*.md"))]
    seeds += [p.read_text(encoding="utf-8") for p in sorted((REPO / "content").glob("*.md"))]
    return [text.split("\n---", 1)[0].removeprefix("---\n") for text in seeds
            if text.startswith("---")]


_ODD_FRONTMATTERS = ["a: &x {b: 1}\nc: *x\n", "m:\n  <<: {x: 1}\n  y: 2\n", "a: &x 1\n",
                     "2024-01-01 10:00:00: t\n", "a: 1\na: 2\n", "? [complex]\n: v\n",
                     "k: x\u0085y: z\n", "!!str 1: a\n", "", "just text\n", "[]\n", "- {}\n"]


def test_positions_from_events_of_the_shipped_documents():
    for text in _shipped_frontmatters() + _ODD_FRONTMATTERS:
        assert_same_positions(text)


def _refuse_to_parse(*args, **kwargs):
    raise AssertionError("the YAML was read again")


def test_positions_come_from_the_loads_own_marks(monkeypatch):
    """The positions a deferred map is asked for are laid out from the marks its load
    kept, without reading the YAML again; aliases, anchors and merge keys (where the
    value is not laid out as the events) read it again."""
    shipped = _shipped_frontmatters()
    assert len(shipped) > 5
    for text in shipped + ["k: caf\u00e9 \U0001f600\n\u4e2d: [x, {y: z}]\n"]:
        fast = load_yaml(text, "doc.md", 2)
        full = load_yaml(text, "doc.md", 2, positions=True)
        assert fast.source_map.packed_marks, text
        with monkeypatch.context() as env:
            env.setattr(yaml, "parse", _refuse_to_parse)
            assert (fast.source_map.keys, fast.source_map.values) == (
                full.source_map.keys, full.source_map.values)
    for text in _ODD_FRONTMATTERS[:3] + ["k: x\u0085y: z\n"]:
        assert load_yaml(text, "doc.md", 2).source_map.packed_marks is None, text


def test_marks_that_do_not_fit_the_value_or_the_text_are_not_used():
    """A parse cache row's marks may be a stranger's: marks that cannot be this value's
    and this text's give the positions of the YAML read again."""
    text = max(_shipped_frontmatters(), key=len)
    fast = load_yaml(text, "doc.md", 2)
    full = load_yaml(text, "doc.md", 2, positions=True)
    expected = (full.source_map.keys, full.source_map.values)
    good = fast.source_map.packed_marks
    numbers = array("H", base64.b64decode(good))

    def packed(change) -> str:
        copy = array("H", numbers)
        change(copy)
        return base64.b64encode(copy.tobytes()).decode("ascii")

    other = load_yaml("a: [1, 2]\n", "doc.md", 2)
    variants = {
        "not base64": "%%%", "empty": "", "odd bytes": good[:-4] + "AA==",
        "one mark short": packed(lambda m: m.__delitem__(slice(-2, None))),
        "one mark more": packed(lambda m: m.extend(m[-2:])),
        "a kind changed": packed(lambda m: m.__setitem__(1, m[1] ^ 3)),
        "a line past the text": packed(lambda m: m.__setitem__(2, 60_000)),
        "a column past the text": packed(lambda m: m.__setitem__(3, 65_532 | (m[3] & 3))),
        "another value's": other.source_map.packed_marks,
    }
    for name, marks in variants.items():
        smap = SourceMap.deferred(text, "doc.md", 2, marks, fast.value)
        assert (smap.keys, smap.values) == expected, name
    for value in ({**fast.value, "extra": 1}, [fast.value], "text"):
        smap = SourceMap.deferred(text, "doc.md", 2, good, value)
        assert (smap.keys, smap.values) == expected


# --- Field-level mutation of a whole project: every frontmatter field of the documents,
# every SKILL.md field and every extra-edge field gets hostile values. Validation must
# locate every problem, and a project that validates must also build (the build writing
# what validation let through is where NaN scores and 2**63 versions used to crash).

import contextlib  # noqa: E402
import datetime  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

from ctxfst.pipeline.runner import run_build  # noqa: E402
from ctxfst.validation import check_paths  # noqa: E402

EDGE_SEED = [
    {"source": "entity:fastapi", "target": "entity:hono", "relation": "IMPLIES",
     "score": 0.5, "shared_chunk_count": 2, "properties": {"confidence": 0.8}},
    {"source": "skill:analyze-gaps", "target": "entity:fastapi", "relation": "EVIDENCE"},
]

HOSTILE_SCALARS = [None, True, False, 0, -1, 5, 2**31, 2**63, -(2**63) - 1, 10**20, 3e9,
                   1e999, -1e999, math.nan, 0.5, -0.0, "", " ", "x", "NaN", "Infinity",
                   "state:s1", "NOT state:s0", "a\nb", "a\x00b", "\u202e\u2028", "é" * 300,
                   "../../../etc/passwd", "/etc/passwd", "x/" + "a" * 300,
                   datetime.date(2024, 2, 29), datetime.datetime(9999, 12, 31, 23, 59),
                   "<Chunk id=\"evil\">", "%% chunk-start %%"]


def _hostile_value(draw):
    kind = draw(st.sampled_from(["scalar", "list", "dict", "nested"]))
    if kind == "scalar":
        return draw(st.sampled_from(HOSTILE_SCALARS))
    if kind == "list":
        return draw(st.lists(st.sampled_from(HOSTILE_SCALARS), max_size=4))
    if kind == "dict":
        return {draw(st.sampled_from(["id", "name", "type", "x", "score"])):
                draw(st.sampled_from(HOSTILE_SCALARS))}
    return [[draw(st.sampled_from(HOSTILE_SCALARS))], {"k": [1, {"z": None}]}]


def _paths(value, prefix=()):
    """Every place in a YAML/JSON value: mapping keys and sequence items, nested."""
    found = [prefix] if prefix else []
    if isinstance(value, dict):
        for key, item in value.items():
            found.extend(_paths(item, (*prefix, key)))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found.extend(_paths(item, (*prefix, index)))
    return found


EXTREME_INTS = [0, -1, 1, 2**31 - 1, 2**31, 2**53 + 1, 2**63 - 1, 2**63, 2**64, 10**20,
                -(2**63) - 1]
EXTREME_FLOATS = [math.nan, math.inf, -math.inf, 1e308, 5e-324, -0.0, 3e9, 1e20]
EXTREME_TEXT = ["", "a\nb", "\x1b[31mred", "a\u2028b", "\u202eevil", "x" * 5000, "é" * 300,
                "../outside", "/abs/path", "a\x00b", "<Chunk id=\"x\">", "`" * 50,
                "NOT NOT state:x", "state:", "中文 名稱", "%0A::error::forged"]


def _same_kind_extreme(draw, value):
    """A value of the same YAML kind as `value`, at its extremes: these often validate,
    so they reach the build."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return draw(st.sampled_from(EXTREME_INTS))
    if isinstance(value, float):
        return draw(st.sampled_from(EXTREME_FLOATS))
    if isinstance(value, str):
        return draw(st.sampled_from([value + draw(st.sampled_from(EXTREME_TEXT)),
                                     draw(st.sampled_from(EXTREME_TEXT))]))
    if isinstance(value, list):
        return value + [draw(st.sampled_from(EXTREME_TEXT + EXTREME_INTS))]
    return _hostile_value(draw)


def _mutate(draw, data):
    """data with a few fields replaced, deleted, or added with hostile values."""
    for _ in range(draw(st.integers(1, 3))):
        places = _paths(data)
        if not places:
            break
        place = draw(st.sampled_from(places))
        parent = data
        for step in place[:-1]:
            parent = parent[step]
        last = place[-1]
        action = draw(st.sampled_from(["extreme", "extreme", "replace", "delete", "add"]))
        if action == "extreme":
            parent[last] = _same_kind_extreme(draw, parent[last])
        elif action == "delete":
            del parent[last]
        elif action == "add" and isinstance(parent, dict):
            key = draw(st.sampled_from(["version", "priority", "cost", "state_refs",
                                        "content_path", "score", "shared_chunk_count",
                                        "preconditions", "tenant", "created_at", "aliases",
                                        "facts", "dependencies", "idempotent", "id"]))
            parent[key] = _hostile_value(draw)
        else:
            parent[last] = _hostile_value(draw)
    return data


def _split(text: str) -> tuple[dict, str]:
    _, frontmatter, body = text.split("---\n", 2)
    return yaml.safe_load(frontmatter), body


def _dump(data) -> str:
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=10**6)


_SOURCES = ([p.relative_to(REPO).as_posix() for p in sorted((REPO / "content").glob("*.md"))]
            + [p.relative_to(REPO).as_posix() for p in sorted((REPO / "skills").glob("*/SKILL.md"))]
            + ["content/links.edges.json"])


@st.composite
def mutated_project(draw):
    """(relative path, new file text) for one file of the example project."""
    target = draw(st.sampled_from(_SOURCES))
    if target.endswith(".json"):
        edges = _mutate(draw, json.loads(json.dumps(EDGE_SEED)))
        return target, json.dumps(edges, indent=1, default=str)
    data, body = _split((REPO / target).read_text(encoding="utf-8"))
    return target, f"---\n{_dump(_mutate(draw, data))}---\n{body}"


def _project(root: Path) -> None:
    shutil.copytree(REPO / "content", root / "content")
    shutil.copytree(REPO / "skills", root / "skills")
    (root / "content" / "links.edges.json").write_text(json.dumps(EDGE_SEED), encoding="utf-8")
    (root / "ctxfst.toml").write_text('embedding_model = "hash-32"\n', encoding="utf-8")


@settings(max_examples=int(os.environ.get("CTXFST_FUZZ_EXAMPLES", "60")), deadline=None,
          suppress_health_check=list(HealthCheck))
@given(mutated_project())
def test_field_mutations_are_located_errors_or_build(change):
    target, text = change
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        _project(root)
        (root / target).write_text(text, encoding="utf-8")
        report = check_paths([], cwd=root)  # raises on an internal error
        lines = {p.relative_to(root).as_posix(): p.read_text(encoding="utf-8").count("\n") + 2
                 for p in root.rglob("*") if p.is_file() and p.suffix in (".md", ".json")}
        for item in report.diagnostics:
            assert item.code in RULES, item
            relative = Path(item.path).resolve().relative_to(root.resolve()).as_posix()
            assert 1 <= item.line <= lines[relative] and item.column >= 1, item
        if report.exit_code():
            return
        output = io.StringIO()
        with contextlib.redirect_stdout(output), contextlib.redirect_stderr(output):
            code = run_build(root, [])
        log = output.getvalue()
        assert code == 0 and "Traceback" not in log, f"{target} validates but does not " \
            f"build:\n{text[:3000]}\n{log[-4000:]}"
