"""The link step's tables: every unit's declarations, chunk ids and references as rows of
the unit store (units.sqlite), indexed by id, so that a build re-links only the ids its
changed documents declare or name, instead of merging 10,000 summaries again.

Each row carries its document's place in the knowledge base's order (`place`, a byte
string that sorts as the documents do), so "the first declaration wins" is the row with
the least (place, pos). The answers are those of document.link.link() over every
summary; an edit's changes to the view are the differences, before and after, at the
ids it touched. The rows are plain data of fixed column types (STRICT tables); the JSON
they hold is checked as it is read, and a row that is not what this module writes
raises ValueError (the build then starts its units over).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Iterator, Mapping
from json.encoder import encode_basestring
from typing import Any

from ..artifacts.io import compact_json, compact_json_text
from ..document.link import (
    Declaration,
    Link,
    Position,
    Summary,
    View,
    _strings,
    declared,
    dump_ok,
    find_cycles,
    merged_declaration,
    tail,
)

TABLES = """
CREATE TABLE IF NOT EXISTS link_entities (path TEXT NOT NULL, pos INTEGER NOT NULL,
  place BLOB NOT NULL, idx INTEGER NOT NULL, id TEXT NOT NULL, name TEXT NOT NULL,
  type TEXT NOT NULL, tail TEXT NOT NULL, dump TEXT NOT NULL, PRIMARY KEY (path, pos))
  STRICT, WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS link_entities_id ON link_entities (id, place, pos);
CREATE INDEX IF NOT EXISTS link_entities_tail ON link_entities (tail, place, pos);
CREATE INDEX IF NOT EXISTS link_entities_dump ON link_entities (dump);
CREATE INDEX IF NOT EXISTS link_entities_declared ON link_entities (id, name, type);
CREATE TABLE IF NOT EXISTS link_chunks (path TEXT NOT NULL, pos INTEGER NOT NULL,
  place BLOB NOT NULL, idx INTEGER NOT NULL, id TEXT NOT NULL, needs TEXT NOT NULL,
  PRIMARY KEY (path, pos)) STRICT, WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS link_chunks_id ON link_chunks (id, place, pos);
CREATE TABLE IF NOT EXISTS link_refs (path TEXT NOT NULL, ref TEXT NOT NULL,
  tail TEXT NOT NULL, PRIMARY KEY (path, ref)) STRICT, WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS link_refs_ref ON link_refs (ref);
CREATE INDEX IF NOT EXISTS link_refs_tail ON link_refs (tail);
CREATE TABLE IF NOT EXISTS link_dumps (key TEXT PRIMARY KEY, text BLOB NOT NULL) STRICT;
CREATE TABLE IF NOT EXISTS link_catalog (id TEXT PRIMARY KEY, row TEXT NOT NULL) STRICT;
"""
_TABLE_NAMES = ("link_entities", "link_chunks", "link_refs", "link_dumps", "link_catalog")
_BATCH = 500  # ids per IN (...) query


def _batches(items: Iterable[str]) -> Iterator[list[str]]:
    items = sorted(items)
    for start in range(0, len(items), _BATCH):
        yield items[start:start + _BATCH]


class LinkIndex:
    """The tables, read and written through the unit store's connection (its writes are
    committed with the units, in one transaction)."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db
        self._dumps: dict[str, dict] = {}

    def clear(self) -> None:
        for name in _TABLE_NAMES:
            self.db.execute(f"DELETE FROM {name}")
        self._dumps.clear()

    def replace(self, items: list[tuple[str, bytes, Summary | None]], known: set[str]
                ) -> None:
        """Put each (path, place, summary)'s rows in place of the path's old ones (a
        summary None: it has none); only paths in `known` can have old rows (a first
        build deletes nothing), and the rows are written together."""
        old_keys: set[str] = set()
        for path, _, _ in items:
            if path in known:
                old_keys.update(key for (key,) in self.db.execute(
                    "SELECT dump FROM link_entities WHERE path = ?", (path,)))
                for name in _TABLE_NAMES[:3]:
                    self.db.execute(f"DELETE FROM {name} WHERE path = ?", (path,))
        written = [(path, place, summary) for path, place, summary in items
                   if summary is not None]
        self.db.executemany(
            "INSERT INTO link_entities VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [(path, pos, place, item[0], item[1], item[2], item[3], tail(item[1]), key)
             for path, place, summary in written
             for pos, (item, key) in enumerate(zip(summary.entities, summary.dump_keys(),
                                                   strict=True))])
        dumps = {key: dump for _, _, summary in written for key, dump in summary.dumps().items()}
        self.db.executemany("INSERT OR IGNORE INTO link_dumps VALUES (?, ?)",
                            [(key, compact_json(dump)) for key, dump in sorted(dumps.items())])
        self.db.executemany(
            "INSERT INTO link_chunks VALUES (?, ?, ?, ?, ?, ?)",
            [(path, pos, place, index, chunk_id, _ids_json(needs))
             for path, place, summary in written
             for pos, (index, chunk_id, needs) in enumerate(summary.chunks)])
        self.db.executemany("INSERT INTO link_refs VALUES (?, ?, ?)",
                            [(path, ref, tail(ref)) for path, _, summary in written
                             for ref in summary.refs])
        for key in sorted(old_keys - dumps.keys()):  # a declaration no document makes now
            self.db.execute("DELETE FROM link_dumps WHERE key = ? AND NOT EXISTS (SELECT 1 "
                            "FROM link_entities WHERE dump = ?)", (key, key))
            self._dumps.pop(key, None)

    def dump(self, key: str) -> dict:
        """A kept declaration by its key, checked (dump_ok)."""
        self.load_dumps([key])
        return self._dumps[key]

    def load_dumps(self, keys: Iterable[str]) -> None:
        """Read these kept declarations (ValueError for one not kept, or not as kept)."""
        keys = set(keys)
        self._load_dumps(keys)
        missing = keys - self._dumps.keys()
        if missing:
            raise ValueError(f"a declaration that is not kept: {sorted(missing)[0]}")

    def _load_dumps(self, keys: Iterable[str] | None) -> None:
        if keys is None:
            rows = self.db.execute("SELECT key, text FROM link_dumps")
        else:
            rows = [row for batch in _batches(set(keys) - self._dumps.keys())
                    for row in self.db.execute(
                        f"SELECT key, text FROM link_dumps WHERE key IN "
                        f"({','.join('?' * len(batch))})", batch)]
        for key, text in rows:
            dump = _json(text)
            if not dump_ok(key, dump, text):
                raise ValueError(f"a kept declaration that is not what was kept: {key}")
            self._dumps[key] = dump

    def summaries(self, paths: Iterable[str] | None = None) -> dict[str, Summary]:
        """The summaries the rows hold, by path (all of them with None). A path with no
        rows has an empty summary."""
        wanted = None if paths is None else sorted(set(paths))
        found: dict[str, Summary] = {path: Summary(path) for path in wanted or ()}

        def rows(sql: str, order: str):
            if wanted is None:
                return self.db.execute(f"{sql} ORDER BY {order}")
            return (row for batch in _batches(wanted) for row in self.db.execute(
                f"{sql} WHERE path IN ({','.join('?' * len(batch))}) ORDER BY {order}",
                batch))

        entities = list(rows("SELECT path, idx, id, name, type, dump FROM link_entities",
                             "path, pos"))
        self._load_dumps(None if wanted is None else {row[5] for row in entities})
        for path, index, entity_id, name, entity_type, key in entities:
            summary = found.setdefault(path, Summary(path))
            dump = self._dumps.get(key)
            if dump is None or (dump["id"], dump["name"], dump["type"]) != (
                    entity_id, name, entity_type):
                raise ValueError(f"{path}: a declaration row that does not match its dump")
            summary.entities.append([index, entity_id, name, entity_type, dump])
            if summary.keys is None:
                summary.keys = []
            summary.keys.append(key)
        for path, index, chunk_id, needs in rows(
                "SELECT path, idx, id, needs FROM link_chunks", "path, pos"):
            found.setdefault(path, Summary(path)).chunks.append(
                [index, chunk_id, _needs(needs)])
        for path, ref in rows("SELECT path, ref FROM link_refs", "path, ref"):
            found.setdefault(path, Summary(path)).refs.append(ref)
        for summary in found.values():
            if summary.keys is None:
                summary.keys = []
        return found

    # -- what every document is checked against, answered from the rows --------------

    def first_types(self, ids: Iterable[str]) -> dict[str, str]:
        """Each declared id of these -> the type of its first declaration."""
        return self._first("type", "id", ids)

    def first_of_tails(self, tails: Iterable[str]) -> dict[str, str]:
        """Each tail of these that a declared id has -> the first declared id with it."""
        return self._first("id", "tail", tails)

    def _first(self, column: str, key: str, values: Iterable[str]) -> dict[str, str]:
        """value -> `column` of the first declaration whose `key` is the value."""
        found: dict[str, str] = {}
        for value in sorted(set(values)):
            row = self.db.execute(f"SELECT {column} FROM link_entities WHERE {key} = ? "
                                  "ORDER BY place, pos LIMIT 1", (value,)).fetchone()
            if row is not None:
                found[value] = row[0]
        return found

    def chunk_ids(self, ids: Iterable[str]) -> set[str]:
        """Those of these ids that a document declares as a chunk id."""
        found: set[str] = set()
        for batch in _batches(set(ids)):
            found.update(chunk_id for (chunk_id,) in self.db.execute(
                f"SELECT DISTINCT id FROM link_chunks WHERE id IN "
                f"({','.join('?' * len(batch))})", batch))
        return found

    def standing(self, ids: set[str], chunk_ids: set[str]) -> tuple:
        """What the view says of these entity ids (their types and their tails'
        suggestions) and of these chunk ids, for comparing before and after a change."""
        return (self.first_types(ids), self.first_of_tails(tail(i) for i in ids),
                self.chunk_ids(chunk_ids))

    def referring(self, ids: set[str], tails: set[str]) -> set[str]:
        """The documents naming one of these ids, or an id with one of these tails."""
        found: set[str] = set()
        for column, values in (("ref", ids), ("tail", tails)):
            for batch in _batches(values):
                found.update(path for (path,) in self.db.execute(
                    f"SELECT DISTINCT path FROM link_refs WHERE {column} IN "
                    f"({','.join('?' * len(batch))})", batch))
        return found

    def view(self, chunks: _FirstChunks | None = None) -> View:
        """The view, answered from the rows (chunk ids: those with a first place)."""
        # (`is None`: the truth of a mapping is its length, a walk of every chunk id)
        return View(_FirstDeclared(self, "type", "id"),
                    _FirstChunks(self) if chunks is None else chunks,
                    _FirstDeclared(self, "id", "tail"))

    # -- what spans documents ----------------------------------------------------------

    def conflicted(self, ids: set[str], chunk_ids: set[str]) -> bool:
        """Whether one of these entity ids is declared otherwise somewhere (CTX202), or
        one of these chunk ids twice (CTX203)."""
        for entity_id in sorted(ids):
            # The first and last (name, type) in the index differ exactly when two
            # declarations do: two seeks, however many documents declare the id.
            first, last = (self.db.execute(
                "SELECT name, type FROM link_entities INDEXED BY link_entities_declared "
                f"WHERE id = ? ORDER BY name {way}, type {way} LIMIT 1", (entity_id,)
            ).fetchone() for way in ("ASC", "DESC"))
            if first != last:
                return True
        for chunk_id in sorted(chunk_ids):
            if len(self.db.execute("SELECT 1 FROM link_chunks WHERE id = ? LIMIT 2",
                                   (chunk_id,)).fetchall()) > 1:
                return True
        return False

    def cycles_through(self, chunk_ids: set[str]) -> bool:
        """Whether a dependency cycle passes through one of these chunk ids."""
        places = _FirstChunks(self)
        return bool(find_cycles(places.needs, places, lambda path, key: (0, 0), chunk_ids))

    def catalog_of(self, ids: set[str], position: Position
                   ) -> tuple[dict[str, list[Declaration]], dict[str, dict]]:
        """These entity ids' kept declarations and merged declarations (as link() makes
        them), from their rows alone."""
        rows = [row for batch in _batches(ids) for row in self.db.execute(
            "SELECT path, idx, id, name, type, dump, place, pos FROM link_entities WHERE "
            f"id IN ({','.join('?' * len(batch))})", batch)]
        rows.sort(key=lambda row: (row[6], row[7]))
        _, declarations, keys, _ = declared((row[:6] for row in rows), position)
        self._load_dumps({key for found in keys.values() for key in found})
        merged = {entity_id: merged_declaration(
                      [self._dumps[key] for key in dict.fromkeys(found)])  # (a repeat: once)
                  for entity_id, found in keys.items()}
        return declarations, merged

    def catalog_rows_of(self, ids: set[str]) -> dict[str, dict]:
        """The kept catalog rows of these ids that have one (each a JSON object naming
        its id)."""
        found: dict[str, dict] = {}
        for batch in _batches(ids):
            for entity_id, text in self.db.execute(
                    f"SELECT id, row FROM link_catalog WHERE id IN ({','.join('?' * len(batch))})",
                    batch):
                row = _catalog_row(entity_id, text)
                if row is not None:
                    found[entity_id] = row
        return found

    def declarations_of(self, entity_id: str, dump: str) -> tuple[int, int]:
        """How many declarations of this id there are, and how many are this dump (its
        key names the id too): both counted in an index."""
        count = self.db.execute("SELECT COUNT(*) FROM link_entities WHERE id = ?",
                                (entity_id,)).fetchone()[0]
        alike = self.db.execute("SELECT COUNT(*) FROM link_entities WHERE dump = ?",
                                (dump,)).fetchone()[0]
        return count, alike

    def put_catalog(self, rows: dict[str, dict | None]) -> None:
        """Keep these entities' catalog rows (None: no longer declared)."""
        self.db.executemany("DELETE FROM link_catalog WHERE id = ?",
                            [(entity_id,) for entity_id in sorted(rows)])
        self.db.executemany("INSERT INTO link_catalog VALUES (?, ?)",
                            [(entity_id, compact_json_text(row))
                             for entity_id, row in sorted(rows.items()) if row is not None])

    def catalog_count(self) -> int:
        """The kept catalog rows (the link step's mark records how many it left)."""
        return self.db.execute("SELECT COUNT(*) FROM link_catalog").fetchone()[0]

    def clear_catalog(self) -> None:
        self.db.execute("DELETE FROM link_catalog")

    def catalog(self) -> list[dict]:
        """The kept catalog rows, in id order (each a JSON object naming its id)."""
        rows = []
        for entity_id, text in self.db.execute("SELECT id, row FROM link_catalog ORDER BY id"):
            row = _catalog_row(entity_id, text)
            if row is None:
                raise ValueError(f"a kept catalog row that is not {entity_id}'s")
            rows.append(row)
        return rows

    def link(self, diagnostics: list, position: Position) -> Link:
        """The link of the rows, its view answered from them; the catalog made when
        asked for, from every declaration row (in the knowledge base's order)."""

        def catalog() -> tuple[dict[str, list[Declaration]], dict[str, dict]]:
            return self.catalog_of(set(_FirstDeclared(self, "type", "id")), position)

        chunks = _FirstChunks(self)
        return Link(self.view(chunks), diagnostics, chunks, catalog)


def _ids_json(ids: list[str]) -> str:
    """compact_json(ids) as text, from json's own string encoder (70,000 lists, most of
    them empty, in a first build)."""
    return "[" + ",".join(map(encode_basestring, ids)) + "]"


def _catalog_row(entity_id: str, text: Any) -> dict | None:
    """A kept catalog row: a JSON object naming its id; None for anything else."""
    row = _json(text)
    return row if isinstance(row, dict) and row.get("id") == entity_id else None


def _json(text: Any) -> Any:
    try:
        return json.loads(text)
    except (ValueError, TypeError, RecursionError):
        return None


def _needs(text: str) -> list[str]:
    needs = _json(text)
    if not _strings(needs):
        raise ValueError("a chunk row whose dependencies are not a list of ids")
    return needs


class _Remembered(Mapping):
    """A read-only mapping answered by the rows, each key asked for once."""

    def __init__(self, index: LinkIndex) -> None:
        self.index = index
        self.known: dict[str, Any] = {}
        self.missing: set[str] = set()

    def lookup(self, key: str) -> Any:
        raise NotImplementedError

    def __getitem__(self, key: str) -> Any:
        if key in self.known:
            return self.known[key]
        if key in self.missing:
            raise KeyError(key)
        found = self.lookup(key) if isinstance(key, str) else None
        if found is None:
            self.missing.add(key)
            raise KeyError(key)
        self.known[key] = found
        return found

    def __contains__(self, key: object) -> bool:
        try:
            self[key]  # type: ignore[index]
        except KeyError:
            return False
        return True

    def __iter__(self) -> Iterator[str]:
        raise NotImplementedError

    def __len__(self) -> int:
        return sum(1 for _ in self)


class _FirstDeclared(_Remembered):
    """`key` (an entity id, or a tail) -> `column` of the first declaration with it."""

    def __init__(self, index: LinkIndex, column: str, key: str) -> None:
        super().__init__(index)
        self.column, self.key = column, key

    def lookup(self, value: str) -> str | None:
        return self.index._first(self.column, self.key, [value]).get(value)

    def __iter__(self) -> Iterator[str]:
        return (value for (value,) in self.index.db.execute(
            f"SELECT DISTINCT {self.key} FROM link_entities ORDER BY {self.key}"))


class _FirstChunks(_Remembered):
    """chunk id -> where it is first declared; `needs`: chunk id -> its dependencies
    there (what find_cycles walks)."""

    def __init__(self, index: LinkIndex) -> None:
        super().__init__(index)
        self.needs = _Needs(self)

    def lookup(self, key: str) -> tuple[Declaration, list[str]] | None:
        row = self.index.db.execute("SELECT path, idx, needs FROM link_chunks WHERE id = ? "
                                    "ORDER BY place, pos LIMIT 1", (key,)).fetchone()
        return None if row is None else (Declaration(row[0], row[1]), _needs(row[2]))

    def __getitem__(self, key: str) -> Declaration:
        return super().__getitem__(key)[0]

    def __iter__(self) -> Iterator[str]:
        return (chunk_id for (chunk_id,) in self.index.db.execute(
            "SELECT DISTINCT id FROM link_chunks ORDER BY id"))


class _Needs(Mapping):
    def __init__(self, places: _FirstChunks) -> None:
        self.places = places

    def __getitem__(self, key: str) -> list[str]:
        self.places[key]  # (raises KeyError for an id no document declares)
        return self.places.known[key][1]

    def __contains__(self, key: object) -> bool:
        return key in self.places

    def __iter__(self) -> Iterator[str]:
        return iter(self.places)

    def __len__(self) -> int:
        return len(self.places)
