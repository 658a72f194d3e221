"""The build's artifacts read as they are in duckdb and polars, and the documented join
of chunks to vectors to entities runs as one SQL statement."""

from __future__ import annotations

import json
import re

import duckdb
import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest

from ctxfst.pipeline.runner import run_build

from .conftest import REPO, copy_example


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = copy_example(tmp_path_factory.mktemp("kb"))
    assert run_build(root, []) == 0
    return root


def documented_sql() -> str:
    text = (REPO / "docs/compiler.md").read_text()
    section = text.split("### Reading the artifacts with SQL", 1)[1]
    return re.search(r"```sql\n(.*?)```", section, re.S).group(1)


def test_every_artifact_reads_in_duckdb_and_polars(built):
    manifest = json.loads((built / "build/manifest.json").read_text())
    names = [entry["path"] for entry in manifest["artifacts"]]
    parquet = [name for name in names if name.endswith(".parquet")]
    assert {"chunks.parquet", "chunk_vectors.parquet", "entities.parquet",
            "entity_vectors.parquet", "skills.parquet", "skill_vectors.parquet",
            "edges.parquet", "semantic_facts.parquet"} <= set(parquet)
    for name in parquet:
        path = built / "build" / name
        rows = pq.ParquetFile(path).metadata.num_rows
        assert duckdb.sql(f"SELECT count(*) FROM '{path}'").fetchall() == [(rows,)], name
        frame = pl.read_parquet(path)
        assert frame.height == rows and frame.columns == pq.read_schema(path).names, name
    for name in [name for name in names if name.endswith(".json")] + ["manifest.json"]:
        path = built / "build" / name
        assert duckdb.sql(f"SELECT count(*) FROM read_json('{path}')").fetchall() == [(1,)]
        assert pl.read_json(path).height == 1, name
    # the vectors keep their fixed dimension where the reader has the type
    vectors = pl.read_parquet(built / "build/chunk_vectors.parquet").schema["vector"]
    assert vectors == pl.Array(pl.Float32, 64)


def test_id_columns_have_one_name_across_artifacts(built):
    build = built / "build"

    def column(name: str, field: str) -> list:
        return pq.read_table(build / name, columns=[field]).column(field).to_pylist()

    assert column("chunk_vectors.parquet", "chunk_id") == column("chunks.parquet", "chunk_id")
    assert column("entity_vectors.parquet", "entity_id") == \
        column("entities.parquet", "entity_id")
    assert column("skill_vectors.parquet", "node_id") == column("skills.parquet", "node_id")
    nodes = {node["id"] for node in json.loads((build / "entity-graph.json").read_text())[
        "nodes"]}
    assert set(column("entities.parquet", "entity_id")) | set(
        column("skills.parquet", "node_id")) <= nodes
    assert set(column("edges.parquet", "source")) | set(column("edges.parquet", "target")) \
        <= nodes
    # the polars join on the shared name, as the docs show it
    joined = pl.read_parquet(build / "chunks.parquet").join(
        pl.read_parquet(build / "chunk_vectors.parquet"), on="chunk_id")
    assert joined.height == len(column("chunks.parquet", "chunk_id"))


def test_the_documented_join_is_one_statement_and_right(built, monkeypatch):
    monkeypatch.chdir(built)
    rows = duckdb.sql(documented_sql()).fetchall()
    build = built / "build"
    chunks = pq.read_table(build / "chunks.parquet").to_pylist()
    entities = {e["entity_id"]: e["name"] for e in pq.read_table(
        build / "entities.parquet").to_pylist()}

    def vectors(name: str, field: str) -> dict[str, np.ndarray]:
        table = pq.read_table(build / name).to_pylist()
        return {row[field]: np.asarray(row["vector"], np.float64) for row in table}

    chunk_vectors = vectors("chunk_vectors.parquet", "chunk_id")
    entity_vectors = vectors("entity_vectors.parquet", "entity_id")
    expected = sorted(
        ((c["chunk_id"], c["document_title"], entities[e],
          float(chunk_vectors[c["chunk_id"]] @ entity_vectors[e]))
         for c in chunks for e in c["entities"]),
        key=lambda row: (-row[3], row[0], row[2]))[:5]
    assert len(rows) == 5
    for got, want in zip(rows, expected, strict=True):
        assert got[:3] == want[:3] and got[3] == pytest.approx(want[3], abs=1e-5)
