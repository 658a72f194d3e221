"""Content-addressed caches that outlive `doit clean` (they live in .ctxfst/cache).

A knowledge base may come from a stranger with its caches, so they hold plain data only
(never pickle), their rows are checked on read by the code that decodes them, and a
database holding anything but a cache's one table (other tables, views, triggers) is
replaced, never obeyed. CTXFST_NO_CACHE=1 ignores them all.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..version import __version__

# Bump when the parsed-document data changes shape. 2: chunk bodies carry their text
# offset; 3: SKILL.md tenant checked; 4: JSON rows instead of pickle; 5: rows keep the
# YAML events' marks (document/yamlpos.py)
PARSE_FORMAT = "5"
NO_CACHE_ENV = "CTXFST_NO_CACHE"
BUSY_SECONDS = 120  # how long a write waits for another process's (sqlite3's default: 5)
PASSAGES = "passages"  # the unit store's record of content_path files (any folder)
_SQLITE_SIDE_FILES = ("-wal", "-shm", "-journal")
_expected_objects: dict[str, list] = {}


def caches_disabled() -> bool:
    """CTXFST_NO_CACHE=1: read no cache and keep none (a CI job on an untrusted change)."""
    return os.environ.get(NO_CACHE_ENV, "").strip() not in ("", "0")


def _objects(db: sqlite3.Connection) -> list:
    return sorted(db.execute("SELECT type, name, tbl_name, sql FROM sqlite_master"))


def _schema_objects(schema: str) -> list:
    """What sqlite_master holds in a database that `schema` alone created."""
    if schema not in _expected_objects:
        fresh = sqlite3.connect(":memory:")
        fresh.executescript(schema)
        _expected_objects[schema] = _objects(fresh)
        fresh.close()
    return _expected_objects[schema]


def _in_memory(schema: str) -> sqlite3.Connection:
    db = sqlite3.connect(":memory:")
    db.executescript(schema)
    return db


_CACHE_KIB = 128 * 1024


def connect(path: Path, schema: str) -> sqlite3.Connection:
    """Open (or create) a cache database. A corrupt one, or one holding anything but
    `schema` (other tables, views, triggers), is discarded and started anew: a cache
    holds nothing that cannot be computed again. Caches turned off, or a database that
    cannot be opened, give an empty in-memory cache. (Links out of the project in
    .ctxfst/ are refused with the settings, CTX804.)"""
    if caches_disabled():
        return _in_memory(schema)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        for attempt in (1, 2):
            # (a build's stages beside each other write one store: wait for the other)
            db = sqlite3.connect(path, timeout=BUSY_SECONDS)
            try:
                db.execute("PRAGMA trusted_schema=OFF")
                db.execute("PRAGMA journal_mode=WAL")
                # A page cache of up to 128 MiB (SQLite's own is 2 MiB): a first build
                # inserts every document's rows into indexes far larger than that, each
                # insert reading its B-tree's pages again (a third of validate's time
                # at 100,000 documents).
                db.execute(f"PRAGMA cache_size={-_CACHE_KIB}")
                db.executescript(schema)  # (one statement or many)
                if _objects(db) == _schema_objects(schema):
                    return db
                problem = "not a ctxfst cache"
            except sqlite3.DatabaseError as error:
                if busy(error):  # another process writes it: not damaged, not ours now
                    db.close()
                    raise
                problem = str(error)
            db.close()
            if attempt == 2:
                raise sqlite3.DatabaseError(problem)
            discard(path)
    except (OSError, sqlite3.Error) as error:  # a read-only or full disk, say
        return _without(path, schema, str(error))
    raise AssertionError("unreachable")


def busy(error: sqlite3.Error) -> bool:
    """Whether an error says another connection holds the database (it waited
    BUSY_SECONDS), not that the file is damaged."""
    return getattr(error, "sqlite_errorcode", None) in (sqlite3.SQLITE_BUSY,
                                                         sqlite3.SQLITE_LOCKED) \
        or "locked" in str(error)


def discard(path: Path) -> None:
    """Delete a cache database and its side files (it is computed again)."""
    for suffix in ("", *_SQLITE_SIDE_FILES):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


def _without(path: Path, schema: str, why: str) -> sqlite3.Connection:
    sys.stderr.write(f"ctxfst: warning: cache {path} not used ({why}); working without it\n")
    return _in_memory(schema)


class ParseCache:
    """(path, exact file bytes, parser version) -> the parsed document's syntax pass, as
    bytes the caller encodes and decodes (document.syntax_cache: JSON).

    Only an edited file is parsed again; the rest come back from here.
    """

    def __init__(self, path: Path) -> None:
        self.db = connect(path, "CREATE TABLE IF NOT EXISTS parsed (key TEXT PRIMARY KEY, "
                                "value BLOB NOT NULL)")
        try:  # rows of another format are never looked up (the key holds it): drop them
            if self.db.execute("PRAGMA user_version").fetchone()[0] != int(PARSE_FORMAT):
                with self.db:
                    self.db.execute("DELETE FROM parsed")
                    self.db.execute(f"PRAGMA user_version = {int(PARSE_FORMAT)}")
        except sqlite3.Error:
            pass
        self.hits = 0
        self.misses = 0

    @staticmethod
    def key(path: str, data: bytes) -> str:
        digest = hashlib.sha256(f"{__version__}\0{PARSE_FORMAT}\0{path}\0".encode(
            "utf-8", "surrogateescape"))  # (a file name need not be UTF-8)
        digest.update(data)
        return digest.hexdigest()

    def get_many(self, wanted: dict[str, int], decode: Callable[[str, bytes], Any]
                 ) -> dict[str, Any]:
        """Decoded rows for the keys of `wanted` (key -> the most bytes its row may hold).
        A row that is too large, not a blob, or that decode() turns down (None) is a miss."""
        found: dict[str, Any] = {}
        keys = list(wanted)
        try:
            for start in range(0, len(keys), 500):
                batch = keys[start:start + 500]
                marks = ",".join("?" * len(batch))
                # typeof and length read the row header only: a huge row is never loaded.
                rows = self.db.execute(
                    f"SELECT key, value FROM parsed WHERE key IN ({marks}) AND "
                    f"typeof(value) = 'blob' AND length(value) <= ?",
                    [*batch, max(wanted[key] for key in batch)])
                for key, blob in rows:
                    if len(blob) <= wanted[key]:
                        value = decode(key, blob)
                        if value is not None:
                            found[key] = value
        except sqlite3.Error:
            pass  # damaged pages: what was not read is parsed again
        self.hits += len(found)
        self.misses += len(keys) - len(found)
        return found

    def put_many(self, items: dict[str, bytes]) -> None:
        try:
            with self.db:
                self.db.executemany("INSERT OR REPLACE INTO parsed VALUES (?, ?)",
                                    list(items.items()))
        except sqlite3.Error:
            pass  # a read-only or full disk: the cache is a convenience, not a result

    def close(self) -> None:
        self.db.close()


def recorded_passages(store_path: Path) -> list[str]:
    """The content_path files the last build recorded in the unit store (pipeline/units),
    read with a light import: doit loads the task graph on every run. [] when unknown."""
    if caches_disabled() or not store_path.is_file():
        return []
    try:
        db = sqlite3.connect(f"{store_path.resolve().as_uri()}?mode=ro", uri=True)
        try:
            row = db.execute("SELECT value FROM units WHERE key = ? AND "
                             "typeof(value) = 'blob' AND length(value) < ?",
                             (PASSAGES, 64 * 1024 * 1024)).fetchone()
        finally:
            db.close()
        value = json.loads(row[0]) if row else []
    except (sqlite3.Error, ValueError, RecursionError):
        return []
    return [item for item in value if isinstance(item, str)] if isinstance(value, list) else []
