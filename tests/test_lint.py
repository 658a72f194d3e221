"""Quality lint: the reference diagnostics, CJK-aware, separate from validation."""

from __future__ import annotations

from ctxfst.document.text import tokens, word_count

from .conftest import REPO, make_project, write


def lint_codes(cli, *args, cwd=None):
    result = cli("lint", *args, "--format", "json", cwd=cwd)
    return result, [(d["code"], d["message"]) for d in result.json()["diagnostics"]]


def test_cjk_text_is_visible_to_the_tokenizer():
    assert word_count("比較集中式叢集與邊緣平台的取捨") == 8
    assert "邊緣" in tokens("邊緣平台")
    assert tokens("FastAPI and Hono on Workers") == ["fastapi", "hono", "workers"]


def test_tokens_are_the_words_the_token_pattern_defines_on_any_text():
    """The definition the hash embedder's vectors and BM25 rest on: words of two or more
    characters (letters, digits, + and #, joined by . _ -), stopwords left out, and CJK
    bigrams; whatever pattern finds them faster must find these."""
    import random
    import re
    import unicodedata

    from ctxfst.document.text import _STOPWORDS, CJK

    word = re.compile(rf"[a-z0-9][a-z0-9+#]*(?:[._-][a-z0-9+#]+)*|[{CJK}]+")

    def defined(text):
        folded = unicodedata.normalize("NFKC", text).casefold()
        found = []
        for token in word.findall(folded):
            if token[0] > "\u2fff":
                found.extend([token] if len(token) == 1 else
                             [token[i:i + 2] for i in range(len(token) - 1)])
            elif len(token) > 1 and token not in _STOPWORDS:
                found.append(token)
        return found

    rng = random.Random(5)
    alphabet = list("ab1Z.-_+# \n") + ["the", "c++", "知", "識", "é", "ﬁ"]
    texts = ["".join(rng.choice(alphabet) for _ in range(rng.randrange(40)))
             for _ in range(5000)]
    assert all(tokens(text) == defined(text) for text in texts)


def test_example_kb_is_lint_clean(cli):
    result, found = lint_codes(cli, cwd=REPO)
    assert result.code == 0 and found == []


DOC = """
---
entities:
  - id: entity:system
    name: System
    type: concept
  - id: fastapi
    name: FastAPI
    type: framework
  - id: entity:fast-api
    name: Fast API
    type: framework
    aliases: [fastapi]
  - id: state:ready
    name: Ready
    type: goal
chunks:
  - id: note:short
    context: "Too short"
    tags: [A, B]
    entities: [entity:system]
  - id: note_style.1
    context: "這一段說明邊緣平台與叢集之間在延遲與冷啟動上的取捨與差異"
    tags: [A, B]
    entities: []
  - id: note:crowded
    context: "A chunk that links far too many entities to be about any one of them at all"
    tags: [A, B, C]
    entities: [entity:system, fastapi, entity:fast-api, state:ready, entity:system, fastapi, state:ready]
  - id: note:repeat
    context: "Kubernetes rolling updates with readiness probes and fast rollback"
    tags: [A, B, D]
    entities: [fastapi]
---
<Chunk id="note:short">
Short chunk text about nothing in particular.
</Chunk>
<Chunk id="note_style.1">
叢集適合長時間執行的服務；邊緣平台適合短小、對延遲敏感的 API，沒有冷啟動問題。
</Chunk>
<Chunk id="note:crowded">
Many things.
</Chunk>
<Chunk id="note:repeat">
Kubernetes rolling updates with readiness probes and fast rollback, described.
</Chunk>
"""  # noqa: E501 (a chunk's long entities list, as a person writes it)


def test_each_lint_rule(tmp_path, cli):
    path = write(tmp_path, "doc.md", DOC)
    result, found = lint_codes(cli, path)
    codes = sorted({code for code, _ in found})
    assert codes == ["CTX502", "CTX504", "CTX505", "CTX506", "CTX507", "CTX508", "CTX509",
                     "CTX510", "CTX511"]
    assert result.code == 0  # advice, not errors
    assert cli("lint", path, "--strict").code == 1
    messages = " ".join(message for _, message in found)
    assert "'fastapi'" in messages and "state:" in messages


def test_cjk_context_is_not_too_short(tmp_path, cli):
    _, found = lint_codes(cli, write(tmp_path, "doc.md", DOC))
    short = [m for code, m in found if code == "CTX502"]
    assert len(short) == 1 and "note:short" in short[0]


def test_near_duplicates_across_documents_including_chinese(tmp_path, cli):
    make_project(tmp_path)
    text = "叢集適合長時間執行、需要大量記憶體的服務；邊緣平台適合短小、對延遲敏感的 API。"
    for name, cid in (("a", "note:edge-a"), ("b", "note:edge-b")):
        write(tmp_path, f"content/{name}.md",
              f'---\nchunks:\n  - id: {cid}\n    context: "比較集中式叢集與邊緣平台的取捨與成本"\n'
              f'    tags: [{name}]\n---\n<Chunk id="{cid}">\n{text}\n</Chunk>\n')
    write(tmp_path, "content/c.md", '---\nchunks:\n  - id: note:other\n    context: '
          '"Something else entirely about databases"\n---\n<Chunk id="note:other">\n'
          "PostgreSQL write-ahead logs and RocksDB compaction.\n</Chunk>\n")
    _, found = lint_codes(cli, cwd=tmp_path)
    duplicates = [m for code, m in found if code == "CTX501"]
    assert len(duplicates) == 1 and "note:edge-a" in duplicates[0]


def test_lint_reports_unreadable_files(tmp_path, cli):
    path = write(tmp_path, "broken.md", "---\nchunks: [\n---\n")
    result, found = lint_codes(cli, path)
    assert result.code == 1 and found[0][0] == "CTX012"


def test_lint_scales_without_all_pairs(tmp_path):
    """Near-duplicate search does not compare every pair: time grows ~linearly."""
    import time

    from ctxfst.document.lint import lint
    from ctxfst.document.parse import parse_text
    from ctxfst.kb import KnowledgeBase, validate

    def kb_of(count: int) -> KnowledgeBase:
        kb = KnowledgeBase(root=tmp_path)
        for n in range(count):
            words = " ".join(f"w{n}x{k}" for k in range(30))
            kb.documents.append(parse_text(
                f'---\nchunks:\n  - id: note:n{n}\n    context: "context {n} {words[:60]}"\n'
                f'---\n<Chunk id="note:n{n}">\n{words}\n</Chunk>\n', f"d{n}.md"))
        return kb

    def timed(count: int) -> float:
        kb = kb_of(count)
        validation = validate(kb)
        started = time.perf_counter()
        lint(kb, validation)
        return time.perf_counter() - started

    small, large = timed(250), timed(2000)
    # All pairs would cost 64x; allow generous noise around the linear 8x.
    assert large < small * 30
