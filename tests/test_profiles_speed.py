"""build_profiles, which works on chunks.parquet's columns in arrays and reads text only
from the row groups it needs, against a plain computation over chunk dicts (the way it
was first written) on random knowledge bases."""

from __future__ import annotations

import io
import random
from collections import Counter, defaultdict

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ctxfst.compile import profiles as P
from ctxfst.compile.chunks import chunks_table
from ctxfst.document.text import tokens

RANK = {"critical": 0, "high": 1, "medium": 2, "low": 3}


def reference_profiles(entities: list[dict], chunks: list[dict]) -> list[dict]:
    names = {entity["id"]: entity.get("name", entity["id"]) for entity in entities}
    mentions: dict[str, list[dict]] = defaultdict(list)
    chunk_tokens: dict[str, Counter] = {}

    def tokens_of(chunk: dict) -> Counter:
        if chunk["id"] not in chunk_tokens:
            chunk_tokens[chunk["id"]] = Counter(tokens(chunk.get("context", "") + " "
                                                       + chunk.get("content", "")))
        return chunk_tokens[chunk["id"]]

    for chunk in chunks:
        for entity_id in dict.fromkeys(chunk.get("entities", [])):
            if entity_id in names:
                mentions[entity_id].append(chunk)
    profiles = []
    for entity in entities:
        entity_id = entity["id"]
        mentioning = mentions.get(entity_id, [])
        ranked = sorted(mentioning, key=lambda c: (RANK.get(c.get("priority"), 2), c["id"]))
        counts: Counter = Counter()
        for chunk in ranked[:P.KEYWORD_CHUNKS]:
            counts.update(tokens_of(chunk))
        profile = {
            "id": entity_id, "name": entity.get("name", ""), "type": entity.get("type", ""),
            "aliases": entity.get("aliases", []),
            "mentioned_chunks": sorted(c["id"] for c in mentioning),
            "mention_count": len(mentioning),
            "tags": list(dict.fromkeys(tag for c in ranked for tag in c.get("tags", []))),
            "contexts": [c["context"] for c in ranked if c.get("context")][:P.MAX_CONTEXTS],
            "content_excerpts": [P.truncate_words(c["content"]) for c in
                                 [c for c in ranked if c.get("content")][:P.MAX_EXCERPTS]],
            "related_entities": sorted({names[other] for c in mentioning
                                        for other in c.get("entities", [])
                                        if other != entity_id and other in names}),
            "keywords": [word for word, _ in sorted(counts.items(),
                                                    key=lambda kv: (-kv[1], kv[0]))
                         [:P.TOP_KEYWORDS]],
        }
        for key in ("preconditions", "postconditions", "related_skills"):
            if entity.get(key):
                profile[key] = entity[key]
        profile["representation"] = P.representation(profile)
        profiles.append(profile)
    return profiles


def reference_dangling(entities: list[dict], chunks: list[dict]) -> list[str]:
    declared = {entity["id"] for entity in entities}
    return sorted({ref for chunk in chunks for ref in chunk.get("entities", [])
                   if ref not in declared})


WORDS = ["hono", "router", "middleware", "cache", "the", "edge", "deploy", "a", "worker",
         "東京都", "検索エンジン", "데이터", "ラーメン", "Ｆｕｌｌｗｉｄｔｈ", "naïve", "x"]


def text(rng: random.Random, empty: float) -> str:
    if rng.random() < empty:
        return ""
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 120)))


def knowledge_base(seed: int) -> tuple[list[dict], list[dict], int]:
    """Random catalog and chunk rows (some undeclared, repeated and shared ids, empty
    texts, unknown priorities), and a row group size for chunks.parquet."""
    rng = random.Random(seed)
    size = rng.choice([0, 1, 5, 40, 300, 300])
    declared = [f"entity:{n}" for n in rng.sample(range(40), rng.randint(0, 12))]
    undeclared = ["entity:ghost", "entity:未定義", "entity:zz"]
    entities = []
    for entity_id in sorted(declared):
        entity = {"id": entity_id, "type": rng.choice(["concept", "tool", "skill"]),
                  "aliases": rng.sample(WORDS, rng.randint(0, 2))}
        if rng.random() < 0.8:  # a shared name, or none (related falls back to the id)
            entity["name"] = rng.choice(["Hono", "ホノ", entity_id.title(), "Cache"])
        if rng.random() < 0.2:
            entity["preconditions"] = ["state:ready"]
        entities.append(entity)
    empty = rng.choice([0.1, 0.5, 0.98])  # mostly empty: contexts far down the ranking
    chunk_ids = [rng.choice(["c", "k", "チャンク", "Z"]) + f"-{n}" for n in range(size)]
    rows = []
    for n in range(size):
        chunk_id = chunk_ids[n] if rng.random() < 0.95 else rng.choice(chunk_ids)
        chunk = {"id": chunk_id, "context": text(rng, empty),
                 "content": text(rng, empty), "source": "doc.md",
                 "tags": rng.choices(["api", "web", "タグ", "edge", "api"], k=rng.randint(0, 4))}
        named = declared + undeclared
        if named and rng.random() < 0.9:
            chunk["entities"] = rng.choices(named, k=rng.randint(0, 5))
        priority = rng.choice(["critical", "high", "medium", "low", None, "urgent"])
        if priority is not None:
            chunk["priority"] = priority
        rows.append(chunk)
    return entities, rows, rng.randint(1, 60)


def parquet(rows: list[dict], group_rows: int) -> pq.ParquetFile:
    return pq.ParquetFile(pa.BufferReader(_bytes(rows, group_rows)))


@pytest.mark.parametrize("seed", range(60))
def test_profiles_match_the_plain_computation(seed):
    entities, rows, group_rows = knowledge_base(seed)
    assert P.build_profiles(entities, parquet(rows, group_rows)) == (
        reference_profiles(entities, rows), reference_dangling(entities, rows))


@pytest.mark.parametrize("seed", range(10))
def test_tag_order_without_packed_keys_is_the_same(seed, monkeypatch):
    """Where (entity, tag, place) keys would not fit one int64 (millions of tags), they
    are sorted as separate keys; where (entity, related entity) flags would not fit one
    array (many entities), the pairs are sorted: the same profiles."""
    monkeypatch.setattr(P, "_PACKED_LIMIT", 0)
    monkeypatch.setattr(P, "_SEEN_LIMIT", 0)
    entities, rows, group_rows = knowledge_base(seed)
    assert P.build_profiles(entities, parquet(rows, group_rows)) == (
        reference_profiles(entities, rows), reference_dangling(entities, rows))


def test_contexts_far_down_the_ranking_are_found():
    """An entity whose top chunks have no context or content: its profile quotes chunks
    ranked past KEYWORD_CHUNKS, read from other row groups."""
    entities = [{"id": "entity:a", "name": "A", "type": "concept"}]
    rows = [{"id": f"c-{n:04}", "context": "" if n < 400 else f"context {n}",
             "content": "" if n < 700 else f"content {n}", "tags": [],
             "entities": ["entity:a"], "priority": "critical" if n < 500 else "low"}
            for n in range(1000)]
    (profile,), _ = P.build_profiles(entities, parquet(rows, 64))
    assert profile["contexts"] == [f"context {n}" for n in range(400, 405)]
    assert profile["content_excerpts"] == [f"content {n}" for n in range(700, 703)]
    assert profile == reference_profiles(entities, rows)[0]


def edited(rows: list[dict], rng: random.Random, entities: list[dict]) -> list[dict]:
    """rows with some chunks removed, added, and changed in one column each."""
    named = [entity["id"] for entity in entities] + ["entity:ghost"]
    kept = [dict(row) for row in rows if rng.random() > 0.05]
    for number in range(rng.randint(0, 4)):
        kept.insert(rng.randint(0, len(kept)), {
            "id": f"new-{number}", "context": text(rng, 0.3), "content": text(rng, 0.3),
            "source": "doc.md", "tags": ["api"], "priority": "critical",
            "entities": rng.sample(named, rng.randint(0, min(3, len(named))))})
    for row in rng.sample(kept, min(len(kept), rng.randint(0, 5))):
        change = rng.choice(["priority", "tags", "entities", "context", "content"])
        if change == "priority":
            row["priority"] = rng.choice(["critical", "low", "urgent"])
        elif change == "tags":
            row["tags"] = [*row.get("tags", []), "edge"]
        elif change == "entities":
            row["entities"] = rng.sample(named, rng.randint(0, min(3, len(named))))
        else:
            row[change] = text(rng, 0.5)
    return kept


def spliced(before: list[dict], after: P.Made, only: list[int]) -> list[dict]:
    profiles = list(before)
    for entity, profile in zip(only, after.profiles, strict=True):
        profiles[entity] = profile
    return profiles


@pytest.mark.parametrize("flags", [True, False], ids=["flags", "sorted"])
@pytest.mark.parametrize("seed", range(40))
def test_profiles_made_again_for_what_changed_are_the_whole_profiles(seed, flags, monkeypatch):
    """After chunks are added, removed and changed, the entities Mentions says a change
    touches (by the changed rows, or by row group and mentioned chunks when the old rows
    are not at hand, and by the text they read) made again, with the others' profiles
    kept, are the profiles made from scratch (related entities found by flags or by
    sorted pairs)."""
    from ctxfst.artifacts.parquet_splice import column_digests

    if not flags:
        monkeypatch.setattr(P, "_SEEN_LIMIT", 0)
    entities, rows, group_rows = knowledge_base(seed)
    for number, row in enumerate(rows):  # (chunk ids are unique in a knowledge base)
        row["id"] = f"{row['id']}-{number}"
    rng = random.Random(seed)
    later = edited(rows, rng, entities)
    files = [parquet(version, group_rows) for version in (rows, later)]
    before, after = (P.Mentions(entities, file) for file in files)
    made = before.profiles()
    whole = after.profiles()
    old_digests, new_digests = (column_digests(_bytes(version, group_rows),
                                               P.MENTION_COLUMNS) for version in (rows, later))
    fresh = [group for group, digest in enumerate(new_digests) if digest not in old_digests]
    gone = files[0].read_row_groups(
        [group for group, digest in enumerate(old_digests) if digest not in new_digests],
        columns=list(P.MENTION_COLUMNS))
    by_rows = after.named_by_changed_rows(gone, fresh)
    counts = P.entities_table(made.profiles).column("mention_count").to_numpy()
    by_groups = after.named_in(fresh) | after.counts_changed(counts)
    assert by_rows <= by_groups
    for touched in (by_rows, by_groups):
        reading = sorted(set(range(len(entities))) - touched)
        touched = touched | {entity for entity, (digest, _) in after.reading(reading).items()
                             if digest != made.text_digests[entity]}
        only = sorted(touched)
        assert spliced(made.profiles, after.profiles(only), only) == whole.profiles
        again = after.profiles(only)
        assert again.text_digests == [whole.text_digests[e] for e in only]
        assert again.groups == [whole.groups[e] for e in only]
        assert [(digest, groups) for digest, groups in after.reading(only).values()] == list(
            zip(again.text_digests, again.groups, strict=True))


def _bytes(rows: list[dict], group_rows: int) -> bytes:
    sink = io.BytesIO()
    pq.write_table(chunks_table(rows), sink, row_group_size=group_rows)
    return sink.getvalue()


def test_an_entity_whose_only_chunk_is_gone_is_touched_by_row_group_too():
    """Without the old rows, a chunk gone is seen by the count of its entity's chunks:
    the row group it leaves may name that entity nowhere else."""
    entities = [{"id": "entity:a", "name": "A"}, {"id": "entity:b", "name": "B"}]
    rows = [{"id": name, "context": name, "content": name, "tags": [], "entities": [entity]}
            for name, entity in (("x", "entity:a"), ("y", "entity:b"), ("z", "entity:b"))]
    before = P.Mentions(entities, parquet(rows, 2)).profiles()
    after = P.Mentions(entities, parquet(rows[1:], 2))
    counts = P.entities_table(before.profiles).column("mention_count").to_numpy()
    assert after.named_in([0]) == {1}
    assert after.counts_changed(counts) == {0}
    assert after.profiles([0]).profiles[0]["mentioned_chunks"] == []
