"""Content-addressed caches that outlive `doit clean` (they live in .ctxfst/cache)."""

from __future__ import annotations

import hashlib
import pickle
import sqlite3
from pathlib import Path
from typing import Any

from .. import __version__

# Bump when the parsed-document data changes shape.
PARSE_FORMAT = "3"  # 2: chunk bodies carry their text offset; 3: SKILL.md tenant checked


def connect(path: Path, schema: str) -> sqlite3.Connection:
    """Open (or create) a cache database. A corrupt one is discarded and started anew:
    a cache holds nothing that cannot be computed again."""
    path.parent.mkdir(parents=True, exist_ok=True)
    for attempt in (1, 2):
        try:
            db = sqlite3.connect(path)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute(schema)
            return db
        except sqlite3.DatabaseError:
            if attempt == 2:
                raise
            for suffix in ("", "-wal", "-shm"):
                Path(f"{path}{suffix}").unlink(missing_ok=True)
    raise AssertionError("unreachable")


class ParseCache:
    """(path, exact file bytes, parser version) -> the parsed document's syntax pass.

    Only an edited file is parsed again; the rest come back from here.
    """

    def __init__(self, path: Path) -> None:
        self.db = connect(path, "CREATE TABLE IF NOT EXISTS parsed (key TEXT PRIMARY KEY, "
                                "value BLOB NOT NULL)")
        self.hits = 0
        self.misses = 0

    @staticmethod
    def key(path: str, data: bytes) -> str:
        digest = hashlib.sha256(f"{__version__}\0{PARSE_FORMAT}\0{path}\0".encode())
        digest.update(data)
        return digest.hexdigest()

    def get_many(self, keys: list[str]) -> dict[str, Any]:
        found: dict[str, Any] = {}
        for start in range(0, len(keys), 500):
            batch = keys[start:start + 500]
            marks = ",".join("?" * len(batch))
            for key, blob in self.db.execute(
                    f"SELECT key, value FROM parsed WHERE key IN ({marks})", batch):
                found[key] = pickle.loads(blob)
        self.hits += len(found)
        self.misses += len(keys) - len(found)
        return found

    def put_many(self, items: dict[str, Any]) -> None:
        with self.db:
            self.db.executemany("INSERT OR REPLACE INTO parsed VALUES (?, ?)",
                                [(key, pickle.dumps(value, protocol=5))
                                 for key, value in items.items()])

    def close(self) -> None:
        self.db.close()
