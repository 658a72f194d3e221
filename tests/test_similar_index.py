"""SIMILAR edges above similar_exact_max: an approximate index, its candidates scored
exactly, its recall measured and recorded; below it, the exact kNN."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from ctxfst.compile.graph import approximate_knn, knn, knn_recall, similar_edges
from ctxfst.mock import generate
from ctxfst.pipeline.runner import run_build

from .conftest import write
from .test_build import artifact_bytes, stage


def similar(root: Path) -> dict[tuple[str, str], float]:
    graph = json.loads((root / "build" / "entity-graph.json").read_text())
    return {(edge["source"], edge["target"]): edge["score"] for edge in graph["edges"]
            if edge["relation"] == "SIMILAR"}


def knowledge_base(root: Path, settings: str = "") -> Path:
    generate(root, 40, seed=5)  # 26 entities
    write(root, "ctxfst.toml", f'embedding_model = "hash-64"\n{settings}')
    return root


def test_a_graph_over_the_limit_comes_from_the_index_with_its_recall(tmp_path, capsys):
    exact = knowledge_base(tmp_path / "exact")
    indexed = knowledge_base(tmp_path / "indexed", "similar_exact_max = 10\n")
    again = knowledge_base(tmp_path / "again", "similar_exact_max = 10\n")
    for root in (exact, indexed, again):
        assert run_build(root, [], quiet=True) == 0
    assert stage(exact, "graph")["similar"] == {"method": "exact"}
    report = stage(indexed, "graph")["similar"]
    assert report["method"] == "hnsw" and report["sample"] == 26
    assert report["recall_at_k"] == report["edge_recall"] == 1.0
    # (26 entities: the index finds every neighbour, scored as the exact kNN scores it)
    assert similar(indexed).keys() == similar(exact).keys() and similar(exact)
    assert all(abs(score - similar(exact)[pair]) <= 1e-4
               for pair, score in similar(indexed).items())
    assert artifact_bytes(indexed) == artifact_bytes(again)


def test_the_index_and_its_recall_on_clustered_vectors():
    rng = np.random.default_rng(3)
    centres = rng.standard_normal((60, 32)).astype(np.float32)
    matrix = centres[rng.integers(0, 60, 3000)] + 0.5 * rng.standard_normal(
        (3000, 32)).astype(np.float32)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    neighbours, scores = approximate_knn(matrix, 5)
    exact_neighbours, exact_scores = knn(matrix, 5)
    assert neighbours.shape == exact_neighbours.shape == (3000, 5)
    assert not (neighbours == np.arange(3000)[:, None]).any()  # never its own neighbour
    assert np.all(np.diff(scores, axis=1) <= 0)  # best first
    report = knn_recall(matrix, neighbours, 0.35)
    held = np.mean([len(set(a) & set(b)) / 5 for a, b in
                    zip(neighbours.tolist(), exact_neighbours.tolist(), strict=True)])
    assert report["sample"] == 1000 and report["recall_at_k"] >= 0.95 and held >= 0.95
    # a neighbour list missing half the exact neighbours measures as such
    half = exact_neighbours.copy()
    half[:, 2:] = (half[:, 2:] + 1500) % 3000
    assert 0.3 <= knn_recall(matrix, half, -1.0)["recall_at_k"] <= 0.5


def test_without_the_index_package_the_build_says_what_to_install(tmp_path, capsys):
    root = knowledge_base(tmp_path / "kb", "similar_exact_max = 10\n")
    done = subprocess.run(
        [sys.executable, "-c", "import sys; sys.modules['faiss'] = None; from ctxfst.cli "
         "import main; sys.exit(main(['build', '--root', sys.argv[1]]))", str(root)],
        capture_output=True, text=True, timeout=300)
    output = done.stdout + done.stderr
    assert done.returncode == 1 and "pip install 'ctxfst[ann]'" in output, output
    assert "similar_exact_max" in output and "Traceback" not in output
    assert not (root / "build" / "manifest.json").exists()


def test_similar_edges_are_each_pair_once_best_first_then_by_id():
    """Each entity's neighbours above the minimum become undirected edges: a pair both
    ends list is one edge; the edges run by score, then source and target id (the ids
    in any order), each with the chunks both ends are mentioned in."""
    angles = np.radians([0.0, 10.0, 30.0, 100.0, 12.0])
    matrix = np.stack([np.cos(angles), np.sin(angles)], axis=1).astype(np.float32)
    ids = ["entity:e", "entity:b", "entity:d", "entity:a", "entity:c"]
    mentions = {"entity:e": {"c1", "c2"}, "entity:b": {"c2"}, "entity:c": {"c1", "c2"}}
    edges, found_by = similar_edges(ids, matrix, 2, 0.8, mentions)
    assert found_by == {"method": "exact"}
    pairs = [frozenset((edge["source"], edge["target"])) for edge in edges]
    assert len(set(pairs)) == len(pairs)
    expected = {frozenset((ids[i], ids[j])): round(float(matrix[i] @ matrix[j]), 4)
                for i in range(5) for j in range(i + 1, 5) if matrix[i] @ matrix[j] >= 0.8}
    # entity:a (100 degrees) has no neighbour above 0.8; the pair e-d (30 degrees, 0.87)
    # is in neither end's top 2
    assert {pair: edge["score"] for pair, edge in zip(pairs, edges, strict=True)} == \
        {pair: score for pair, score in expected.items()
         if pair != frozenset(("entity:e", "entity:d"))}
    assert [(-edge["score"], edge["source"], edge["target"]) for edge in edges] == \
        sorted((-edge["score"], edge["source"], edge["target"]) for edge in edges)
    shared = {pair: edge["shared_chunk_count"] for pair, edge in zip(pairs, edges, strict=True)}
    assert shared[frozenset(("entity:e", "entity:c"))] == 2
    assert shared[frozenset(("entity:b", "entity:c"))] == 1
    assert edges[0]["score"] == round(float(matrix[1] @ matrix[4]), 4)  # 2 degrees apart
