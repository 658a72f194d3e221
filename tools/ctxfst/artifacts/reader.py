"""The readers' side of a build: every artifact a reader opens is first checked against
the build's manifest.json (its size always, its sha256 unless the file is known unchanged
since it was last verified), then parsed with the columns and types the reader uses
checked. A half-published, swapped, damaged or hostile build folder is a clear error that
names the file (exit 1 in the commands), never a traceback and never an answer read from
the wrong data."""

from __future__ import annotations

import errno
import hashlib
import itertools
import json
import os
import time
from pathlib import Path
from typing import Any

from ..files import changed_lately, file_stamp, is_real_folder
from .io import FileTooLarge, is_sha256, read_regular
from .layout import CURRENT, MANIFEST, PUBLISHED, is_version_target

REBUILD = "run `doit clean`, then run `doit`"  # plain `doit` trusts build/ as it is
ARTIFACT_DIGESTS = "artifacts.json"  # in the cache folder: verified artifacts by identity


# The columns readers use of the compiler's tables, in the types it writes them.
CHUNK_NULLABLE = frozenset({"context", "content", "document_title"})


def chunk_columns() -> dict[str, Any]:
    import pyarrow as pa

    return {"chunk_id": pa.string(), "source": pa.string(), "context": pa.string(),
            "content": pa.string(), "tags": pa.list_(pa.string()),
            "entities": pa.list_(pa.string()), "document_title": pa.string(),
            "line_start": pa.int32(), "line_end": pa.int32()}


def entity_columns() -> dict[str, Any]:
    import pyarrow as pa

    return {"entity_id": pa.string(), "name": pa.string(), "type": pa.string(),
            "aliases": pa.list_(pa.string()), "representation": pa.string()}


class ArtifactError(ValueError):
    """A build artifact that is missing, not the file the manifest names, or unreadable."""


# Far above any manifest or cache file a build writes; a sparse 1 TB file is refused
# before it is read.
MAX_METADATA_BYTES = 1 << 30


def read_plain_file(path: Path, limit: int = MAX_METADATA_BYTES
                    ) -> tuple[bytes, os.stat_result]:
    """A regular file's bytes and the stat of what was read: never through a link (as the
    last part of the path), never a FIFO or device, never more than limit bytes."""
    return read_regular(path, limit, follow_links=False)


def parse_json(data: bytes) -> Any:
    """JSON text; ValueError for anything that is not (nesting too deep included)."""
    try:
        return json.loads(data)
    except RecursionError:  # nested deeper than Python's stack: not a file we wrote
        raise ValueError("nested too deeply") from None


class DigestCache:
    """sha256 of files remembered by their file_stamp (size, mtime, ctime, inode), in one
    data-only JSON file whose entries are checked when used (a malformed one is a miss,
    and is not written back once its file is hashed again), so a reader
    hashes only files changed since it last did. Sources (which editors write at any time)
    pass racy_ns=RACY_NS; artifacts, written under the build lock, need not. Without a
    path it remembers nothing; a cache that cannot be written only makes later checks
    slower."""

    def __init__(self, path: Path | None, racy_ns: int = 0) -> None:
        from .cache import caches_disabled

        self.racy_ns = racy_ns
        self.path = path = None if caches_disabled() else path
        self.entries: dict[str, list] = {}
        if path is not None:
            try:
                data = parse_json(read_plain_file(path)[0])
            except (OSError, ValueError):
                data = {}
            if isinstance(data, dict):
                self.entries = data  # (each entry is checked when a file asks for it)
        self._loaded = dict(self.entries)
        self._checked: set[str] = set()  # keys whose entry is known well-formed

    def get(self, key: str, info: os.stat_result) -> str | None:
        entry = self.entries.get(key)
        if type(entry) is list and len(entry) == 5 and entry[0] == info.st_size \
                and entry[1] == info.st_mtime_ns and entry[2] == info.st_ctime_ns \
                and entry[3] == info.st_ino and (key in self._checked
                                                 or _valid_entry(entry)):
            self._checked.add(key)
            return entry[4]  # (file_stamp(), compared without making a tuple per file)
        return None

    def put(self, key: str, info: os.stat_result, digest: str) -> None:
        # A file changed in the last moments may change again within the same clock tick,
        # keeping its identity (git's "racy" entries): with racy_ns, hash it again next time.
        if changed_lately(info, time.time_ns(), self.racy_ns):
            self.entries.pop(key, None)
            return
        self.entries[key] = [*file_stamp(info), digest]
        self._checked.add(key)

    def sha256(self, key: str, path: Path) -> str:
        """path's sha256, hashed only when its identity changed since it last was (a file
        that changes while it is hashed is not remembered)."""
        return self.sha256_and_size(key, path)[0]

    def sha256_and_size(self, key: str, path: Path | str, info: os.stat_result | None = None,
                        limit: int | None = None) -> tuple[str, int]:
        """sha256(), and the size of the bytes it is of (info: the file's stat, when the
        caller took it already: a file changed since is hashed as it is now, and not
        remembered)."""
        from .io import sha256_file_and_size

        info = info or os.stat(path)
        digest = self.get(key, info)
        if digest is not None:
            return digest, info.st_size
        digest, size = sha256_file_and_size(path, limit)
        if file_stamp(os.stat(path)) == file_stamp(info):
            self.put(key, info, digest)
        return digest, size

    def keep_only(self, keys: set[str]) -> None:
        self.entries = {key: value for key, value in self.entries.items() if key in keys}

    def save(self) -> None:
        """Write the entries when one was added or changed. Entries only dropped (racy
        files, deleted ones) are not worth a write: a dropped entry's identity is no
        longer any file's, so the copy on disk misses for it as well."""
        if self.path is None or all(self._loaded.get(key) == value
                                    for key, value in self.entries.items()):
            return
        from .io import write_json

        try:
            write_json(self.path, {key: value for key, value in self.entries.items()
                                   if key in self._checked or _valid_entry(value)},
                       compact=True)
            self._loaded = dict(self.entries)
        except OSError:
            pass


def _valid_entry(value: Any) -> bool:
    return (isinstance(value, list) and len(value) == 5
            and list(map(type, value[:4])) == _FOUR_INTS and min(value[:4]) >= 0
            and is_sha256(value[4]))


_FOUR_INTS = [int] * 4


def published_folder(build_dir: Path) -> Path:
    """The folder of the build that build/ names now: build/.published/<id>, through the
    link build/current that publishing switches, or build/ itself where there is no such
    link (nothing published yet, a copy of build/ made through the links). Resolved once,
    so that every file a reader opens after is of that one build. ValueError for a
    build/current that is not a link ctxfst makes (a stranger's link is not followed)."""
    link = build_dir / CURRENT
    try:
        target = os.readlink(link)
    except FileNotFoundError:
        return build_dir
    except OSError as error:
        if error.errno == errno.EINVAL:  # a plain file or folder: a copy, not ctxfst's link
            return build_dir
        raise ValueError(f"{link}: unreadable ({error.strerror or error})") from None
    if not is_version_target(target):
        raise ValueError(f"{link} links to {target}, not to a build ctxfst published")
    folder = build_dir / target
    for path in (build_dir / PUBLISHED, folder):
        if not is_real_folder(path):
            raise ValueError(f"{link} links to {target}, which is not a folder of "
                             "published artifacts")
    return folder


def read_manifest(build_dir: Path) -> dict[str, Any] | None:
    """The manifest.json of the build published in build_dir (None when nothing was
    published); ValueError when it is unreadable or not a manifest."""
    return _read_manifest_in(published_folder(build_dir), build_dir)


def _open_published(build_dir: Path, retries: int = 2
                    ) -> tuple[Path, dict[str, Any] | None]:
    """published_folder() and its manifest (read_manifest()), the link read again when
    the folder it named was removed before its manifest was read (two builds published
    meanwhile)."""
    folder = published_folder(build_dir)
    try:
        manifest = _read_manifest_in(folder, build_dir)
    except ValueError:
        if retries and not os.path.isdir(folder):
            return _open_published(build_dir, retries - 1)
        raise
    if manifest is None and retries and folder != build_dir and not os.path.isdir(folder):
        return _open_published(build_dir, retries - 1)
    return folder, manifest


def _read_manifest_in(folder: Path, build_dir: Path) -> dict[str, Any] | None:
    """A published folder's manifest.json, named as build_dir's in messages (the parts
    readers use are checked: every artifact has a file name, a size and a sha256; every
    input a path)."""
    path = folder / MANIFEST
    if not os.path.lexists(path):
        return None
    try:
        manifest = parse_json(read_plain_file(path)[0])
        problem = _manifest_problem(manifest)
        if problem:
            raise ValueError(f"not a ctxfst manifest: {problem}")
    except (OSError, ValueError) as error:
        raise ValueError(f"{build_dir / MANIFEST}: unreadable ({error})") from None
    return manifest


def _manifest_problem(manifest: Any) -> str | None:
    if not isinstance(manifest, dict):
        return "not an object"
    artifacts, inputs = manifest.get("artifacts"), manifest.get("inputs", [])
    if not isinstance(artifacts, list) or not isinstance(inputs, list):
        return "`artifacts` and `inputs` must be lists"
    for number, item in enumerate(artifacts, 1):
        if not (isinstance(item, dict) and isinstance(item.get("path"), str)
                and _is_file_name(item["path"]) and type(item.get("bytes")) is int
                and isinstance(item.get("sha256"), str)):
            return f"artifact #{number} needs a file name `path`, `bytes` and `sha256`"
    for number, item in enumerate(inputs, 1):
        if not (isinstance(item, dict) and isinstance(item.get("path"), str)):
            return f"input #{number} needs a `path`"
    return None


def _is_file_name(name: str) -> bool:
    return name not in ("", ".", "..") and "/" not in name and "\\" not in name \
        and "\0" not in name


class BuildArtifacts:
    """A published build folder, read through its manifest. Open it with the names a
    reader needs (missing ones are named together); every read is checked first. It reads
    the one build published when it was opened, even when another is published meanwhile
    (each published folder stays while it is current and while the next one is)."""

    def __init__(self, build_dir: Path, names: list[str],
                 cache_dir: Path | None = None) -> None:
        self.build_dir = build_dir
        try:
            self.folder, manifest = _open_published(build_dir)
        except ValueError as error:
            raise ArtifactError(f"{error}: {REBUILD}") from None
        missing = [name for name in names if not os.path.lexists(self.folder / name)]
        if missing:
            raise ArtifactError(f"{', '.join(missing)} missing in {build_dir}: run `doit`")
        if manifest is None:
            raise ArtifactError(f"{build_dir / MANIFEST} missing (a build that was "
                                f"never finished or published): {REBUILD}")
        self.manifest = manifest
        self.recorded = {item["path"]: item for item in manifest["artifacts"]}
        for name in names:
            if name not in self.recorded:
                raise ArtifactError(f"{build_dir / name} is not in the build's manifest.json "
                                    f"(made by another version, or not by ctxfst): {REBUILD}")
        self.cache_dir = cache_dir
        self._digests = DigestCache(cache_dir / ARTIFACT_DIGESTS if cache_dir else None)

    def path(self, name: str) -> Path:
        """The artifact's fixed name in the build folder (what messages name)."""
        return self.build_dir / name

    def read_extra(self, name: str, limit: int = MAX_METADATA_BYTES) -> bytes:
        """A file published with the build but not in its manifest (run_results.json),
        from the same folder as the artifacts; OSError when it cannot be read."""
        return read_plain_file(self.folder / name, limit)[0]

    def digest(self, name: str) -> str:
        """The artifact's sha256, as the manifest records it (and reads check)."""
        return self.recorded[name]["sha256"]

    def read(self, name: str) -> bytes:
        """The artifact's bytes, once they are known to be the ones the manifest names.
        What is checked is what was read (one open file), so a build publishing at the
        same time cannot slip another file in between."""
        path, entry = self.path(name), self.recorded.get(name)
        if entry is None:
            raise ArtifactError(f"{path} is not in the build's manifest.json: {REBUILD}")
        try:
            data, info = read_plain_file(self.folder / name, entry["bytes"])
        except FileTooLarge:
            raise self._mismatch(path, f"over the {entry['bytes']} bytes the manifest "
                                       "records") from None
        except FileNotFoundError:
            raise ArtifactError(f"{name} missing in {self.build_dir}: run `doit`") from None
        except OSError as error:
            raise ArtifactError(f"{path}: unreadable ({error}): {REBUILD}") from None
        if len(data) != entry["bytes"] or info.st_size != entry["bytes"]:
            raise self._mismatch(path, f"{len(data)} bytes, the manifest records "
                                       f"{entry['bytes']}")
        key = str(path.absolute())
        if self._digests.get(key, info) != entry["sha256"]:
            digest = hashlib.sha256(data).hexdigest()
            if digest != entry["sha256"]:
                raise self._mismatch(path, "its sha256 is not the one the manifest records")
            self._digests.put(key, info, digest)
            self._digests.save()
        return data

    @staticmethod
    def _mismatch(path: Path, why: str) -> ArtifactError:
        return ArtifactError(f"{path} does not match the build's manifest ({why}): the build "
                             f"folder was changed after the build, or a build was cut short; "
                             f"{REBUILD}")

    def json(self, name: str) -> Any:
        try:
            return parse_json(self.read(name))
        except ArtifactError:
            raise
        except ValueError as error:
            raise ArtifactError(f"{self.path(name)}: not JSON ({error}): {REBUILD}") from None

    def parquet(self, name: str, columns: dict[str, Any], nullable: frozenset[str] = frozenset(),
                read_columns: list[str] | None = None):
        """The artifact as an Arrow table whose `columns` have exactly the given Arrow types
        and hold no nulls, except those named in `nullable` ("column" or "column.field" of
        a struct inside a list)."""
        return self.parquet_file(name, columns, nullable).read(read_columns)

    def parquet_file(self, name: str, columns: dict[str, Any],
                     nullable: frozenset[str] = frozenset()) -> CheckedParquet:
        """The artifact opened for reading some columns or row groups at a time (a query
        materialises only its hits); each read is checked as parquet() checks a table."""
        import pyarrow.parquet as pq

        from .arrays import arrow_reader

        data = self.read(name)
        try:
            file = pq.ParquetFile(arrow_reader(data))
            schema = file.schema_arrow
        except Exception as error:  # whatever the Parquet reader makes of foreign bytes
            raise self._unreadable(name, error) from None
        problem = schema_problem(schema, columns)
        if problem:
            raise ArtifactError(f"{self.path(name)}: {problem}: {REBUILD}")
        return CheckedParquet(self, name, file, columns, nullable)

    def _unreadable(self, name: str, error: Exception) -> ArtifactError:
        return ArtifactError(f"{self.path(name)}: not a readable Parquet table "
                             f"({type(error).__name__}: {error}): {REBUILD}")

    def vectors(self, name: str):
        """(ids, matrix, model id) of a vectors artifact. With a cache folder the matrix,
        once decoded, is kept there and memory-mapped by later readers (MatrixCache)."""
        from .vectors import MatrixCache, VectorFile

        data = self.read(name)
        try:
            vectors = VectorFile(self.path(name), data)
            ids = vectors.ids()
            # (CTXFST_NO_CACHE leaves the digests without a file: no decoded copies either)
            cache = MatrixCache(self.cache_dir, self._digests) \
                if self.cache_dir and self._digests.path else None
            matrix = cache.load(name, self.digest(name), len(ids), vectors.dim) \
                if cache else None
            if matrix is None:
                matrix = vectors.matrix()
                if cache:
                    cache.save(name, self.digest(name), matrix)
        except ValueError as error:
            raise ArtifactError(f"{error}: {REBUILD}") from None
        return ids, matrix, vectors.model_id


class CheckedParquet:
    """A Parquet artifact whose schema was checked; reads check their columns' nulls."""

    def __init__(self, build: BuildArtifacts, name: str, file, columns: dict[str, Any],
                 nullable: frozenset[str]) -> None:
        self.build, self.name, self.file = build, name, file
        self.columns, self.nullable = columns, nullable
        sizes = (file.metadata.row_group(i).num_rows for i in range(file.num_row_groups))
        self.group_starts = [0, *itertools.accumulate(sizes)]  # each group's first row, the end

    def read(self, columns: list[str] | None = None):
        return self._checked(lambda: self.file.read(columns=columns), columns)

    def read_row_group(self, group: int, columns: list[str] | None = None):
        return self._checked(lambda: self.file.read_row_group(group, columns=columns), columns)

    def _checked(self, read, columns: list[str] | None):
        absent = [c for c in columns or () if c not in self.file.schema_arrow.names]
        if absent:
            raise ArtifactError(f"{self.build.path(self.name)}: no column `{absent[0]}`: "
                                f"{REBUILD}")
        try:
            table = read()
        except Exception as error:  # damaged pages behind a readable footer
            raise self.build._unreadable(self.name, error) from None
        wanted = {c: kind for c, kind in self.columns.items()
                  if columns is None or c in columns}
        problem = column_problem(table, wanted, self.nullable)
        if problem:
            raise ArtifactError(f"{self.build.path(self.name)}: {problem}: {REBUILD}")
        return table


def schema_problem(schema, columns: dict[str, Any]) -> str | None:
    """What keeps an Arrow schema from having these columns in exactly these types."""
    for column, kind in columns.items():
        if column not in schema.names:
            return f"no column `{column}`"
        actual = schema.field(column).type
        if not actual.equals(kind):
            return f"column `{column}` is {actual}, not {kind}"
    return None


def column_problem(table, columns: dict[str, Any], nullable: frozenset[str] = frozenset()
                   ) -> str | None:
    """What keeps a table from having these typed columns without nulls, or None."""
    problem = schema_problem(table.schema, columns)
    if problem:
        return problem
    for column in columns:
        for chunk in table.column(column).chunks:
            where = _null_in(chunk, column, nullable)
            if where:
                return f"column `{where}` has empty (null) values"
    return None


def _null_in(array, name: str, nullable: frozenset[str]) -> str | None:
    import pyarrow as pa

    if name not in nullable and array.null_count:
        return name
    kind = array.type
    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or \
            pa.types.is_fixed_size_list(kind):
        return _null_in(array.flatten(), name, nullable)
    if pa.types.is_struct(kind):
        for index in range(kind.num_fields):
            child = f"{name}.{kind.field(index).name}"
            where = _null_in(array.field(index), child, nullable)
            if where:
                return where
    return None
