"""`ctxfst eval`: retrieval quality per mode on a queries file (upstream's format)."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ..diagnostics import escape_lines
from . import HALVES
from .search import Bridge, Index, RetrievalError, search


def load_queries(data: Any) -> list[dict[str, Any]]:
    queries = data.get("queries") if isinstance(data, dict) else data
    if not isinstance(queries, list) or not queries:
        raise RetrievalError("a queries file holds a list `queries` of {id, query, "
                             "expected_entities}")
    for number, item in enumerate(queries, 1):
        if not (isinstance(item, dict) and isinstance(item.get("query"), str)
                and all(_texts(item.get(key, [])) for key in ("expected_entities",
                                                              "expected_chunks"))
                and isinstance(item.get("id", ""), (str, int))):
            raise RetrievalError(f"query #{number} needs a `query` text, lists of ids "
                                 "`expected_entities` (and `expected_chunks`) and a text `id`")
        grades = item.get("grades", {})
        if not (isinstance(grades, dict) and all(
                isinstance(c, str) and type(g) in (int, float) and 0 < g <= 10
                and math.isfinite(g) for c, g in grades.items())):
            raise RetrievalError(f"query #{number}: `grades` maps chunk ids to gains above 0 "
                                 "and at most 10 (2: answers it, 1: partly)")
    return queries


# Every question belongs to a dev half (ranking changes are chosen on it) or a test half
# (they are judged on it), by a seeded hash of its id alone: adding or removing a question
# never moves another one.
SPLIT_SEED = "ctxfst-eval-split-1"


def half_of(query: dict[str, Any]) -> str:
    """The half a question is in (its id, or its text when it has none, hashed)."""
    key = str(query.get("id") or query["query"])
    digest = hashlib.sha256(f"{SPLIT_SEED}\0{key}".encode()).digest()
    return HALVES[digest[0] & 1]


def _texts(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def evaluate(index: Index, queries: list[dict[str, Any]], modes: list[str], k: int,
             embed: Callable[[list[str]], np.ndarray], hops: int = 2,
             skill_graph: dict[str, Any] | None = None,
             bridge_for: Callable[[str], Bridge | None] | None = None,
             half: str | None = None) -> dict[str, Any]:
    """Each mode's scores over the queries (those of one half, when given)."""
    if half is not None:
        queries = [query for query in queries if half_of(query) == half]
        if not queries:
            raise RetrievalError(f"no query is in the {half} half")
    vectors = embed([q["query"] for q in queries])
    entities = {c["chunk_id"]: set(c["entities"]) for c in index.chunks}
    report: dict[str, Any] = {"k": k, "queries": len(queries), "modes": {}, "per_query": []}
    if half is not None:
        report["half"] = half
    rows = {mode: [] for mode in modes}
    for query, vector in zip(queries, vectors, strict=True):
        expected = set(query.get("expected_entities", []))
        wanted_chunks = set(query.get("expected_chunks", []))
        # Graded queries: their grades say which chunks are relevant, and how much.
        grades: dict[str, float] = query.get("grades") or {}
        detail = {"id": query.get("id", ""), "query": query["query"], "half": half_of(query),
                  "results": {}}
        bridge = bridge_for(query["query"]) if bridge_for and {"graph", "hybrid"} & set(
            modes) else None
        for mode in modes:
            result = search(index, query["query"], vector, mode, k, hops, skill_graph, bridge)
            ids = [hit.chunk_id for hit in result.hits]
            if grades:
                gains = [float(grades.get(c, 0.0)) for c in ids]
                ideal_gains = sorted(map(float, grades.values()), reverse=True)
            else:
                gains = [float(bool(entities[c] & expected) or c in wanted_chunks)
                         for c in ids]
                ideal_gains = [1.0] * sum(1 for c, ents in entities.items()
                                          if ents & expected or c in wanted_chunks)
            relevant = [gain > 0 for gain in gains]
            total_relevant = len(ideal_gains)
            covered = set().union(*(entities[c] for c in ids)) & expected if ids else set()
            first = next((rank for rank, ok in enumerate(relevant, 1) if ok), None)
            dcg = sum(gain / math.log2(rank + 1) for rank, gain in enumerate(gains, 1))
            ideal = sum(gain / math.log2(rank + 1)
                        for rank, gain in enumerate(ideal_gains[:k], 1))
            rows[mode].append({"hit": any(relevant), "relevant": sum(relevant),
                               "found": sum(relevant) / total_relevant if total_relevant
                               else 1.0,
                               "recall": len(covered) / len(expected) if expected else 1.0,
                               "rr": 1 / first if first else 0.0,
                               "ndcg": dcg / ideal if ideal else 0.0})
            detail["results"][mode] = [{"chunk_id": c, "relevant": ok}
                                       for c, ok in zip(ids, relevant, strict=True)]
        report["per_query"].append(detail)
    for mode, items in rows.items():
        n = len(items)
        report["modes"][mode] = {
            "hit_at_k": sum(i["hit"] for i in items), "relevant_in_top_k": sum(
                i["relevant"] for i in items), "possible": k * n,
            "precision_at_k": round(sum(i["relevant"] for i in items) / (k * n), 4),
            "recall_at_k": round(sum(i["found"] for i in items) / n, 4),
            "entity_recall": round(sum(i["recall"] for i in items) / n, 4),
            "mrr": round(sum(i["rr"] for i in items) / n, 4),
            "ndcg": round(sum(i["ndcg"] for i in items) / n, 4)}
    return report


def markdown(report: dict[str, Any]) -> str:
    k, n = report["k"], report["queries"]
    lines = [f"| mode | Hit@{k} | relevant in top {k} | P@{k} | recall@{k} | entity recall "
             f"| MRR | nDCG@{k} |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for mode, m in report["modes"].items():
        lines.append(f"| {mode} | {m['hit_at_k']}/{n} | {m['relevant_in_top_k']}/{m['possible']}"
                     f" | {m['precision_at_k']:.2f} | {m['recall_at_k']:.2f}"
                     f" | {m['entity_recall']:.2f} | {m['mrr']:.2f} | {m['ndcg']:.2f} |")
    for detail in report["per_query"]:
        lines += ["", f"**{detail['id']}** {detail['query']}", "",
                  "| mode | " + " | ".join(f"#{i}" for i in range(1, k + 1)) + " |",
                  "| --- |" + " --- |" * k]
        for mode, hits in detail["results"].items():
            cells = [f"{h['chunk_id']}{' ✓' if h['relevant'] else ''}" for h in hits]
            cells += [""] * (k - len(cells))
            lines.append(f"| {mode} | " + " | ".join(cells) + " |")
    return escape_lines(lines) + "\n"  # query texts and ids come from files
