"""Entity profiles: each entity with the chunks that mention it, and the text to embed.

Field names follow upstream's entity-profiles.json; `representation` uses its line
prefixes (name:, type:, aliases, tags, context, content, related).
"""

from __future__ import annotations

import hashlib
import heapq
import itertools
import json
import re
from collections import Counter
from itertools import chain
from typing import Any, NamedTuple

import numpy as np

from ..artifacts.arrays import from_numpy
from ..document.text import tokens

PROFILES_SCHEMA_VERSION = "1.0.0"
MAX_CONTEXTS = 5
MAX_EXCERPTS = 3
TOP_KEYWORDS = 10
KEYWORD_CHUNKS = 50  # keywords come from an entity's 50 most important chunks
EXCERPT_WORDS = 80
_PRIORITY_RANK = {"critical": 0, "high": 1, "medium": 2, "low": 3}
_CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff\u3040-\u30ff\uac00-\ud7af]")


def truncate_words(text: str, limit: int = EXCERPT_WORDS) -> str:
    """Cut text to about `limit` words, counting two CJK characters as one word."""
    words = text.split()
    budget, kept = 0.0, []
    for word in words:
        cjk = len(_CJK.findall(word))
        cost = (cjk / 2) + (1 if len(word) > cjk else 0)
        if budget + cost > limit and kept:
            if cjk:  # split a long CJK run instead of dropping it whole
                room = int((limit - budget) * 2)
                if room > 0:
                    kept.append(word[:room])
            break
        kept.append(word)
        budget += cost
    return " ".join(kept)


# chunks.parquet columns read whole; TEXT_COLUMNS are read only from the row groups
# holding the chunks a profile quotes or takes keywords from.
MENTION_COLUMNS = ("chunk_id", "priority", "tags", "entities")
_PACKED_LIMIT = 2 ** 62  # keys packed into one int64 must stay below this
TEXT_COLUMNS = ("chunk_id", "context", "content")
# What a profile reads of its catalog entry (catalog.json holds these alone)
CATALOG_FIELDS = ("id", "name", "type", "aliases", "preconditions", "postconditions",
                  "related_skills")


def profile_catalog(entities: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The catalog as the profiles read it: each entity's CATALOG_FIELDS."""
    return [{key: entity[key] for key in CATALOG_FIELDS if key in entity}
            for entity in entities]


def build_profiles(entities: list[dict[str, Any]], chunks) -> tuple[list[dict[str, Any]],
                                                                    list[str]]:
    """Each catalog entity's profile, and the entity ids chunks name but no document
    declares (sorted), from chunks.parquet opened as a pyarrow ParquetFile."""
    mentions = Mentions(entities, chunks)
    return mentions.profiles().profiles, mentions.dangling


class Mentions:
    """Which chunks of chunks.parquet (a pyarrow ParquetFile) name which catalog
    entities, from its MENTION_COLUMNS in arrays; a profile is a function of its
    catalog entry, the names of the entities it shares a chunk with, the mention columns
    of the chunks naming it and the TEXT_COLUMNS of those it ranks first (read from
    their row groups only when profiles are made).

    Mentions are found and ranked in arrays, and only what the profiles hold becomes
    Python objects (a dict for each of 70,000 chunks took most of a build's time)."""

    def __init__(self, entities: list[dict[str, Any]], chunks) -> None:
        import pyarrow as pa
        import pyarrow.compute as pc

        self.entities, self.chunks = entities, chunks
        table = chunks.read(columns=list(MENTION_COLUMNS))
        self.tags = table.column("tags")
        self.count = count = len(entities)
        self.rows, self.ents, self.dangling = _mentions(entities, table)
        self.per_entity = np.bincount(self.ents, minlength=count)
        self.chunk_ids = table.column("chunk_id")
        by_id = pc.sort_indices(self.chunk_ids).to_numpy()  # stable: equal ids keep order
        known = pc.index_in(table.column("priority"),
                            value_set=pa.array(list(_PRIORITY_RANK)))
        rank = np.array([*_PRIORITY_RANK.values(), _PRIORITY_RANK["medium"]], np.int8)[
            known.fill_null(len(_PRIORITY_RANK)).to_numpy()]  # none or unknown: medium
        # The rows in chunk id order, and ranked: most important chunks first (priority,
        # then id), so capped lists keep what matters; each order with each row's place.
        ranked = by_id[np.argsort(rank[by_id], kind="stable")]
        self._orders = [(order, _inverse(order)) for order in (by_id, ranked)]
        sizes = np.array([chunks.metadata.row_group(group).num_rows
                          for group in range(chunks.metadata.num_row_groups)], np.int64)
        self.group_starts = np.cumsum(sizes) - sizes

    def groups_of(self, rows: np.ndarray) -> np.ndarray:
        """The row group holding each row (an empty group starts where the next does)."""
        return np.searchsorted(self.group_starts, rows, "right") - 1

    def named_in(self, groups: list[int]) -> set[int]:
        """The entities (catalog indices) some chunk of these row groups names."""
        inside = np.isin(self.groups_of(self.rows), np.asarray(groups, np.int64))
        return set(np.unique(self.ents[inside]).tolist())

    def named_by_changed_rows(self, before, groups: list[int]) -> set[int]:
        """The entities named, before or now, by a chunk whose MENTION_COLUMNS are not
        the same in `before` (those columns of the previous chunks.parquet's rows that
        lie in none of its row groups found whole in this file) and in this file's row
        groups `groups` (all those not found whole in the previous file): chunk ids
        are unique, so a chunk in neither is in a row group both files hold."""
        now = self.chunks.read_row_groups(groups, columns=list(MENTION_COLUMNS)) \
            if groups else before.schema.empty_table()
        rows = [{row["chunk_id"]: row for row in table.to_pylist()} for table in (before, now)]
        named: set[str] = set()
        for chunk_id in rows[0].keys() | rows[1].keys():
            old, new = (version.get(chunk_id) for version in rows)
            if old != new:
                named.update(*((row["entities"] or []) for row in (old, new) if row))
        places = {entity["id"]: index for index, entity in enumerate(self.entities)}
        return {places[entity_id] for entity_id in named if entity_id in places}

    def counts_changed(self, counts: np.ndarray) -> set[int]:
        """The entities mentioned by another number of chunks than `counts` (the
        mention_count column of entities.parquet of the same catalog). With named_in()
        of the row groups not in the previous file, every entity whose mentioning
        chunks changed: a chunk that names it now, changed or new, lies in such a group;
        one that named it before and is gone leaves it fewer unless another came."""
        return set(np.flatnonzero(np.asarray(counts) != self.per_entity).tolist())

    def _picked(self, chosen: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The pairs of these entities (None: all), grouped by entity: their rows in chunk
        id order and ranked, and their entities. Only their pairs are sorted: the cost
        follows the mentions of the entities a change touches."""
        if chosen is None:
            rows, ents = self.rows, self.ents
        else:
            picked = np.isin(self.ents, chosen)
            rows, ents = self.rows[picked], self.ents[picked]
        (by_id, owners), (ranked, _) = (_in_order(rows, ents, *order) for order in self._orders)
        return by_id, ranked, owners

    def reading(self, only: list[int]) -> dict[int, tuple[str, list[int]]]:
        """For these entities, a digest of the text of the chunks their profiles read
        (contexts, excerpts and keywords come from it) and the row groups it lies in."""
        _, ranked, owners = self._picked(np.asarray(only, np.int64))
        quoted = _quoted(self.chunks, ranked, owners, self.count)
        return dict(zip(only, zip(_text_digests(quoted, self.count, only),
                                  self._groups_read(quoted, only), strict=True), strict=True))

    def _groups_read(self, quoted, only: list[int]) -> list[list[int]]:
        """The row groups whose text _quoted() read for each of these entities."""
        *_, (readers, read) = quoted
        groups = _split(self.groups_of(read).tolist(),
                        np.bincount(readers, minlength=self.count))
        return [sorted(set(groups[entity])) for entity in only]

    def profiles(self, only: list[int] | None = None) -> Made:
        """The profiles of the entities `only` (catalog indices, ascending; all when
        None), with what reading() says of each."""
        import pyarrow as pa

        entities, count = self.entities, self.count
        chosen = np.arange(count) if only is None else np.asarray(only, np.int64)
        by_id, ranked, owners = self._picked(None if only is None else chosen)
        names = [entity.get("name", entity["id"]) for entity in entities]
        ids = self.chunk_ids.take(from_numpy(by_id, pa.int64())).to_pylist()
        mentioned = dict(zip(chosen.tolist(), _split(ids, self.per_entity[chosen]),
                             strict=True))
        tags = _ordered_tags(self.tags, ranked, owners, count)
        related = _co_mentioned(self.rows, self.ents, count, None if only is None else chosen)
        quoted = _quoted(self.chunks, ranked, owners, count)
        text, context_rows, excerpt_rows, keyword_rows, _ = quoted
        chunk_tokens: dict[str, list[str]] = {}  # each chunk tokenised once, when needed

        def tokens_of(row: int) -> list[str]:
            chunk_id, context, content = text[row]
            if chunk_id not in chunk_tokens:
                chunk_tokens[chunk_id] = tokens(context + " " + content)
            return chunk_tokens[chunk_id]

        made = Made([], self._groups_read(quoted, chosen.tolist()),
                    _text_digests(quoted, count, chosen.tolist()))
        for index in chosen.tolist():
            entity = entities[index]
            counts = Counter(chain.from_iterable(tokens_of(row)
                                                 for row in keyword_rows[index]))
            profile = {
                "id": entity["id"], "name": entity.get("name", ""),
                "type": entity.get("type", ""), "aliases": entity.get("aliases", []),
                "mentioned_chunks": mentioned[index],
                "mention_count": len(mentioned[index]), "tags": tags[index],
                "contexts": [text[row][1] for row in context_rows[index]],
                "content_excerpts": [truncate_words(text[row][2])
                                     for row in excerpt_rows[index]],
                "related_entities": sorted({names[other] for other in related[index]}),
                "keywords": _top_words(counts),
            }
            for key in ("preconditions", "postconditions", "related_skills"):
                if entity.get(key):
                    profile[key] = entity[key]
            profile["representation"] = representation(profile)
            made.profiles.append(profile)
        return made


class Made(NamedTuple):
    """Profiles made (Mentions.profiles), with, for each, the row groups whose text it
    read and the digest of that text (Mentions.reading)."""

    profiles: list[dict[str, Any]]
    groups: list[list[int]]
    text_digests: list[str]


def _text_digests(quoted, count: int, only: list[int]) -> list[str]:
    """The digests of Mentions.reading() of the entities `only` from what _quoted()
    read for them."""
    text, *_, (readers, read) = quoted
    rows = _split(read.tolist(), np.bincount(readers, minlength=count))
    found = []
    for entity in only:
        digest = hashlib.blake2b(digest_size=16)
        for row in rows[entity]:
            digest.update(json.dumps(text[row], ensure_ascii=False).encode(
                "utf-8", "surrogatepass"))
        found.append(digest.hexdigest())
    return found


def _top_words(counts: Counter) -> list[str]:
    """The TOP_KEYWORDS most frequent words, ties in alphabetical order. Only the words as
    frequent as the last of them are sorted (sorting every word took longer)."""
    floor = min(heapq.nlargest(TOP_KEYWORDS, counts.values()), default=0)
    return sorted((word for word, count in counts.items() if count >= floor),
                  key=lambda word: (-counts[word], word))[:TOP_KEYWORDS]


def _mentions(entities: list[dict[str, Any]], table
              ) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """The (row, entity index) pairs of the declared entities that chunks name, sorted by
    row then entity (a chunk naming an entity twice mentions it once), and the ids they
    name that no entity has (sorted)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    lists = table.column("entities").combine_chunks()
    refs = pc.list_flatten(lists)
    catalog = pa.array([entity["id"] for entity in entities], pa.string())
    places = pc.index_in(refs, value_set=catalog)
    found = places.fill_null(-1).to_numpy()
    parents = pc.list_parent_indices(lists).to_numpy()
    declared = found >= 0
    width = max(len(entities), 1)
    rows, ents = np.divmod(_distinct(parents[declared] * width + found[declared]), width)
    # (an Arrow mask: one from numpy imports numpy.ma, 0.1 s of an edit)
    return rows, ents, sorted(set(refs.filter(pc.is_null(places)).to_pylist()))


def _ordered_tags(column, ranked: np.ndarray, owners: np.ndarray,
                  count: int) -> list[list[str]]:
    """Each entity's tags, once each, in the order of its ranked chunks' tag lists."""
    import pyarrow as pa
    import pyarrow.compute as pc

    lists = column.combine_chunks()
    sizes = pc.list_value_length(lists).fill_null(0).to_numpy()
    starts, lengths = (np.cumsum(sizes) - sizes)[ranked], sizes[ranked]
    encoded = pc.dictionary_encode(pc.list_flatten(lists))
    codes = encoded.indices.to_numpy()[_runs(starts, lengths)]
    owners = np.repeat(owners, lengths)
    # The first place of each (entity, tag): sort (pair, place) packed in one integer,
    # where it fits in 63 bits (else sorted as a pair of keys, slower).
    span = max(len(codes), 1)
    pairs = owners * len(encoded.dictionary) + codes
    if count * max(len(encoded.dictionary), 1) * span < _PACKED_LIMIT:
        pair, place = np.divmod(np.sort(pairs * span + np.arange(len(codes))), span)
    else:
        place = np.lexsort((np.arange(len(codes)), pairs))
        pair = pairs[place]
    first = place[_run_starts(pair)]
    first.sort()
    return _split(encoded.dictionary.take(from_numpy(codes[first], pa.int64())).to_pylist(),
                  np.bincount(owners[first], minlength=count))


def _quoted(chunks, ranked: np.ndarray, owners: np.ndarray, count: int):
    """The text (chunk id, context, content) of each entity's first KEYWORD_CHUNKS ranked
    rows, first MAX_CONTEXTS with a context and first MAX_EXCERPTS with content, those
    rows, and the (entity, row) pairs whose text the entity's profile depends on. Text
    is read for a prefix of each entity's ranked rows, made longer while it holds too
    few contexts or contents and there are more rows."""
    per_entity = np.bincount(owners, minlength=count)
    place = np.arange(len(ranked)) - np.repeat(np.cumsum(per_entity) - per_entity, per_entity)
    reach = np.full(count, KEYWORD_CHUNKS)
    text: dict[int, tuple[str, str, str]] = {}
    while True:
        within = np.flatnonzero(place < reach[owners])
        new = [row for row in _distinct(ranked[within]).tolist() if row not in text]
        text.update(zip(new, _texts(chunks, new), strict=True))
        has = np.array([(bool(text[row][1]), bool(text[row][2]))
                        for row in ranked[within].tolist()], bool).reshape(-1, 2)
        contexts, contents = (np.bincount(owners[within[has[:, part]]], minlength=count)
                              for part in (0, 1))
        short = ((contexts < MAX_CONTEXTS) | (contents < MAX_EXCERPTS)) & (reach < per_entity)
        if not short.any():
            break
        reach[short] *= 4

    def leading(at: np.ndarray, limit: int) -> list[list[int]]:
        """The first `limit` rows of each entity among ranked positions `at` (ascending)."""
        firsts = np.searchsorted(owners[at], np.arange(count))
        at = at[np.arange(len(at)) - firsts[owners[at]] < limit]
        return _split(ranked[at].tolist(), np.bincount(owners[at], minlength=count))

    return (text, leading(within[has[:, 0]], MAX_CONTEXTS),
            leading(within[has[:, 1]], MAX_EXCERPTS), leading(within, KEYWORD_CHUNKS),
            (owners[within], ranked[within]))


def _texts(chunks, rows: list[int]) -> list[tuple[str, str, str]]:
    """The chunk id, context and content of rows (ascending) of chunks.parquet, reading
    only the row groups that hold them."""
    import pyarrow as pa

    if not rows:
        return []
    sizes = np.array([chunks.metadata.row_group(group).num_rows
                      for group in range(chunks.metadata.num_row_groups)])
    starts = np.cumsum(sizes) - sizes
    # The group holding each row (an empty group starts where the next does: never this).
    groups = np.searchsorted(starts, rows, "right") - 1
    read = _distinct(groups)
    table = chunks.read_row_groups(read.tolist(), columns=list(TEXT_COLUMNS))
    # A row's place in what was read: where its group starts there, plus its own place.
    read_starts = np.cumsum(sizes[read]) - sizes[read]
    local = read_starts[np.searchsorted(read, groups)] + rows - starts[groups]
    local = from_numpy(local, pa.int64())
    return list(zip(*(column.take(local).to_pylist() for column in table.columns), strict=True))


_SEEN_LIMIT = 1 << 24  # (owner, other) flags held in one array up to this many


def _co_mentioned(rows: np.ndarray, ents: np.ndarray, count: int,
                  chosen: np.ndarray | None = None) -> list[list[int]]:
    """For each entity (of `chosen`, ascending; None: all), the other entities named by
    a chunk that mentions it (sorted); [] for the others."""
    # Pairs are sorted by row: pair each of the owners' with every pair of its row's run.
    run_starts = np.flatnonzero(_run_starts(rows))
    run_sizes = np.diff(run_starts, append=len(rows))
    starts, sizes = np.repeat(run_starts, run_sizes), np.repeat(run_sizes, run_sizes)
    owned = ents
    if chosen is not None:
        mine = np.isin(ents, chosen)
        starts, sizes, owned = starts[mine], sizes[mine], ents[mine]
    owners, others = np.repeat(owned, sizes), ents[_runs(starts, sizes)]
    width = max(count, 1)
    members = np.arange(count) if chosen is None else chosen
    if len(members) * width <= _SEEN_LIMIT:  # (flags, not a sort)
        seen = np.zeros(len(members) * width, bool)
        seen[np.searchsorted(members, owners) * width + others] = True
        owner, other = np.divmod(np.flatnonzero(seen), width)
        owner = members[owner]
    else:
        owner, other = np.divmod(_distinct(owners * width + others), width)
    apart = owner != other
    return _split(other[apart].tolist(), np.bincount(owner[apart], minlength=count))


def _distinct(values: np.ndarray) -> np.ndarray:
    """The distinct values, sorted (np.unique hashes them first, many times slower)."""
    values = np.sort(values)
    return values[_run_starts(values)]


def _run_starts(values: np.ndarray) -> np.ndarray:
    """Where each run of equal values begins (a mask)."""
    starts = np.ones(len(values), bool)
    starts[1:] = values[1:] != values[:-1]
    return starts


def _in_order(rows: np.ndarray, ents: np.ndarray, order: np.ndarray, place: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray]:
    """The rows of (row, entity) pairs grouped by entity, each group's in `order` (all the
    rows, permuted; `place`, each row's place in it), and their entities; one packed
    integer sorts several times faster than np.lexsort."""
    total = max(len(order), 1)
    key = np.sort(ents * total + place[rows])
    return order[key % total], key // total


def _runs(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The indices start, start + 1, ..., start + length - 1 of each run, concatenated."""
    ends = np.cumsum(lengths)
    return np.arange(ends[-1] if len(ends) else 0) + np.repeat(starts - ends + lengths, lengths)


def _inverse(permutation: np.ndarray) -> np.ndarray:
    """Each item's place in the order a permutation lists items in."""
    places = np.empty(len(permutation), np.int64)
    places[permutation] = np.arange(len(permutation))
    return places


def _split(values: list, counts: np.ndarray) -> list[list]:
    """values cut into consecutive lists of the given lengths."""
    ends = np.cumsum(counts).tolist()
    return [values[start:end] for start, end in itertools.pairwise([0, *ends])]


def representation(profile: dict[str, Any]) -> str:
    lines = [f"name: {profile['name']}", f"type: {profile['type']}"]
    if profile["aliases"]:
        lines.append("aliases " + " ".join(profile["aliases"]))
    if profile["tags"]:
        lines.append("tags " + " ".join(profile["tags"]))
    lines += ["context " + context for context in profile["contexts"]]
    lines += ["content " + excerpt for excerpt in profile["content_excerpts"]]
    if profile["related_entities"]:
        lines.append("related " + " ".join(profile["related_entities"]))
    return "\n".join(lines)


def profiles_document(profiles: list[dict[str, Any]], dangling: list[str]) -> dict[str, Any]:
    return {
        "meta": {"schema_version": PROFILES_SCHEMA_VERSION, "input": "chunks.json",
                 "source_type": "ctxfst-export", "profile_type": "entity-profiles",
                 "entity_count": len(profiles), "max_contexts": MAX_CONTEXTS,
                 "top_keywords": TOP_KEYWORDS, "dangling_chunk_entity_refs": dangling},
        "entities": profiles,
    }


DANGLING_KEY = "ctxfst.dangling_chunk_entity_refs"  # entities.parquet's metadata: a JSON list


def entities_table(profiles: list[dict[str, Any]], dangling: list[str] | None = None):
    """entities.parquet's table: the profiles' fields as columns, and in its metadata the
    entity ids chunks name but no document declares (entity-profiles.json's
    meta.dangling_chunk_entity_refs), so that it stands without the JSON export."""

    import pyarrow as pa

    strings = pa.list_(pa.string())

    def column(name: str, kind=None, default=None):
        return pa.array([p.get(name, default) for p in profiles], kind)

    table = pa.table({
        "entity_id": column("id", pa.string()),
        "name": column("name", pa.string()),
        "type": column("type", pa.string()),
        "aliases": column("aliases", strings, []),
        "mentioned_chunks": column("mentioned_chunks", strings, []),
        "mention_count": column("mention_count", pa.int32()),
        "tags": column("tags", strings, []),
        "contexts": column("contexts", strings, []),
        "content_excerpts": column("content_excerpts", strings, []),
        "related_entities": column("related_entities", strings, []),
        "keywords": column("keywords", strings, []),
        "preconditions": column("preconditions", strings, []),
        "postconditions": column("postconditions", strings, []),
        "related_skills": column("related_skills", strings, []),
        "representation": column("representation", pa.string()),
    })
    return table.replace_schema_metadata({
        "ctxfst.artifact": "entities", "ctxfst.schema_version": PROFILES_SCHEMA_VERSION,
        DANGLING_KEY: dangling_json(dangling or [])})


def dangling_json(dangling: list[str]) -> str:
    """entities.parquet's metadata value of the dangling entity references."""
    return json.dumps(sorted(dangling), ensure_ascii=False)


def profiles_from_table(table) -> list[dict[str, Any]]:
    """The profiles of an entities table (entities_table's inverse): as build_profiles
    makes them, for entity-profiles.json."""
    profiles = []
    for row in table.to_pylist():
        profile = {"id": row["entity_id"], **{key: row[key] for key in (
            "name", "type", "aliases", "mentioned_chunks", "mention_count", "tags",
            "contexts", "content_excerpts", "related_entities", "keywords")}}
        for key in ("preconditions", "postconditions", "related_skills"):
            if row[key]:
                profile[key] = row[key]
        profile["representation"] = row["representation"]
        profiles.append(profile)
    return profiles


GRAPH_FIELDS = ("name", "type", "aliases", "mention_count", "mentioned_chunks",
                "preconditions", "postconditions", "related_skills")


def read_entities(path, fields: tuple[str, ...] = GRAPH_FIELDS
                  ) -> tuple[list[dict[str, Any]], list[str]]:
    """The profiles in an entities.parquet (`id` and these fields, named as in
    entity-profiles.json) and its dangling entity references; ValueError when it is
    not such a file."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    columns = ["entity_id", *fields]
    try:
        with pq.ParquetFile(path) as file:  # (read_table goes through pyarrow.dataset)
            table = file.read(columns=columns, use_threads=False)
        missing = set(columns) - {*table.column_names}  # (read() leaves them out)
        if missing:
            raise ValueError(f"no column {', '.join(sorted(missing))}")
        dangling = json.loads((table.schema.metadata or {}).get(DANGLING_KEY.encode(), b"[]"))
    except (OSError, KeyError, pa.ArrowException, ValueError) as error:
        raise ValueError(f"{path}: not an entities table ({error})") from None
    if not (isinstance(dangling, list) and all(isinstance(item, str) for item in dangling)):
        raise ValueError(f"{path}: its dangling entity references are not a list of ids")
    profiles = table.select(columns).rename_columns(["id", *fields]).to_pylist()
    return profiles, dangling
