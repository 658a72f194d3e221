"""Quality lint (`ctxfst lint`): advice on chunks and entities, never validity errors."""

from __future__ import annotations

import heapq
import math
import re
from collections import Counter, defaultdict
from dataclasses import dataclass

from ..diagnostics import Diagnostic, ordered
from .kb import DocumentSet
from .model import ENTITY_ID_PREFIXES, ChunkRecord, ParsedDocument
from .model import diagnostic_at as _at
from .rules import Validation
from .text import jaccard, normalize, tokens, word_count

NEAR_DUPLICATE = 0.7          # Jaccard of chunk token sets
MIN_TOKENS_FOR_DUPLICATE = 5
# Past this many candidate entries, compare candidates in order and stop at the first alike.
EAGER_CANDIDATES = 200
CONTEXT_MIN_WORDS = 8
CONTEXT_MAX_WORDS = 60
CONTEXT_REPEAT = 0.7          # Jaccard of context vs the content's opening
OPENING_WORDS = 30
BROAD_TAG_SHARE = 0.8
BROAD_TAG_MIN_CHUNKS = 4
MAX_ENTITIES_PER_CHUNK = 6
GENERIC_NAMES = frozenset(normalize(name) for name in (
    "system project tool computer work experience technology feature application problem "
    "task thing stuff data information process service item misc other general "
    "系統 專案 項目 工具 電腦 工作 經驗 技術 功能 應用 問題 任務 資料 資訊 服務 其他 一般"
).split())
_CHUNK_ID_STYLE = re.compile(r"^[a-z0-9]+:[a-z0-9]+(-[a-z0-9]+)*$")


@dataclass
class _Chunk:
    doc: ParsedDocument
    index: int
    record: ChunkRecord
    token_set: frozenset


def lint(kb: DocumentSet, validation: Validation) -> list[Diagnostic]:
    out: list[Diagnostic] = []
    chunks: list[_Chunk] = []
    for doc in kb.documents:
        for index, record in doc.chunks:
            body = doc.bodies.get(record.id)
            content = body.content if body else ""
            chunks.append(_Chunk(doc, index, record,
                                 frozenset(tokens(record.context + " " + content))))
            _lint_chunk(doc, index, record, content, out)
        _lint_tags(doc, out)
        _lint_entity_ids(doc, out)
    _near_duplicates(chunks, out)
    _lint_catalog(validation, out)
    return ordered(out)


def _lint_chunk(doc, index: int, record: ChunkRecord, content: str, out) -> None:
    base = ("chunks", index)
    label = f"chunk '{record.id}'"
    raw = (doc.frontmatter or {}).get("chunks", [])[index]
    words = word_count(record.context)
    if "context" in raw and not record.context.strip():
        out.append(_at(doc, base + ("context",), "CTX512", f"{label}: context is empty"))
    elif record.context.strip() and words < CONTEXT_MIN_WORDS:
        out.append(_at(doc, base + ("context",), "CTX502",
                       f"{label}: context has {words} word(s); say what the chunk covers "
                       f"and how it differs from its neighbours ({CONTEXT_MIN_WORDS}+ words)"))
    elif words > CONTEXT_MAX_WORDS:
        out.append(_at(doc, base + ("context",), "CTX503",
                       f"{label}: context has {words} words; keep it under "
                       f"{CONTEXT_MAX_WORDS}"))
    if content and record.context.strip():
        opening = " ".join(content.split()[:OPENING_WORDS])
        overlap = jaccard(set(tokens(record.context)), set(tokens(opening)))
        if overlap > CONTEXT_REPEAT:
            out.append(_at(doc, base + ("context",), "CTX504",
                           f"{label}: context repeats the content's opening "
                           f"({overlap:.0%} overlap); describe the chunk's role instead"))
    if not _CHUNK_ID_STYLE.match(record.id):
        out.append(_at(doc, base + ("id",), "CTX507",
                       f"{label}: chunk ids read best as 'category:topic-name'"))
    count = len(record.entities)
    if count > MAX_ENTITIES_PER_CHUNK:
        out.append(_at(doc, base + ("entities",), "CTX510",
                       f"{label} links {count} entities; link the 1-{MAX_ENTITIES_PER_CHUNK} "
                       "it is really about"))
    elif count == 0:
        out.append(_at(doc, base + ("id",), "CTX511",
                       f"{label} links no entities, so graph retrieval cannot reach it"))


def _lint_tags(doc: ParsedDocument, out) -> None:
    records = doc.chunks
    first_with: dict[frozenset, str] = {}
    counts: Counter = Counter()
    for index, record in records:
        tag_set = frozenset(normalize(tag) for tag in record.tags)
        counts.update(tag_set)
        if not tag_set:
            continue
        if tag_set in first_with:
            out.append(_at(doc, ("chunks", index, "tags"), "CTX506",
                           f"chunk '{record.id}' has the same tags as "
                           f"'{first_with[tag_set]}'; add a tag that tells them apart"))
        else:
            first_with[tag_set] = record.id
    if len(records) >= BROAD_TAG_MIN_CHUNKS:
        broad = sorted(tag for tag, n in counts.items() if n >= BROAD_TAG_SHARE * len(records))
        if len(broad) > 1:
            out.append(_at(doc, ("chunks",), "CTX505",
                           f"tags {', '.join(broad)} are on most chunks, so they filter "
                           "nothing; use more specific tags"))


def _lint_entity_ids(doc: ParsedDocument, out) -> None:
    for index, entity in doc.entities:
        prefix = entity.id.split(":", 1)[0] if ":" in entity.id else None
        path = ("entities", index, "id")
        if prefix not in ENTITY_ID_PREFIXES:
            out.append(_at(doc, path, "CTX507",
                           f"entity '{entity.id}': entity ids read best with a type prefix "
                           f"({', '.join(p + ':' for p in ENTITY_ID_PREFIXES)})"))
        elif prefix != "entity" and prefix != entity.type:
            out.append(_at(doc, path, "CTX507",
                           f"entity '{entity.id}' has the prefix '{prefix}:' but the type "
                           f"'{entity.type}'"))


def _lint_catalog(validation: Validation, out) -> None:
    owners: dict[str, str] = {}
    for entity_id in sorted(validation.catalog):
        entry = validation.catalog[entity_id]
        entity = entry.entity
        declaration = entry.declarations[0]
        doc, index = declaration.doc, declaration.index
        if normalize(entity.name) in GENERIC_NAMES:
            out.append(_at(doc, ("entities", index, "name"), "CTX508",
                           f"entity '{entity.id}' has the generic name {entity.name!r}; "
                           "name the specific thing"))
        for label in dict.fromkeys(normalize(n) for n in (entity.name, *entity.aliases)):
            owner = owners.setdefault(label, entity.id)
            if owner != entity.id:
                out.append(_at(doc, ("entities", index, "name"), "CTX509",
                               f"entity '{entity.id}' shares the name or alias {label!r} "
                               f"with '{owner}'; merge them or tell them apart"))


def _near_duplicates(chunks: list[_Chunk], out) -> None:
    """All chunks with a Jaccard >= NEAR_DUPLICATE partner, without an all-pairs loop.

    PPJoin: with tokens candidates rarest first, two sets with Jaccard >= t share a token
    within each one's prefix of |S| - ceil(t|S|) + 1 tokens; a shared token's positions
    bound how much more they can share, which prunes most candidates before any set
    intersection is computed. Chunks with the same token set are searched once, through
    their first member: n copies of one chunk would otherwise be n^2 candidate pairs.
    """
    t = NEAR_DUPLICATE
    candidates = sorted((c for c in chunks if len(c.token_set) >= MIN_TOKENS_FOR_DUPLICATE),
                        key=lambda c: (len(c.token_set), c.record.id))
    groups: dict[frozenset, list[_Chunk]] = {}
    for chunk in candidates:
        groups.setdefault(chunk.token_set, []).append(chunk)
    firsts = [group[0] for group in groups.values()]  # still in `candidates` order
    frequency: Counter = Counter()
    for chunk in firsts:
        frequency.update(chunk.token_set)
    ranked = [sorted(c.token_set, key=lambda tok: (frequency[tok], tok)) for c in firsts]
    index: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for x, chunk in enumerate(firsts):
        size_x = len(ranked[x])
        prefix = size_x - math.ceil(t * size_x) + 1
        # Later (larger) sets only need this shorter prefix of x to find it.
        indexed = size_x - math.ceil(2 * t / (1 + t) * size_x) + 1
        postings = [index[token] for token in ranked[x][:prefix]]
        if sum(map(len, postings)) > EAGER_CANDIDATES:
            match, score = _first_alike(chunk, firsts, postings)
        else:
            match, score = _first_candidate(chunk, firsts, ranked, postings)
        for i, token in enumerate(ranked[x][:indexed]):
            index[token].append((x, i))
        # One report per chunk (its first match in `candidates`) keeps output linear in the
        # KB. An earlier distinct set precedes the group's own first member.
        for position, member in enumerate(groups[chunk.token_set]):
            if match is None and position == 0:
                continue
            partner, alike = (match, score) if match is not None else (chunk, 1.0)
            out.append(_at(member.doc, ("chunks", member.index, "id"), "CTX501",
                           f"chunk '{member.record.id}' is {alike:.0%} alike "
                           f"'{partner.record.id}' ({partner.doc.path}); retrieval cannot "
                           "tell them apart"))


def _first_candidate(chunk: _Chunk, firsts: list[_Chunk], ranked: list[list[str]],
                     postings: list[list[tuple[int, int]]]) -> tuple[_Chunk | None, float]:
    """The first earlier chunk alike this one, pruning with the positional filter first."""
    t = NEAR_DUPLICATE
    size_x = len(chunk.token_set)
    overlap: dict[int, int] = {}
    for i, posting in enumerate(postings):
        for y, j in posting:
            size_y = len(ranked[y])
            if size_y < t * size_x or overlap.get(y) == -1:
                continue
            needed = math.ceil(t / (1 + t) * (size_x + size_y))
            seen = overlap.get(y, 0)
            if seen + 1 + min(size_x - i - 1, size_y - j - 1) >= needed:
                overlap[y] = seen + 1
            else:
                overlap[y] = -1  # cannot reach the threshold any more
    for y in sorted(y for y, seen in overlap.items() if seen > 0):
        score = jaccard(chunk.token_set, firsts[y].token_set)
        if score >= t:
            return firsts[y], score
    return None, 0.0


def _first_alike(chunk: _Chunk, firsts: list[_Chunk],
                 postings: list[list[tuple[int, int]]]) -> tuple[_Chunk | None, float]:
    """The same answer as _first_candidate for long candidate lists: candidates in
    order, each compared at once, stopping at the first alike. Many near-copies (a
    common token in every prefix) then cost one comparison each, not one per pair."""
    t = NEAR_DUPLICATE
    size_x = len(chunk.token_set)
    previous = -1
    for y, _ in heapq.merge(*postings):
        if y == previous:
            continue
        previous = y
        other = firsts[y].token_set
        if len(other) >= t * size_x:
            score = jaccard(chunk.token_set, other)
            if score >= t:
                return firsts[y], score
    return None, 0.0
