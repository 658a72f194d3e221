"""`ctxfst export lancedb`: the chunk and entity vectors as LanceDB tables."""

from __future__ import annotations

from pathlib import Path

from .search import RetrievalError


def export_lancedb(build_dir: Path, db_path: Path) -> dict[str, int]:
    """Write tables `chunks` (id, text, context, tags, entities, source, vector) and
    `entities` (id, name, type, aliases, vector); replaces tables of those names."""
    try:
        import lancedb
    except ImportError:
        raise RetrievalError("the lancedb package is not installed: pip install lancedb") \
            from None
    import pyarrow as pa
    import pyarrow.parquet as pq

    needed = ["chunks.parquet", "chunk_vectors.parquet", "entities.parquet",
              "entity_vectors.parquet"]
    missing = [name for name in needed if not (build_dir / name).is_file()]
    if missing:
        raise RetrievalError(f"{', '.join(missing)} missing in {build_dir}: run `doit`")
    chunks = pq.read_table(build_dir / "chunks.parquet")
    chunk_vectors = pq.read_table(build_dir / "chunk_vectors.parquet")
    entities = pq.read_table(build_dir / "entities.parquet")
    entity_vectors = pq.read_table(build_dir / "entity_vectors.parquet")
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
