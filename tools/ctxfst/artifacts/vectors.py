"""The vectors artifacts (chunk_vectors.parquet, entity_vectors.parquet,
skill_vectors.parquet): one writer and one checking reader, shared by the build,
retrieval and the exports."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .arrays import from_numpy
from .layout import VECTOR_ID_COLUMNS as ID_COLUMNS, VECTORS_SCHEMA


def read_vectors(path: Path, data: bytes | None = None) -> tuple[list[str], np.ndarray, str]:
    """(ids, matrix, model id) of a vectors artifact that vectors_table wrote (read from
    `data`, its bytes, when given); ValueError naming the path when it is not one: not
    Parquet, columns of other types, missing dimension metadata, or values that are not
    finite numbers."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    def damaged(why: str) -> ValueError:
        return ValueError(f"{path}: damaged vectors ({why})")

    try:
        # (ParquetFile, not read_table: one file, and no import of pyarrow.dataset)
        table = pq.ParquetFile(pa.BufferReader(data) if data is not None else path).read()
        meta = {k.decode(): v.decode() for k, v in (table.schema.metadata or {}).items()}
    except Exception as error:  # whatever the Parquet reader makes of foreign bytes
        raise damaged(f"not a readable Parquet table: {type(error).__name__}: {error}") \
            from None
    dim = int(meta["ctxfst.dim"]) if meta.get("ctxfst.dim", "").isdigit() else -1
    id_column = ID_COLUMNS.get(meta.get("ctxfst.artifact", ""))
    if meta.get("ctxfst.schema_version") != VECTORS_SCHEMA or id_column is None:
        raise damaged(f"not a vectors artifact of schema {VECTORS_SCHEMA} (ctxfst.artifact "
                      f"one of {', '.join(sorted(ID_COLUMNS))}): rebuild with `doit`")
    if id_column not in table.column_names or "vector" not in table.column_names:
        raise damaged(f"no `{id_column}` and `vector` columns")
    ids, vectors = table.column(id_column), table.column("vector")
    kind = vectors.type
    if not (ids.type == pa.string() and pa.types.is_fixed_size_list(kind)
            and kind.value_type == pa.float32() and kind.list_size == dim):
        raise damaged(f"missing dimension metadata, or `{id_column}` {ids.type} and "
                      f"`vector` {kind} are not text and fixed-size float32 lists of that "
                      "dimension")
    flat = vectors.combine_chunks().flatten()
    if ids.null_count or vectors.null_count or flat.null_count:
        raise damaged("empty (null) ids or vectors")
    matrix = np.asarray(flat.to_numpy(zero_copy_only=False), np.float32)
    if matrix.size != table.num_rows * dim or not np.all(np.isfinite(matrix)):
        raise damaged("values that are not finite numbers")
    return ids.to_pylist(), matrix.reshape(table.num_rows, dim), meta.get("ctxfst.model_id", "")


def vectors_table(ids: list[str], matrix: np.ndarray, model_id: str, artifact: str):
    import pyarrow as pa

    dim = int(matrix.shape[1]) if matrix.ndim == 2 else 0
    flat = from_numpy(np.asarray(matrix).reshape(-1), pa.float32())
    vectors = pa.FixedSizeListArray.from_arrays(flat, dim) if dim else pa.array(
        [], pa.list_(pa.float32(), 0))
    table = pa.table({ID_COLUMNS[artifact]: pa.array(ids, pa.string()), "vector": vectors})
    return table.replace_schema_metadata({
        "ctxfst.artifact": artifact, "ctxfst.schema_version": VECTORS_SCHEMA,
        "ctxfst.model_id": model_id, "ctxfst.dim": str(dim), "ctxfst.normalized": "l2"})


def write_vectors(path: Path, ids: list[str], matrix: np.ndarray, model_id: str,
                  artifact: str) -> None:
    """Write a vectors artifact atomically (no dictionary: ids and vectors are unique)."""
    from .io import write_parquet

    write_parquet(path, vectors_table(ids, matrix, model_id, artifact), dictionary=False)
