"""Retrieval over the build artifacts: vector, lexical (BM25), graph, and hybrid (RRF).

Graph mode: seed entities from the query (entity-profile vectors, and names or aliases
that occur in the query text, in any language), spread activation along entity-graph
edges with relation weights and a per-hop decay, then score chunks by query similarity
plus the activation of the entities they mention, with MMR diversity.

A query the build's model cannot read (all-MiniLM maps most Chinese characters to
[UNK]) embeds as noise. For such a query graph mode also seeds from a multilingual
model's view of the entity profiles (the bridge), weighted by how clearly that view
singles out some entities.
"""

from __future__ import annotations

import bisect
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..document.mentions import NameFinder
from ..document.text import is_cjk_token, normalize, tokens
from . import MODES
from .lexical import BM25, lexical_text, top_positive_rows, top_rows

# What a hit shows of its chunk (read from the chunk's row group when it is shown).
HIT_COLUMNS = ["chunk_id", "source", "context", "content", "document_title", "line_start",
               "line_end"]
RELATION_WEIGHT = {"SIMILAR": 1.0, "REQUIRES": 0.8, "LEADS_TO": 0.8, "IMPLIES": 0.8,
                   "EVIDENCE": 0.6, "COMPLETED": 0.5, "BLOCKED_BY": 0.3}
HOP_DECAY = 0.6
SEED_TOP = 8
SEED_MIN = 0.2
RRF_K = 60
SIM_WEIGHT = 0.5       # weight of the chunk's own (min-max scaled) similarity
SECOND_ENTITY_WEIGHT = 0.5  # weight of a chunk's second most activated entity
DIVERSITY = 0.8        # MMR balance; 1.0 turns diversity off
FEEDBACK_CHUNKS = 3   # pseudo-relevance feedback: entities of the best-matching chunks seed too
FEEDBACK_WEIGHT = 0.8
SEED_TEMPERATURE = 0.05  # seed weight exp((s - s_best) / T): relative, so any model's scale works
BRIDGE_MODEL = "use-multilingual"
READABLE_MIN = 0.5     # below this share of known tokens the build's model cannot read a query
LEXICAL_WEIGHT = 1.0   # weight of a chunk's BM25 score (over the best one) in graph mode
# Lexical evidence counts by the share of the query's tokens the KB's text holds: none up
# to the first share (Chinese questions over English notes: BM25 there is noise), fully
# from the second (docs/retrieval.md).
LEXICAL_COVERAGE = (0.3, 0.6)
LEXICAL_LEAD_WEIGHT = 2.0  # graph mode: BM25's best chunk's extra vote, times its lead


class RetrievalError(Exception):
    pass


@dataclass
class Hit:
    chunk_id: str
    score: float
    source: str
    context: str
    via: list[str] = field(default_factory=list)
    # what a RAG caller puts in its prompt and cites, without a second lookup
    title: str = ""
    content: str = ""
    line_start: int = 0
    line_end: int = 0

    def as_json(self) -> dict[str, Any]:
        return {"chunk_id": self.chunk_id, "score": round(self.score, 6), "title": self.title,
                "source": self.source, "line_start": self.line_start,
                "line_end": self.line_end, "context": self.context, "content": self.content,
                "via": self.via}


@dataclass
class Bridge:
    """A multilingual view of a query that the build's model could not read."""

    model_id: str
    readable: float                 # share of the query the build's model could read
    query_vector: np.ndarray
    entity_matrix: np.ndarray       # entity profiles in the bridge model's space


@dataclass
class Result:
    query: str
    mode: str
    hits: list[Hit]
    seeds: list[dict[str, Any]] = field(default_factory=list)
    expanded: list[dict[str, Any]] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {"query": self.query, "mode": self.mode,
                "results": [hit.as_json() for hit in self.hits],
                "seeds": self.seeds, "expanded": self.expanded}


class Index:
    """Everything a query needs, loaded once from build/ (each artifact checked against
    the build's manifest, then its columns and types)."""

    ARTIFACTS = ["chunks.parquet", "chunk_vectors.parquet", "entity_vectors.parquet",
                 "entities.parquet", "entity-graph.json"]

    def __init__(self, build_dir: Path, expected_model: str | None = None,
                 cache_dir: Path | None = None) -> None:
        from ..artifacts.reader import ArtifactError, BuildArtifacts

        self.build_dir, self.cache_dir = build_dir, cache_dir
        try:
            self.artifacts = BuildArtifacts(build_dir, self.ARTIFACTS, cache_dir)
            self._load(expected_model)
        except ArtifactError as error:
            raise RetrievalError(str(error)) from None

    def _load(self, expected_model: str | None) -> None:
        from ..artifacts.reader import (
            CHUNK_NULLABLE,
            REBUILD,
            ArtifactError,
            chunk_columns,
            entity_columns,
        )

        build, build_dir = self.artifacts, self.build_dir
        # Only ids and entity links are read up front; a hit's text is read from its row
        # group when it is shown, and the whole table only by modes that scan every chunk.
        self._chunk_file = build.parquet_file("chunks.parquet", chunk_columns(), CHUNK_NULLABLE)
        linked = self._chunk_file.read(["chunk_id", "entities"])
        chunk_ids = linked.column("chunk_id").to_pylist()
        self.chunk_ids, self.chunk_matrix, self.model_id = build.vectors(
            "chunk_vectors.parquet")
        if self.chunk_ids != chunk_ids:
            raise RetrievalError(f"{build_dir}: chunk vectors do not match the chunks (a stale "
                                 "or partial build): run `doit`")
        self.entity_ids, self.entity_matrix, entity_model = build.vectors(
            "entity_vectors.parquet")
        if entity_model != self.model_id:
            raise RetrievalError(f"{build_dir}: chunk vectors are from {self.model_id} but "
                                 f"entity vectors from {entity_model}: run `doit`")
        dims = {m.shape[1] for m in (self.chunk_matrix, self.entity_matrix) if len(m)}
        if len(dims) > 1:
            raise RetrievalError(f"{build_dir}: chunk_vectors.parquet and "
                                 "entity_vectors.parquet have vectors of different "
                                 f"dimensions {sorted(dims)}: {REBUILD}")
        if not len(self.entity_matrix):  # no entities: still one column per dimension
            self.entity_matrix = self.entity_matrix.reshape(0, self.chunk_matrix.shape[1])
        if expected_model is not None and expected_model != self.model_id:
            raise RetrievalError(f"the vectors in {build_dir} were made by {self.model_id}, but "
                                 f"the configured model is {expected_model}: run `doit` to "
                                 "re-embed, or query with the model they were made with")
        entities = build.parquet("entities.parquet", entity_columns()).to_pylist()
        self.entities = {e["entity_id"]: e for e in entities}
        if self.entity_ids != [e["entity_id"] for e in entities]:
            raise RetrievalError(f"{build_dir}: entity vectors do not match the entities (a "
                                 "stale or partial build): run `doit`")
        graph = build.json("entity-graph.json")
        problem = graph_problem(graph)
        if problem:
            raise ArtifactError(f"{build.path('entity-graph.json')}: not an entity graph "
                                f"({problem}): {REBUILD}")
        self.names = {node["id"]: node.get("name", node["id"]) for node in graph["nodes"]}
        self.adjacency: dict[str, list[tuple[str, str, float]]] = {}
        for edge in graph["edges"]:
            weight = RELATION_WEIGHT.get(edge["relation"], 0.3)
            if edge["relation"] == "SIMILAR":
                weight *= float(edge.get("score", 0.5))
            for a, b in ((edge["source"], edge["target"]), (edge["target"], edge["source"])):
                self.adjacency.setdefault(a, []).append((b, edge["relation"], weight))
        self._link_entities(linked.column("entities"))
        self._lexicon = self._build_lexicon()
        self._finder = NameFinder(needle for needle, _ in self._lexicon)
        self._lexical: BM25 | None = None
        self._bridge_matrices: dict[str, np.ndarray] = {}
        self._chunks: list[dict[str, Any]] | None = None
        self._groups: dict[int, Any] = {}

    def _link_entities(self, column) -> None:
        """Each chunk's entities as codes into one name list (offsets per row), and each
        entity's rows (`mentions`), in row order, from Arrow's buffers, not a list a row."""
        import pyarrow.compute as pc

        lists = column.combine_chunks()
        encoded = lists.flatten().dictionary_encode()
        self._entity_names: list[str] = encoded.dictionary.to_pylist()
        self._entity_codes = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        rows = pc.list_parent_indices(lists).to_numpy(zero_copy_only=False).astype(np.int64)
        self._entity_offsets = np.searchsorted(rows, np.arange(len(lists) + 1))
        order = np.argsort(self._entity_codes, kind="stable")
        bounds = np.searchsorted(self._entity_codes[order], np.arange(len(self._entity_names)
                                                                       + 1))
        self.mentions = {name: rows[order[bounds[code]:bounds[code + 1]]]
                         for code, name in enumerate(self._entity_names)}

    def chunk_entities(self, row: int) -> list[str]:
        names, codes = self._entity_names, self._entity_codes
        return [names[code] for code in
                codes[self._entity_offsets[row]:self._entity_offsets[row + 1]].tolist()]

    @property
    def chunks(self) -> list[dict[str, Any]]:
        """Every chunk as a dict (lexical indexing, keyword-graph mode, evaluation)."""
        if self._chunks is None:
            from ..artifacts.reader import chunk_columns

            self._chunks = self._chunk_file.read(list(chunk_columns())).to_pylist()
        return self._chunks

    def preload_hits(self) -> None:
        """Read what hits show of every chunk now (a server does, once, so that no request
        waits on Parquet; a one-shot query reads only its hits' row groups)."""
        starts = self._chunk_file.group_starts
        table = self._chunk_file.read(HIT_COLUMNS)
        self._groups = {group: table.slice(starts[group], starts[group + 1] - starts[group])
                        for group in range(len(starts) - 1)}

    def _chunk_row(self, row: int) -> dict[str, Any]:
        if self._chunks is not None:
            return self._chunks[row]
        starts = self._chunk_file.group_starts
        group = bisect.bisect_right(starts, row) - 1
        if group not in self._groups:
            self._groups[group] = self._chunk_file.read_row_group(group, HIT_COLUMNS)
        table = self._groups[group]
        return {name: table.column(name)[row - starts[group]].as_py() for name in HIT_COLUMNS}

    @property
    def bm25(self) -> BM25:
        """Built on first use (vector and graph queries never pay for it) and, with a
        cache folder, kept there keyed by the chunks artifact's hash for later processes."""
        if self._lexical is None:
            cached = self._lexical_cache_path()
            if cached is not None and cached.is_file():
                try:
                    self._lexical = BM25.load(cached, len(self.chunk_ids))
                except ValueError:
                    cached.unlink(missing_ok=True)  # damaged or foreign: rebuilt below
            if self._lexical is None:
                self._lexical = BM25.build([tokens(lexical_text(c)) for c in self.chunks])
                if cached is not None:
                    try:  # a cache is a convenience: a read-only folder must not fail queries
                        for stale in cached.parent.glob("lexical-*.npz"):
                            stale.unlink(missing_ok=True)
                        self._lexical.save(cached)
                    except OSError:
                        pass
        return self._lexical

    def _lexical_cache_path(self) -> Path | None:
        from ..artifacts.cache import caches_disabled

        if self.cache_dir is None or caches_disabled():  # (CTXFST_NO_CACHE: keep none)
            return None
        from ..version import __version__  # the tokenizer and layout may change between versions

        digest = self.artifacts.digest("chunks.parquet")  # checked when the chunks were read
        return self.cache_dir / f"lexical-{__version__}-{digest[:24]}.npz"

    def bridge(self, query: str, readable: float, spec: str = BRIDGE_MODEL,
               cache_dir: Path | None = None) -> Bridge | None:
        """The multilingual view of a query the build's model reads less than half of.

        Entity profiles are embedded by the bridge model on first need (cached by text
        in `cache_dir`, the build's embedding cache), never for readable queries.
        """
        if readable >= READABLE_MIN or not self.entity_ids:
            return None
        from ..compile.embed import EmbeddingCache, embed_texts, get_embedder

        try:  # (a name that is not a model, too, is an error of the bridge)
            embedder = get_embedder(spec)
            if embedder.model_id == self.model_id:
                return None
            if spec not in self._bridge_matrices:
                texts = [self.entities[e]["representation"] for e in self.entity_ids]
                if cache_dir is None:
                    matrix = embedder.encode(texts, 32, False)
                else:
                    cache = EmbeddingCache(cache_dir / "embeddings.sqlite")
                    try:
                        matrix, _ = embed_texts(texts, spec, cache)
                    finally:
                        cache.close()
                self._bridge_matrices[spec] = matrix
            query_vector = embedder.encode_queries([query])[0]
        except Exception as error:  # a model that cannot load (a typo, no network)
            raise RetrievalError(f"the bridge model {spec!r} could not be used ({error}); "
                                 "pass --bridge-model none to query without it") from None
        return Bridge(embedder.model_id, readable, query_vector, self._bridge_matrices[spec])

    def _build_lexicon(self) -> list[tuple[str, str]]:
        """Entity names and aliases to find in query text: (name normalised, entity id)."""
        lexicon = []
        for entity_id, entity in self.entities.items():
            for label in dict.fromkeys([entity["name"], *entity["aliases"]]):
                lexicon.append((normalize(label), entity_id))
        return lexicon

    def name_matches(self, query: str) -> list[str]:
        """The entities a name or alias of which occurs in the query, in index order."""
        present = {name for _, _, name in self._finder.find(query)}
        found = []
        for needle, entity_id in self._lexicon:
            if needle in present and entity_id not in found:
                found.append(entity_id)
        return found

    def hit(self, row: int, score: float, via: list[str] | None = None) -> Hit:
        chunk = self._chunk_row(row)
        return Hit(chunk["chunk_id"], score, chunk["source"], chunk["context"] or "",
                   via or [], chunk["document_title"] or "", chunk["content"] or "",
                   chunk["line_start"], chunk["line_end"])


def graph_problem(graph: Any) -> str | None:
    """What keeps entity-graph.json data from being the graph a query walks, or None."""
    if not (isinstance(graph, dict) and isinstance(graph.get("nodes"), list)
            and isinstance(graph.get("edges"), list)):
        return "`nodes` and `edges` must be lists"
    for number, node in enumerate(graph["nodes"], 1):
        if not (isinstance(node, dict) and isinstance(node.get("id"), str)
                and isinstance(node.get("name", ""), str)):
            return f"node #{number} needs a text `id` (and `name`)"
    for number, edge in enumerate(graph["edges"], 1):
        if not (isinstance(edge, dict) and all(isinstance(edge.get(key), str) for key in
                                               ("source", "target", "relation"))):
            return f"edge #{number} needs a text `source`, `target` and `relation`"
        score = edge.get("score", 0.5)  # weighs SIMILAR edges only
        if edge["relation"] == "SIMILAR" and (type(score) not in (int, float)
                                              or not math.isfinite(score)):
            return f"edge #{number} has a `score` that is not a finite number"
    return None


def _ranked(scores: dict[int, float], index: Index, k: int) -> list[int]:
    return sorted(scores, key=lambda row: (-scores[row], index.chunk_ids[row]))[:k]


def vector_search(index: Index, query_vector: np.ndarray, k: int) -> list[Hit]:
    """The k chunks most similar to the query."""
    sims = index.chunk_matrix @ query_vector
    return [index.hit(row, float(sims[row])) for row in top_rows(sims, k)]


def lexical_search(index: Index, query: str, k: int) -> list[Hit]:
    scores = index.bm25.scores(tokens(query))
    return [index.hit(row, float(scores[row])) for row in top_positive_rows(scores, k)]


def graph_search(index: Index, query: str, query_vector: np.ndarray, k: int, hops: int,
                 bridge: Bridge | None = None) -> tuple[list[Hit], list[dict], list[dict]]:
    """The graph's ranking alone (graph mode fuses it with the other views): k chunks,
    the seeds and the entities reached."""
    ranking = graph_ranking(index, query, query_vector, k, hops, bridge)
    return ([index.hit(row, ranking.scores[row], ranking.via(row)) for row in ranking.rows],
            ranking.seeds, ranking.expanded)


@dataclass
class GraphRanking:
    rows: list[int]                  # best first
    scores: dict[int, float]         # of those rows (and the rest of the pool)
    activation: dict[str, float]     # entity -> its activation
    paths: dict[str, list[str]]      # entity -> the names and relations that reached it
    seeds: list[dict]
    expanded: list[dict]
    index: Index

    def via(self, row: int) -> list[str]:
        """The path to the entity a chunk's activation came from ([]: none)."""
        return _via(self.paths.get(_best_entity(self.index, row, self.activation) or "", []))


def graph_ranking(index: Index, query: str, query_vector: np.ndarray, k: int, hops: int,
                  bridge: Bridge | None = None, chunk_sims: np.ndarray | None = None,
                  depth: int = 0, sim_order: list[int] | None = None) -> GraphRanking:
    """The graph's ranking: k chunks picked for relevance and variety (MMR), then the
    next best by score down to `depth` rows. chunk_sims: the chunks' similarities to
    the query, when taken (they are overwritten); sim_order: their best rows, first
    FEEDBACK_CHUNKS at least, when taken too."""
    # Seeds: names in the query (full weight), then the most similar entity profiles.
    seeds: dict[str, tuple[float, str]] = {}
    for entity_id in index.name_matches(query):
        seeds[entity_id] = (1.0, "name")
    views = [(index.entity_matrix @ query_vector, 1.0, "vector")]
    if bridge is not None:
        bridge_sims = bridge.entity_matrix @ bridge.query_vector
        views.append((bridge_sims, _peak_confidence(bridge_sims), "multilingual"))
    for sims, scale, by in views:
        order = top_rows(sims, SEED_TOP)
        best = float(sims[order[0]]) if order else 0.0
        for i in order:
            weight = scale * math.exp((float(sims[i]) - best) / SEED_TEMPERATURE)
            if weight >= SEED_MIN and weight > seeds.get(index.entity_ids[i], (0.0, ""))[0]:
                seeds[index.entity_ids[i]] = (weight, by)
    if chunk_sims is None:
        chunk_sims = index.chunk_matrix @ query_vector
    if sim_order is None:
        sim_order = top_rows(chunk_sims, FEEDBACK_CHUNKS)
    top_chunks = sim_order[:FEEDBACK_CHUNKS]
    if top_chunks:
        best_chunk = float(chunk_sims[top_chunks[0]])
        for row in top_chunks:
            weight = FEEDBACK_WEIGHT * math.exp((float(chunk_sims[row]) - best_chunk)
                                                / SEED_TEMPERATURE)
            for entity in index.chunk_entities(row):
                if weight > seeds.get(entity, (0.0, ""))[0] and weight >= SEED_MIN:
                    seeds[entity] = (weight, f"chunk {index.chunk_ids[row]}")
    # Spread activation: best path product of edge weights, decayed per hop.
    activation: dict[str, float] = {e: s for e, (s, _) in seeds.items()}
    path: dict[str, list[str]] = {e: [index.names.get(e, e)] for e in seeds}
    frontier = dict(activation)
    for _hop in range(hops):
        nxt: dict[str, float] = {}
        for node, value in frontier.items():
            for other, relation, weight in index.adjacency.get(node, ()):
                score = value * weight * HOP_DECAY
                if score > activation.get(other, 0.0) + 1e-12:
                    activation[other] = score
                    nxt[other] = score
                    label = f"-{relation}{f' {weight:.2f}' if relation == 'SIMILAR' else ''}->"
                    path[other] = path[node] + [label, index.names.get(other, other)]
        frontier = nxt
    # Chunks: similarity to the query plus the activation of what they mention: the best
    # activation among a chunk's entities plus a share of the second best, so a chunk tied
    # to two activated entities outranks one that repeats a single seed (vectorised: big
    # builds, in float32: the arrays are a chunk's worth each, and memory-bound). Entities
    # come in ascending order, so a new best demotes the old one.
    entity_score = np.zeros(len(index.chunk_ids), np.float32)
    second_score = np.zeros(len(index.chunk_ids), np.float32)
    ascending = sorted(activation.items(), key=lambda kv: (kv[1], kv[0]))
    for entity, value in ascending:
        rows = index.mentions.get(entity)
        if rows is None:
            continue
        held = entity_score[rows]
        lower = held < value
        better = rows[lower]
        second_score[better] = held[lower]
        entity_score[better] = value
    low, high = float(chunk_sims.min()), float(chunk_sims.max())
    spread = (high - low) or 1.0
    # The chunk's own similarity counts less when the model could not read the query.
    sim_weight = SIM_WEIGHT * (min(1.0, bridge.readable / READABLE_MIN) if bridge else 1.0)
    combined_array = chunk_sims.astype(np.float32, copy=False)  # (the sims are not used again)
    combined_array -= np.float32(low)
    combined_array *= np.float32(sim_weight / spread)
    combined_array += entity_score
    second_score *= np.float32(SECOND_ENTITY_WEIGHT)
    combined_array += second_score
    lexical = _lexical_evidence(index, query)
    if lexical is not None:
        combined_array += lexical
    pool = top_rows(combined_array, max(k * 5, depth, 20))
    combined = {row: float(combined_array[row]) for row in pool}
    picked = _mmr(index, combined, k, DIVERSITY)
    if depth > k:
        chosen = set(picked)
        picked += [row for row in pool if row not in chosen][:depth - len(picked)]
    seed_list = [{"entity": e, "name": index.names.get(e, e), "score": round(s, 4), "by": by}
                 for e, (s, by) in sorted(seeds.items(), key=lambda kv: -kv[1][0])]
    expanded = [{"entity": e, "name": index.names.get(e, e), "activation": round(v, 4)}
                for e, v in sorted(activation.items(), key=lambda kv: (-kv[1], kv[0]))
                if e not in seeds][:50]
    return GraphRanking(picked, combined, activation, path, seed_list, expanded, index)


def _lexical_evidence(index: Index, query: str) -> np.ndarray | None:
    """Each chunk's BM25 score for the query's CJK bigrams over the best one, weighed by
    how many of them the KB's text holds (LEXICAL_COVERAGE); None when they count for
    nothing. Only CJK: an embedding model that reads Latin words already matches them
    (and literal matches would crowd out the chunks the graph finds), while bigrams are
    what MiniLM cannot read and what pins a Chinese question to its passage."""
    query_tokens = {token for token in tokens(query) if is_cjk_token(token)}
    weight = LEXICAL_WEIGHT * _coverage_weight(index, query_tokens)
    if weight <= 0.0:
        return None
    scores = index.bm25.scores(sorted(query_tokens)).astype(np.float32)
    best = float(scores.max())
    if best <= 0.0:
        return None
    scores *= np.float32(weight / best)
    return scores


def _best_entity(index: Index, row: int, activation: dict[str, float]) -> str | None:
    """The entity a chunk's activation came from, as the ascending pass above decides:
    the highest activation (compared in float32), the first in (activation, id) order
    among equals."""
    held = [(np.float32(activation[e]), activation[e], e) for e in index.chunk_entities(row)
            if e in activation]
    if not held:
        return None
    top = max(value32 for value32, _, _ in held)
    return min((value, entity) for value32, value, entity in held if value32 == top)[1]


def _peak_confidence(sims: np.ndarray) -> float:
    """How clearly a similarity profile singles out its best entity, 0..1: the best
    score's distance above the mean in standard deviations, less one. A flat profile
    (the model has no opinion about this query) gives 0."""
    spread = float(sims.std()) if len(sims) > 1 else 0.0
    if spread == 0.0:
        return 0.0
    return min(1.0, max(0.0, (float(sims.max()) - float(sims.mean())) / spread - 1.0))


def _via(parts: list[str]) -> list[str]:
    return [" ".join(parts)] if parts else []


def _mmr(index: Index, scores: dict[int, float], k: int, balance: float = 0.8) -> list[int]:
    """Maximal marginal relevance: a candidate loses by how much it repeats what is
    already picked, as text (vector overlap) or as knowledge (share of its entities that
    picked chunks already cover), so chunks that bring new entities get their turn.
    Overlaps and coverage are kept per candidate and updated once per pick."""
    pool = _ranked(scores, index, max(k * 5, 20))
    if not pool:
        return []
    relevance = np.array([scores[row] for row in pool], np.float64)
    vectors = index.chunk_matrix[pool]
    entities = [index.chunk_entities(row) for row in pool]
    holders: dict[str, list[int]] = {}
    for slot, names in enumerate(entities):
        for name in set(names):
            holders.setdefault(name, []).append(slot)
    sizes = np.array([len(names) for names in entities], np.float64)
    covered_count = np.zeros(len(pool), np.float64)
    overlap = np.full(len(pool), -np.inf)
    taken = np.zeros(len(pool), bool)
    covered: set[str] = set()
    picked: list[int] = []
    while len(picked) < min(k, len(pool)):
        if picked:
            repeated = np.where(sizes > 0, covered_count / np.maximum(sizes, 1), 1.0)
            value = balance * relevance - (1 - balance) * np.maximum(overlap, repeated)
        else:
            value = relevance.copy()
        value[taken] = -np.inf
        slot = int(np.argmax(value))  # ties: the earlier candidate in the ranked pool
        taken[slot] = True
        picked.append(pool[slot])
        overlap = np.maximum(overlap, vectors @ vectors[slot])
        for name in set(entities[slot]) - covered:
            covered.add(name)
            for holder in holders[name]:
                covered_count[holder] += entities[holder].count(name)
    return picked


def load_skill_graph(path: Path) -> dict[str, Any]:
    """A hand-made skill graph: {"nodes": [names], "edges": [{from, to, type}]}."""
    from ..artifacts.reader import parse_json, read_plain_file

    try:
        data = parse_json(read_plain_file(path)[0])  # a KB's file: no FIFO, no link out
        nodes = [str(n) for n in data["nodes"]]
        edges = [(str(e["from"]), str(e["to"]), str(e.get("type", "relatedTo")))
                 for e in data.get("edges", [])]
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise RetrievalError(f"{path}: not a skill graph {{nodes, edges: [{{from, to, type}}]}}"
                             f" ({error})") from None
    return {"nodes": nodes, "edges": edges}


def keyword_graph_search(index: Index, query: str, graph: dict[str, Any], k: int,
                         hops: int) -> tuple[list[Hit], list[dict], list[dict]]:
    """The course's method 2, as a baseline: skill names found in the query, expanded
    along the hand-made graph, then chunks that contain the names (string match)."""
    text = query.casefold()
    found = {name: [name] for name in graph["nodes"] if name.casefold() in text}
    neighbours: dict[str, list[tuple[str, str]]] = {}
    for source, target, kind in graph["edges"]:
        neighbours.setdefault(source, []).append((target, f"-{kind}->"))
        neighbours.setdefault(target, []).append((source, f"<-{kind}-"))
    paths = dict(found)
    frontier = list(found)
    for _hop in range(hops):
        nxt = []
        for name in frontier:
            for other, label in neighbours.get(name, ()):
                if other not in paths:
                    paths[other] = paths[name] + [label, other]
                    nxt.append(other)
        frontier = nxt
    scores: dict[int, float] = {}
    via: dict[int, list[str]] = {}
    for row, chunk in enumerate(index.chunks):
        haystack = " ".join([chunk["context"] or "", chunk["content"] or "",
                             " ".join(chunk["tags"])]).casefold()
        for name, path in paths.items():
            if name.casefold() in haystack:
                scores[row] = scores.get(row, 0.0) + (2.0 if name in found else 1.0)
                via.setdefault(row, []).append(" ".join(path))
    hits = [index.hit(row, scores[row], via[row][:3]) for row in _ranked(scores, index, k)]
    seeds = [{"entity": name, "name": name, "score": 1.0, "by": "keyword"} for name in found]
    expanded = [{"entity": name, "name": name, "activation": 1.0} for name in paths
                if name not in found]
    return hits, seeds, expanded


def fused_order(rankings: list[tuple[list, float]], k: int) -> list[tuple[Any, float]]:
    """The k best rows by weighted reciprocal rank fusion (the sum of weight / (60 +
    rank) over the rankings; ties by row, as the ids sort), with their scores."""
    scores: dict[Any, float] = {}
    for ranking, weight in rankings:
        for rank, key in enumerate(ranking, 1):
            scores[key] = scores.get(key, 0.0) + weight / (RRF_K + rank)
    order = sorted(scores, key=lambda key: (-scores[key], key))[:k]
    return [(key, scores[key]) for key in order]


def _coverage_weight(index: Index, query_tokens: set[str]) -> float:
    """How far BM25 can read a query: the share of its tokens the KB's text holds,
    mapped through LEXICAL_COVERAGE (nothing up to 30%, fully from 60%)."""
    if not query_tokens:
        return 0.0
    bm25 = index.bm25
    known = sum(1 for token in query_tokens if token in bm25.term_ids) / len(query_tokens)
    low, high = LEXICAL_COVERAGE
    return min(1.0, max(0.0, (known - low) / (high - low)))


def search(index: Index, query: str, query_vector: np.ndarray | None, mode: str, k: int = 5,
           hops: int = 2, skill_graph: dict[str, Any] | None = None,
           bridge: Bridge | None = None) -> Result:
    if not re.search(r"\w", query):
        raise RetrievalError("the query is empty or only punctuation")
    if mode not in MODES:
        raise RetrievalError(f"unknown mode {mode!r}; use one of {', '.join(MODES)}")
    if mode == "lexical":
        return Result(query, mode, lexical_search(index, query, k))
    if mode == "keyword-graph":
        if skill_graph is None:
            raise RetrievalError("keyword-graph mode needs a hand-made skill graph "
                                 "(--skill-graph PATH, or skill-graph.json in the project)")
        hits, seeds, expanded = keyword_graph_search(index, query, skill_graph, k, hops)
        return Result(query, mode, hits, seeds, expanded)
    assert query_vector is not None
    if not index.chunk_ids:
        return Result(query, mode, [])
    if np.shape(query_vector) != index.chunk_matrix.shape[1:]:
        from ..artifacts.reader import REBUILD

        raise RetrievalError(f"the vectors in {index.build_dir / 'chunk_vectors.parquet'} "
                             f"have {index.chunk_matrix.shape[1]} dimensions, the query's "
                             f"{np.shape(query_vector)[-1:]}: {REBUILD}")
    if mode == "vector":
        return Result(query, mode, vector_search(index, query_vector, k))
    # Graph and hybrid modes fuse rankings by rows; hits are made for the k kept. Hybrid:
    # the model's, BM25's and the graph's (4k picked by MMR), weighed alike. Graph mode:
    # the graph's ranking with those of the views that can read the query: the model's
    # (unless it needed the bridge) and BM25's (by how much of the query the KB's words
    # cover).
    sims = index.chunk_matrix @ query_vector
    depth = k * 4
    query_tokens = tokens(query)
    hybrid = mode == "hybrid"
    sim_order = top_rows(sims, max(depth, FEEDBACK_CHUNKS))
    vector_rows = sim_order[:depth] if hybrid or bridge is None else []
    graph = graph_ranking(index, query, query_vector, depth if hybrid else k, hops, bridge,
                          sims, depth, sim_order)
    lexical_weight = 1.0 if hybrid else _coverage_weight(index, set(query_tokens))
    lexical_rows = []
    if lexical_weight > 0.0:
        scores = index.bm25.scores(query_tokens)
        lexical_rows = top_positive_rows(scores, depth)
    if hybrid:
        fused = fused_order([(vector_rows, 1.0), (lexical_rows, 1.0), (graph.rows, 1.0)], k)
    else:
        rankings = [(graph.rows, 1.0), (vector_rows, 1.0), (lexical_rows, lexical_weight)]
        if lexical_rows:
            # A clear lexical winner gets a vote of its own, by how far its BM25 score
            # leads the next: literal words that neither the model nor the graph read.
            best = float(scores[lexical_rows[0]])
            runner_up = float(scores[lexical_rows[1]]) if len(lexical_rows) > 1 else 0.0
            lead = LEXICAL_LEAD_WEIGHT * lexical_weight * (best - runner_up) / best
            rankings.append((lexical_rows[:1], lead))
        fused = fused_order(rankings, k)
        # What graph mode is for: the graph's best chunk that vector search leaves out of
        # its top k keeps the last place (and its score), when agreement gave it none.
        vector_top = set(vector_rows[:k])
        found = next((row for row in graph.rows[:k] if row not in vector_top), None)
        if vector_rows and found is not None and all(row != found for row, _ in fused):
            fused = fused[:k - 1] + [(found, fused[-1][1])]
    in_graph = set(graph.rows)
    hits = [index.hit(row, score, graph.via(row) if row in in_graph else [])
            for row, score in fused]
    return Result(query, mode, hits, graph.seeds, graph.expanded)
