"""`ctxfst export lancedb`: the chunk and entity vectors as LanceDB tables."""

from __future__ import annotations

from pathlib import Path

from .search import RetrievalError


def export_lancedb(build_dir: Path, db_path: Path,
                   cache_dir: Path | None = None) -> dict[str, int]:
    """Write tables `chunks` (id, text, context, tags, entities, source, vector) and
    `entities` (id, name, type, aliases, vector); replaces tables of those names."""
    try:
        import lancedb
    except ImportError:
        raise RetrievalError("the lancedb package is not installed: pip install "
                             "'ctxfst[lancedb]'") from None
    import pyarrow as pa

    from ..artifacts.reader import (CHUNK_NULLABLE, ArtifactError, BuildArtifacts,
                                    chunk_columns, entity_columns)
    from ..artifacts.vectors import vectors_table

    try:  # every artifact checked against the manifest, then for the columns used
        build = BuildArtifacts(build_dir, ["chunks.parquet", "chunk_vectors.parquet",
                                           "entities.parquet", "entity_vectors.parquet"],
                               cache_dir)
        chunks = build.parquet("chunks.parquet", chunk_columns(), CHUNK_NULLABLE)
        entities = build.parquet("entities.parquet", entity_columns())
        chunk_vectors, entity_vectors = (
            vectors_table(*build.vectors(f"{kind}_vectors.parquet"), f"{kind}_vectors")
            for kind in ("chunk", "entity"))
    except ArtifactError as error:
        raise RetrievalError(str(error)) from None
    if chunks.column("chunk_id").to_pylist() != chunk_vectors.column("id").to_pylist() or \
            entities.column("entity_id").to_pylist() != entity_vectors.column("id").to_pylist():
        raise RetrievalError(f"{build_dir}: vectors do not match their rows (a stale build): "
                             "run `doit`")
    metadata = chunk_vectors.schema.metadata
    chunk_table = pa.table({
        "id": chunks.column("chunk_id"), "text": chunks.column("content"),
        "context": chunks.column("context"), "tags": chunks.column("tags"),
        "entities": chunks.column("entities"), "source": chunks.column("source"),
        "vector": chunk_vectors.column("vector"),
    }).replace_schema_metadata(metadata)
    entity_table = pa.table({
        "id": entities.column("entity_id"), "name": entities.column("name"),
        "type": entities.column("type"), "aliases": entities.column("aliases"),
        "vector": entity_vectors.column("vector"),
    }).replace_schema_metadata(entity_vectors.schema.metadata)
    db = lancedb.connect(str(db_path))
    db.create_table("chunks", data=chunk_table, mode="overwrite")
    db.create_table("entities", data=entity_table, mode="overwrite")
    return {"chunks": chunk_table.num_rows, "entities": entity_table.num_rows}


def lancedb_folder(root: Path, db_path: Path) -> Path:
    """The --db folder, links resolved: inside the project (a link in a stranger's
    checkout must not lead the export to overwrite tables elsewhere) and not a file."""
    from ..config import ConfigError, check_inside

    folder = check_inside(root, db_path, "--db")
    if folder.exists() and not folder.is_dir():
        raise ConfigError(f"--db {db_path} is a file; a LanceDB database is a folder",
                          code="CTX808")
    return folder
