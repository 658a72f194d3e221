"""Random and mutated documents: the parser either parses or returns located diagnostics."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxfst.diagnostics import RULES
from ctxfst.document.kb import KnowledgeBase
from ctxfst.document.parse import parse_document
from ctxfst.document.rules import validate
from ctxfst.document.source import Source

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


_yamlish = st.text(alphabet=st.sampled_from(list("-:[]{}&*!|>'\"#%@` \n\t\r<>/=abcxyz01\u00e9\u4e2d")),
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
