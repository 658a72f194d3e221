"""`ctxfst export lancedb`: the chunk and entity vectors as LanceDB tables."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from .search import RetrievalError


def export_lancedb(build_dir: Path, db_path: Path, cache_dir: Path | None = None,
                   fts_tokenizer: str = "icu") -> dict[str, Any]:
    """Write tables `chunks` (id, title, text, context, tags, entities, source, line_start,
    line_end, vector; a full-text index on text), `entities` (id, name, type, aliases,
    vector) and `skills` (id, name, kind, description, path, vector: the entities of
    type skill, then the SKILL.md skills; `id` is the entity graph's node id). Tables of
    those names are replaced. The full-text index's tokenizer: `icu` finds words in every
    script (Chinese and Japanese have no spaces to split on), `simple` splits on spaces
    and punctuation, `ngram` indexes 2- and 3-character n-grams. Returns the row counts
    and the tokenizer used."""
    import os

    # lancedb's Rust logger writes WARN lines to stderr (a new dataset's storage version,
    # for one): a command's stderr is for its own errors. An explicit setting stands.
    os.environ.setdefault("LANCEDB_LOG", "error")
    try:
        import lancedb
    except ImportError:
        raise RetrievalError("the lancedb package is not installed: pip install "
                             "'ctxfst[lancedb]'") from None
    import pyarrow as pa

    from ..artifacts.reader import (
        CHUNK_NULLABLE,
        ArtifactError,
        BuildArtifacts,
        chunk_columns,
        entity_columns,
    )

    vector_files = ("chunk_vectors.parquet", "entity_vectors.parquet", "skill_vectors.parquet")
    try:  # every artifact checked against the manifest, then for the columns used
        build = BuildArtifacts(build_dir, ["chunks.parquet", "entities.parquet",
                                           "skills.parquet", *vector_files], cache_dir)
        chunks = build.parquet("chunks.parquet", chunk_columns(), CHUNK_NULLABLE)
        entities = build.parquet("entities.parquet", {
            **entity_columns(), "contexts": pa.list_(pa.string())})
        skills = build.parquet("skills.parquet", {
            "name": pa.string(), "node_id": pa.string(), "description": pa.string(),
            "path": pa.string()}, frozenset({"description"}))
        (chunk_ids, chunk_matrix, model_id), (entity_ids, entity_matrix, _), \
            (skill_ids, skill_matrix, _) = (build.vectors(name) for name in vector_files)
    except ArtifactError as error:
        raise RetrievalError(str(error)) from None
    if chunks.column("chunk_id").to_pylist() != chunk_ids or \
            entities.column("entity_id").to_pylist() != entity_ids or \
            skills.column("node_id").to_pylist() != skill_ids:
        raise RetrievalError(f"{build_dir}: vectors do not match their rows (a stale build): "
                             "run `doit`")
    dim = next((m.shape[1] for m in (chunk_matrix, entity_matrix, skill_matrix) if len(m)), 0)

    def vectors(matrix):
        from ..artifacts.arrays import from_numpy

        flat = from_numpy(matrix.reshape(-1), pa.float32())
        return pa.FixedSizeListArray.from_arrays(flat, dim)

    # the vectors files' metadata (model, dimension, normalisation) goes with each table
    metadata = {"ctxfst.model_id": model_id, "ctxfst.dim": str(dim),
                "ctxfst.normalized": "l2"}
    chunk_table = pa.table({
        "id": chunks.column("chunk_id"), "title": chunks.column("document_title"),
        "text": chunks.column("content"), "context": chunks.column("context"),
        "tags": chunks.column("tags"), "entities": chunks.column("entities"),
        "source": chunks.column("source"), "line_start": chunks.column("line_start"),
        "line_end": chunks.column("line_end"), "vector": vectors(chunk_matrix),
    }).replace_schema_metadata(metadata)
    entity_table = pa.table({
        "id": entities.column("entity_id"), "name": entities.column("name"),
        "type": entities.column("type"), "aliases": entities.column("aliases"),
        "vector": vectors(entity_matrix),
    }).replace_schema_metadata(metadata)
    skill_entities = [index for index, kind in enumerate(entities.column("type").to_pylist())
                      if kind == "skill"]
    contexts = entities.column("contexts").to_pylist()
    skill_table = pa.table({
        "id": pa.array([entity_ids[i] for i in skill_entities] + skill_ids, pa.string()),
        "name": pa.array([entities.column("name")[i].as_py() for i in skill_entities]
                         + skills.column("name").to_pylist(), pa.string()),
        "kind": pa.array(["entity"] * len(skill_entities) + ["SKILL.md"] * len(skill_ids),
                         pa.string()),
        "description": pa.array([(contexts[i] or [""])[0] for i in skill_entities]
                                + [d or "" for d in skills.column("description").to_pylist()],
                                pa.string()),
        "path": pa.array([None] * len(skill_entities) + skills.column("path").to_pylist(),
                         pa.string()),
        "vector": vectors(np.concatenate([entity_matrix[skill_entities],
                                          skill_matrix]).astype(np.float32)),
    }).replace_schema_metadata(metadata)
    db = lancedb.connect(str(db_path))
    table = db.create_table("chunks", data=chunk_table, mode="overwrite")
    if chunk_table.num_rows:  # full-text and hybrid search: `query_type="hybrid"`
        from lancedb.index import FTS

        options = {"ngram_min_length": 2, "ngram_max_length": 3} \
            if fts_tokenizer == "ngram" else {}
        # (an FTS config takes the column as create_index's first argument, `metric`)
        table.create_index("text", replace=True,
                           config=FTS(base_tokenizer=fts_tokenizer, **options))
    db.create_table("entities", data=entity_table, mode="overwrite")
    db.create_table("skills", data=skill_table, mode="overwrite")
    return {"chunks": chunk_table.num_rows, "entities": entity_table.num_rows,
            "skills": skill_table.num_rows, "fts_tokenizer": fts_tokenizer}


def lancedb_folder(config, db_path: Path) -> Path:
    """The --db folder the user typed, links resolved (config.typed_path: anywhere, but
    not out of the project through a link in it, nor over its sources), not a file."""
    from ..config import ConfigError, typed_path

    folder = typed_path(config, db_path, "--db")
    if folder.exists() and not folder.is_dir():
        raise ConfigError(f"--db {db_path} is a file; a LanceDB database is a folder",
                          code="CTX808")
    return folder
