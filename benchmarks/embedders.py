"""Compare the embedding backends on encode speed and on plain vector retrieval over
the public ch22 benchmark (Traditional Chinese queries over mixed-language notes).

    .venv/bin/python benchmarks/embedders.py [--models minilm use-multilingual]

Retrieval here is cosine between query and chunk vectors, top 3; a chunk is relevant
when its entities overlap the query's expected_entities (the published protocol).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import yaml

from ctxfst.compile.embed import chunk_text, get_embedder
from ctxfst.document.parse import parse_document
from ctxfst.document.source import Source
from ctxfst.mock import mock_document

CH22 = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "ch22"


def ch22_chunks() -> list[dict]:
    path = CH22 / "benchmark.ctxfst.md"
    doc = parse_document(Source(str(path), path))
    return [{"id": record.id, "entities": set(record.entities),
             "text": chunk_text({"context": record.context,
                                 "content": doc.bodies[record.id].content})}
            for _, record in doc.chunks]


def mock_texts(count: int) -> list[str]:
    texts: list[str] = []
    index = 0
    while len(texts) < count:
        doc = mock_document(index, seed=11)
        texts.extend(part.split("\n", 1)[1].rsplit("\n</Chunk>", 1)[0]
                     for part in doc.split('<Chunk id="')[1:])
        index += 1
    return texts[:count]


def evaluate(model: str, chunks: list[dict], queries: list[dict], texts: list[str]) -> dict:
    started = time.perf_counter()
    embedder = get_embedder(model)
    embedder.encode(["warm up"], 32, False)
    load = time.perf_counter() - started
    started = time.perf_counter()
    vectors = embedder.encode(texts, 32, False)
    speed = len(texts) / (time.perf_counter() - started)
    chunk_vectors = embedder.encode([c["text"] for c in chunks], 32, False)
    query_vectors = embedder.encode_queries([q["query"] for q in queries])
    hits = relevant = 0
    for query, vector in zip(queries, query_vectors, strict=True):
        scores = chunk_vectors @ vector
        top = sorted(range(len(chunks)), key=lambda i: (-scores[i], chunks[i]["id"]))[:3]
        expected = set(query["expected_entities"])
        found = [bool(chunks[i]["entities"] & expected) for i in top]
        hits += any(found)
        relevant += sum(found)
    return {"model": embedder.model_id, "dim": int(vectors.shape[1]), "load_s": load,
            "texts_per_s": speed, "hit3": hits, "relevant3": relevant, "queries": len(queries)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", nargs="+", default=["minilm", "use-multilingual",
                                                        "e5-small"])
    parser.add_argument("--texts", type=int, default=200)
    args = parser.parse_args()
    chunks = ch22_chunks()
    queries = yaml.safe_load((CH22 / "queries.yaml").read_text())["queries"]
    texts = mock_texts(args.texts)
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores; {len(texts)} mock chunk "
          f"texts for speed; ch22: {len(chunks)} chunks, {len(queries)} queries")
    print(f"{'model':<50} {'dim':>4} {'load s':>7} {'texts/s':>8} {'Hit@3':>6} {'rel@3':>6}")
    for model in args.models:
        row = evaluate(model, chunks, queries, texts)
        print(f"{row['model']:<50} {row['dim']:>4} {row['load_s']:>7.1f} "
              f"{row['texts_per_s']:>8.1f} {row['hit3']:>3}/{row['queries']:<2} "
              f"{row['relevant3']:>3}/{3 * row['queries']}")


if __name__ == "__main__":
    main()
