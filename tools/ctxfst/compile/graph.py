"""The entity graph: SIMILAR edges from embeddings, REQUIRES/LEADS_TO edges from
conditions, and extra edges; written in upstream's entity-graph.json shape."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import numpy as np

from ..document.model import strip_not

GRAPH_SCHEMA_VERSION = "1.0.0"
UNDIRECTED_RELATIONS = frozenset({"SIMILAR"})  # the rest are directed
BLOCK_ROWS = 1024
BLOCK_COLS = 8192


def _top_in_block(scores: np.ndarray, k: int) -> np.ndarray:
    """Column indexes of each row's k best scores; ties go to the lower column."""
    width = scores.shape[1]
    if width <= k:
        return np.broadcast_to(np.arange(width), scores.shape).copy()
    top = np.argpartition(-scores, k - 1, axis=1)[:, :k]
    kth = np.take_along_axis(scores, top, axis=1).min(axis=1, keepdims=True)
    # argpartition picks arbitrarily among scores equal to the k-th; redo those rows,
    # ordering only the columns that score at least the k-th
    tied = (scores >= kth).sum(axis=1) != k
    for row in np.nonzero(tied)[0]:
        near = np.flatnonzero(scores[row] >= kth[row, 0])
        top[row] = near[np.lexsort((near, -scores[row, near]))][:k]
    return top


def _best(scores: np.ndarray, index: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    order = np.lexsort((index, -scores), axis=1)[:, :k]
    return np.take_along_axis(scores, order, axis=1), np.take_along_axis(index, order, axis=1)


def knn(matrix: np.ndarray, top_k: int, block_rows: int = BLOCK_ROWS,
        block_cols: int = BLOCK_COLS, only: np.ndarray | None = None
        ) -> tuple[np.ndarray, np.ndarray]:
    """For each row (or each of the rows `only` lists, in its order), its top_k most
    similar other rows (cosine on L2-normalised rows).

    Blocked over rows and columns, so memory is O(block_rows * block_cols), never
    O(n^2). Equal scores go to the lower index (ids are sorted: the smaller id).
    Returns (indexes, scores), each (rows, k) with k = min(top_k, n - 1), best first.
    """
    count = matrix.shape[0]
    k = min(top_k, count - 1)
    asked = count if only is None else len(only)
    out_index = np.zeros((asked, max(k, 0)), np.int64)
    out_score = np.zeros((asked, max(k, 0)), np.float32)
    if k <= 0:
        return out_index, out_score
    for start in range(0, asked, block_rows):
        if only is None:
            own = np.arange(start, min(start + block_rows, count))
            rows = matrix[start:start + block_rows]
        else:
            own = np.asarray(only[start:start + block_rows], np.int64)
            rows = matrix[own]
        size = rows.shape[0]
        best_score = np.zeros((size, 0), np.float32)
        best_index = np.zeros((size, 0), np.int64)
        for col in range(0, count, block_cols):
            scores = rows @ matrix[col:col + block_cols].T
            inside = (own >= col) & (own < col + scores.shape[1])
            scores[np.nonzero(inside)[0], own[inside] - col] = -np.inf  # not its own neighbour
            top = _top_in_block(scores, k)
            best_score = np.concatenate([best_score, np.take_along_axis(scores, top, axis=1)], 1)
            best_index = np.concatenate([best_index, top + col], 1)
            best_score, best_index = _best(best_score, best_index, k)
        out_score[start:start + size] = best_score
        out_index[start:start + size] = best_index
    return out_index, out_score


# The approximate index (above similar_exact_max): HNSW links per node, the candidate
# lists while building and while searching, the candidates each entity takes to exact
# scoring (times k), and the entities whose exact neighbours measure its recall
# (benchmarks/similar_scale.py measures the choice: docs/scale.md).
HNSW_LINKS = 32
HNSW_BUILD_DEPTH = 80
HNSW_SEARCH_DEPTH = 128
CANDIDATES_PER_NEIGHBOUR = 4
RECALL_SAMPLE = 1000


def approximate_knn(matrix: np.ndarray, top_k: int) -> tuple[np.ndarray, np.ndarray]:
    """knn()'s answer from an HNSW index (faiss): each row's candidates scored exactly,
    the best top_k kept as knn() keeps them. The index is built on one thread, so the
    same vectors always give the same graph and the same edges."""
    from .extras import require_extra

    faiss = require_extra("faiss", "ann")
    count, dim = matrix.shape
    k = min(top_k, count - 1)
    wanted = min(count - 1, max(CANDIDATES_PER_NEIGHBOUR * k, 16))
    vectors = np.ascontiguousarray(matrix, np.float32)
    index = faiss.IndexHNSWFlat(dim, HNSW_LINKS, faiss.METRIC_INNER_PRODUCT)
    index.hnsw.efConstruction = HNSW_BUILD_DEPTH
    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    try:
        index.add(vectors)
    finally:
        faiss.omp_set_num_threads(threads)
    index.hnsw.efSearch = max(2 * wanted, HNSW_SEARCH_DEPTH)
    # Every row is in the index: its search starts at its own node on the bottom layer
    # (the descent through the upper layers would only find it again)
    # (each array named: a pointer does not keep its array alive)
    candidates = np.empty((count, wanted + 1), np.int64)  # (a row finds itself too)
    found_scores = np.empty((count, wanted + 1), np.float32)
    own_nodes = np.arange(count, dtype=np.int32).reshape(count, 1)
    own_scores = np.ones((count, 1), np.float32)
    index.search_level_0(count, faiss.swig_ptr(vectors), wanted + 1,
                         faiss.swig_ptr(own_nodes), faiss.swig_ptr(own_scores),
                         faiss.swig_ptr(found_scores), faiss.swig_ptr(candidates))
    out_index = np.zeros((count, k), np.int64)
    out_score = np.zeros((count, k), np.float32)
    for start in range(0, count, BLOCK_ROWS):
        found = candidates[start:start + BLOCK_ROWS]
        own = np.arange(start, start + len(found))[:, None]
        scores = np.einsum("id,ikd->ik", vectors[start:start + len(found)],
                           vectors[np.maximum(found, 0)])
        scores[(found < 0) | (found == own)] = -np.inf
        best_score, best_index = _best(scores, found, k)
        out_score[start:start + len(found)] = best_score
        out_index[start:start + len(found)] = best_index
    return out_index, out_score


def knn_recall(matrix: np.ndarray, neighbours: np.ndarray, min_score: float
               ) -> dict[str, Any]:
    """How much of the exact kNN approximate neighbours hold, on an even sample of the
    rows: recall@k (of each sampled row's exact top k) and the edges' recall (of those
    exact neighbours scoring min_score or more, the ones that become SIMILAR edges)."""
    count, k = neighbours.shape
    rows = np.unique(np.linspace(0, count - 1, min(count, RECALL_SAMPLE)).astype(np.int64))
    exact_index, exact_scores = knn(matrix, k, only=rows)
    held = wanted_edges = found_edges = 0
    for slot, row in enumerate(rows):
        found = set(neighbours[row].tolist())
        hits = [int(column) in found for column in exact_index[slot]]
        held += sum(hits)
        strong = exact_scores[slot] >= min_score
        wanted_edges += int(strong.sum())
        found_edges += sum(hit for hit, keep in zip(hits, strong, strict=True) if keep)
    return {"sample": len(rows), "recall_at_k": round(held / (len(rows) * k), 4),
            "edge_recall": round(found_edges / wanted_edges, 4) if wanted_edges else 1.0}


def _similar_pairs(neighbours: np.ndarray, scores: np.ndarray, min_score: float
                   ) -> tuple[list[int], list[int], np.ndarray]:
    """The unordered pairs (lower row, higher row) in the rows' neighbours scoring
    min_score or more, once each, with the score the last row to list it gave (the two
    rows' products can differ in the last bit)."""
    count, k = neighbours.shape
    row = np.repeat(np.arange(count, dtype=np.int64), k)
    other = neighbours.ravel().astype(np.int64)
    score = scores.ravel()
    keep = score >= min_score
    row, other, score = row[keep], other[keep], score[keep]
    low, high = np.minimum(row, other), np.maximum(row, other)
    pair = low * count + high
    order = np.lexsort((np.arange(len(pair)), pair))  # each pair's listings, in order
    last = np.ones(len(order), bool)
    last[:-1] = pair[order][1:] != pair[order][:-1]
    chosen = order[last]
    return low[chosen].tolist(), high[chosen].tolist(), score[chosen]


def similar_edges(ids: list[str], matrix: np.ndarray, top_k: int, min_score: float,
                  mentions: dict[str, set[str]], exact_max: int | None = None
                  ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Undirected SIMILAR edges: the union of each entity's top_k above min_score; and
    how they were found (exact, or approximate above exact_max entities, with its
    recall measured on a sample)."""
    if len(ids) < 2 or top_k <= 0:
        return [], {"method": "exact"}
    if exact_max is not None and len(ids) > exact_max:
        neighbours, scores = approximate_knn(matrix, top_k)
        report = {"method": "hnsw", **knn_recall(matrix, neighbours, min_score)}
    else:
        neighbours, scores = knn(matrix, top_k)
        report = {"method": "exact"}
    left, right, found_score = _similar_pairs(neighbours, scores, min_score)
    # in the edges' order: score (as written, 4 places), then source and target id
    written = [round(float(score), 4) for score in found_score]
    rank = np.empty(len(ids), np.int64)
    rank[np.argsort(np.array(ids))] = np.arange(len(ids))
    order = np.lexsort((rank[right], rank[left], -np.array(written, np.float64)))
    edges = []
    nothing: frozenset[str] = frozenset()
    for at in order.tolist():
        source, target = ids[left[at]], ids[right[at]]
        edges.append({"source": source, "target": target, "relation": "SIMILAR",
                      "score": written[at],
                      "shared_chunk_count": len(mentions.get(source, nothing)
                                                & mentions.get(target, nothing)),
                      "properties": {}})
    return edges, report


def condition_edges(nodes: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """A LEADS_TO B and B REQUIRES A wherever A's postcondition is B's precondition."""
    producers: dict[str, list[str]] = defaultdict(list)
    consumers: dict[str, list[str]] = defaultdict(list)
    for node in nodes:
        for condition in node.get("postconditions", []):
            negated, state = strip_not(condition)
            if not negated:
                producers[state].append(node["id"])
        for condition in node.get("preconditions", []):
            negated, state = strip_not(condition)
            if not negated:
                consumers[state].append(node["id"])
    links: dict[tuple[str, str], list[str]] = defaultdict(list)
    for state in sorted(producers):
        for producer in producers[state]:
            for consumer in consumers.get(state, []):
                if producer != consumer:
                    links[(producer, consumer)].append(state)
    edges = []
    for (producer, consumer), states in sorted(links.items()):
        properties = {"inferred_via": states[0], "via_states": states}
        edges.append({"source": producer, "target": consumer, "relation": "LEADS_TO",
                      "properties": dict(properties)})
        edges.append({"source": consumer, "target": producer, "relation": "REQUIRES",
                      "properties": dict(properties)})
    return edges


def extra_edge(edge: dict[str, Any]) -> dict[str, Any]:
    """A declared extra edge (extra-edges.json) in the graph's edge shape."""
    return {"source": edge["source"], "target": edge["target"], "relation": edge["relation"],
            **({"score": edge["score"]} if "score" in edge else {}),
            **({"shared_chunk_count": edge["shared_chunk_count"]}
               if "shared_chunk_count" in edge else {}),
            "properties": edge.get("properties", {})}


def merge_edges(*groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """All edges, deduplicated by (source, target, relation); earlier groups win."""
    seen: dict[tuple[str, str, str], dict[str, Any]] = {}
    for group in groups:
        for edge in group:
            seen.setdefault((edge["source"], edge["target"], edge["relation"]), edge)
    relation_rank = {"SIMILAR": 0}
    return sorted(map(_scored, seen.values()),
                  key=lambda e: (relation_rank.get(e["relation"], 1), e["relation"],
                                 e["source"], e["target"]))


def _scored(edge: dict[str, Any]) -> dict[str, Any]:
    """The edge with a score: graph tools weigh every edge (1.0 where a relation has no
    similarity), in the order the graph's edges list their fields."""
    if "score" in edge:
        return edge
    return {"source": edge["source"], "target": edge["target"], "relation": edge["relation"],
            "score": 1.0, **{key: value for key, value in edge.items()
                             if key not in ("source", "target", "relation")}}


def graph_document(nodes: list[dict[str, Any]], edges: list[dict[str, Any]], *,
                   model_id: str, top_k: int, min_score: float, extra_count: int,
                   inferred_count: int, dangling: list[str]) -> dict[str, Any]:
    return {
        "meta": {"schema_version": GRAPH_SCHEMA_VERSION, "input": "entity-profiles.json",
                 "input_type": "entity-profiles", "mode": "contextual",
                 "vectorizer": f"embedding-cosine:{model_id}", "top_k": top_k,
                 "min_score": min_score, "entity_count": len(nodes),
                 "edge_count": len(edges), "inferred_edge_count": inferred_count,
                 "extra_edge_count": extra_count, "dangling_chunk_entity_refs": dangling,
                 # (stored once, source < target)
                 "undirected_relations": sorted(UNDIRECTED_RELATIONS)},
        "nodes": nodes,
        "edges": edges,
    }


def skill_state_nodes(nodes: list[dict[str, Any]], edges: list[dict[str, Any]]
                      ) -> list[dict[str, Any]]:
    """Nodes for the states only skills declare (validated: an extra edge's end that is
    no node is one), named by extra or runtime edges: what a skill COMPLETED must be in
    the graph. Only those an edge names, so a graph without such edges is unchanged."""
    known = {node["id"] for node in nodes}
    named = sorted({end for edge in edges for end in (edge["source"], edge["target"])
                    if end not in known})
    return [{"id": state, "name": state, "type": "state", "aliases": [], "mention_count": 0,
             "chunk_ids": [], "declared_by": "skills"} for state in named]


def graph_node(profile: dict[str, Any]) -> dict[str, Any]:
    node = {"id": profile["id"], "name": profile["name"], "type": profile["type"],
            "aliases": profile["aliases"], "mention_count": profile["mention_count"],
            "chunk_ids": profile["mentioned_chunks"]}
    for key in ("preconditions", "postconditions", "related_skills"):
        if profile.get(key):
            node[key] = profile[key]
    return node


def edges_table(edges: list[dict[str, Any]]):
    import json

    import pyarrow as pa

    table = pa.table({
        "source": pa.array([e["source"] for e in edges], pa.string()),
        "target": pa.array([e["target"] for e in edges], pa.string()),
        "relation": pa.array([e["relation"] for e in edges], pa.string()),
        "score": pa.array([e.get("score") for e in edges], pa.float64()),
        "shared_chunk_count": pa.array([e.get("shared_chunk_count") for e in edges], pa.int32()),
        "properties": pa.array([json.dumps(e.get("properties", {}), ensure_ascii=False,
                                           sort_keys=True) for e in edges], pa.string()),
    })
    return table.replace_schema_metadata({"ctxfst.artifact": "edges",
                                          "ctxfst.schema_version": GRAPH_SCHEMA_VERSION})
