"""The vectors artifacts (chunk_vectors.parquet, entity_vectors.parquet,
skill_vectors.parquet): one writer and one checking reader, shared by the build,
retrieval and the exports."""

from __future__ import annotations

import io
import os
from pathlib import Path

import numpy as np

from .arrays import arrow_reader, from_numpy
from .layout import VECTOR_ID_COLUMNS as ID_COLUMNS
from .layout import VECTORS_SCHEMA


def read_vectors(path: Path, data: bytes | None = None) -> tuple[list[str], np.ndarray, str]:
    """(ids, matrix, model id) of a vectors artifact that vectors_table wrote (read from
    `data`, its bytes, when given); ValueError naming the path when it is not one: not
    Parquet, columns of other types, missing dimension metadata, or values that are not
    finite numbers."""
    vectors = VectorFile(path, data)
    return vectors.ids(), vectors.matrix(), vectors.model_id


class VectorFile:
    """A vectors artifact, its schema and metadata checked; ids and the matrix are read
    (and checked) apart, so a reader with the matrix decoded already reads only the ids."""

    def __init__(self, path: Path, data: bytes | None = None) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        self.path = path
        try:
            # (ParquetFile, not read_table: one file, and no import of pyarrow.dataset)
            self.file = pq.ParquetFile(arrow_reader(data) if data is not None else path)
            schema = self.file.schema_arrow
            meta = {k.decode(): v.decode() for k, v in (schema.metadata or {}).items()}
        except Exception as error:  # whatever the Parquet reader makes of foreign bytes
            raise self.damaged(f"not a readable Parquet table: {type(error).__name__}: "
                               f"{error}") from None
        self.dim = int(meta["ctxfst.dim"]) if meta.get("ctxfst.dim", "").isdigit() else -1
        self.id_column = id_column = ID_COLUMNS.get(meta.get("ctxfst.artifact", ""))
        if meta.get("ctxfst.schema_version") != VECTORS_SCHEMA or id_column is None:
            raise self.damaged(f"not a vectors artifact of schema {VECTORS_SCHEMA} "
                               f"(ctxfst.artifact one of {', '.join(sorted(ID_COLUMNS))}): "
                               "rebuild with `doit`")
        if id_column not in schema.names or "vector" not in schema.names:
            raise self.damaged(f"no `{id_column}` and `vector` columns")
        ids, kind = schema.field(id_column).type, schema.field("vector").type
        if not (ids == pa.string() and pa.types.is_fixed_size_list(kind)
                and kind.value_type == pa.float32() and kind.list_size == self.dim):
            raise self.damaged(f"missing dimension metadata, or `{id_column}` {ids} and "
                               f"`vector` {kind} are not text and fixed-size float32 lists "
                               "of that dimension")
        self.model_id = meta.get("ctxfst.model_id", "")
        self.rows = self.file.metadata.num_rows

    def damaged(self, why: str) -> ValueError:
        return ValueError(f"{self.path}: damaged vectors ({why})")

    def _column(self, name: str):
        try:
            column = self.file.read(columns=[name]).column(name)
        except Exception as error:  # damaged pages behind a readable footer
            raise self.damaged(f"unreadable `{name}`: {type(error).__name__}: {error}") \
                from None
        if len(column) != self.rows:
            raise self.damaged(f"`{name}` has {len(column)} rows, the file {self.rows}")
        return column

    def ids(self) -> list[str]:
        ids = self._column(self.id_column)
        if ids.null_count:
            raise self.damaged("empty (null) ids or vectors")
        return ids.to_pylist()

    def matrix(self) -> np.ndarray:
        vectors = self._column("vector")
        flat = vectors.combine_chunks().flatten()
        if vectors.null_count or flat.null_count:
            raise self.damaged("empty (null) ids or vectors")
        matrix = np.asarray(flat.to_numpy(zero_copy_only=False), np.float32)
        if matrix.size != self.rows * self.dim or not np.all(np.isfinite(matrix)):
            raise self.damaged("values that are not finite numbers")
        return matrix.reshape(self.rows, self.dim)


HEADER_READERS = {(1, 0): np.lib.format.read_array_header_1_0,
                  (2, 0): np.lib.format.read_array_header_2_0}


class MatrixCache:
    """Decoded vector matrices kept as .npy files in the cache folder and memory-mapped
    by later readers: decoding Parquet's lists costs about half a second at 70,000 rows,
    mapping a file nothing. The cache folder may come from a stranger, so a file is used
    only if its identity (size, times, inode) is the one recorded when this machine wrote
    it, for the artifact digest the manifest names; anything else is decoded again."""

    def __init__(self, folder: Path, digests) -> None:
        self.folder, self.digests = folder, digests

    @staticmethod
    def _key(name: str) -> str:
        return f"decoded:{name}"  # one entry an artifact: its value says which digest

    def _path(self, name: str, digest: str) -> Path:
        return self.folder / f"decoded-{Path(name).stem}-{digest[:32]}.npy"

    def load(self, name: str, digest: str, rows: int, dim: int) -> np.ndarray | None:
        from .io import open_regular

        path = self._path(name, digest)
        try:
            with os.fdopen(open_regular(path, follow_links=False), "rb") as handle:
                if self.digests.get(self._key(name), os.fstat(handle.fileno())) != digest:
                    return None
                read_header = HEADER_READERS.get(np.lib.format.read_magic(handle))
                if read_header is None:
                    return None
                header = read_header(handle)  # (a literal, never a pickle)
                if header != ((rows, dim), False, np.dtype("<f4")) or not rows * dim:
                    return None
                return np.memmap(handle, np.float32, "r", handle.tell(), (rows, dim))
        except (OSError, ValueError):  # absent, a link, a FIFO, not a .npy: decode again
            return None

    def save(self, name: str, digest: str, matrix: np.ndarray) -> None:
        from .io import write_atomic

        if not matrix.size:
            return
        path = self._path(name, digest)
        buffer = io.BytesIO()
        np.lib.format.write_array(buffer, np.ascontiguousarray(matrix, "<f4"),
                                  allow_pickle=False)
        try:  # a cache is a convenience: a read-only folder must not fail the reader
            self.folder.mkdir(parents=True, exist_ok=True)
            for stale in self.folder.glob(f"decoded-{Path(name).stem}-*.npy"):
                stale.unlink(missing_ok=True)  # (a reader mapping it keeps its pages)
            write_atomic(path, buffer.getvalue())
            self.digests.put(self._key(name), os.lstat(path), digest)
            self.digests.save()
        except OSError:
            pass


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
    from .parquet import write_parquet

    write_parquet(path, vectors_table(ids, matrix, model_id, artifact), dictionary=False)
