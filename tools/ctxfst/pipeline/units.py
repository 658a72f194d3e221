"""Compilation units: what a build keeps of each document between runs.

A document's unit holds its interface summary (document.link), its diagnostics, its
tenant and, separately, its compiled chunk rows. Units are plain JSON in a SQLite cache
(.ctxfst/cache/units.sqlite), checked on read like every cache (a row of another shape
is a miss, recomputed). The build types and checks only the documents whose bytes
changed, plus those whose references the change touched; every other document is linked
from its summary and keeps its diagnostics.

Why this is exact: a document's diagnostics are a function of its bytes and the view
the link step gives (document.rules.check_document). When the view changes, only the
documents naming a changed id (or an id with a changed suggestion) are checked again;
a document with content_path passages (other files) is always checked again.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..artifacts.cache import connect
from ..artifacts.io import compact_json, compact_json_text, is_sha256
from ..diagnostics import Diagnostic, diagnostics_from_rows
from ..document.link import Summary
from ..document.model import ParsedDocument
from ..version import __version__
from .link_index import TABLES as LINK_TABLES
from .link_index import LinkIndex

UNIT_FORMAT = "7"  # 3: declarations keyed by their text; 4: units and link step as tables;
# 5: each unit keeps the stamp (unit_stamp) of the file it was checked from; 7: the
# documents the last compile compiled from, as a table (compiled_docs)
_SCHEMA = """
CREATE TABLE IF NOT EXISTS units (key TEXT PRIMARY KEY, value BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS unit_docs (path TEXT PRIMARY KEY, place BLOB NOT NULL,
  relative TEXT NOT NULL, sha256 TEXT NOT NULL, volatile INTEGER NOT NULL,
  tenant TEXT NOT NULL, ctxfst INTEGER NOT NULL, diagnostics TEXT,
  declares TEXT NOT NULL, stamp TEXT) STRICT;
CREATE TABLE IF NOT EXISTS compiled_docs (path TEXT PRIMARY KEY, relative TEXT NOT NULL,
  sha256 TEXT NOT NULL) STRICT;
""" + LINK_TABLES
_MAX_ROW = 64 * 1024 * 1024
# Whether the last link step found nothing that spans documents (no CTX202, CTX203 or
# CTX207), saved with the units: then only the ids an edit touches can give one. It is
# trusted for the units it names alone (units_digest): a store written since by a
# toolchain that does not keep it, or a unit that no longer reads back, sends the link
# step through every summary. It also records how many catalog rows it left.
LINKED = "linked"
COMPILED = "compiled"  # the record of what the staged chunk files were made from
# How many validations have saved units to this store (each one counts it up): a stage
# that records the one it ran on knows whether the units changed only as the last
# validation says.
GENERATION = "generation"


class DocumentUnit:
    """One document as the last build checked it, keyed by its path as diagnostics show
    it (a link inside content/ to another document is an input of its own). A unit read
    from the store has its summary read when asked for (UnitStore.load_summaries)."""

    __slots__ = ("path", "relative", "sha256", "diagnostics", "volatile", "tenant", "place",
                 "ctxfst", "_summary", "declares", "stamp")

    def __init__(self, path: str, relative: str, sha256: str, summary: Summary | None,
                 diagnostics: list[Diagnostic] | None = None, volatile: bool = False,
                 tenant: Any = None, place: bytes = b"", ctxfst: bool | None = None,
                 declares: list[str] | None = None, stamp: str | None = None) -> None:
        self.path = path            # the input's path (the unit's key)
        self.relative = relative    # project-relative POSIX path, links resolved
        self.sha256 = sha256        # of its bytes
        self.diagnostics = diagnostics if diagnostics is not None else []
        self.volatile = volatile    # content_path passages: other files, always checked
        self.tenant = tenant        # its frontmatter's `tenant:` value, when it has one
        self.place = place          # its place in the knowledge base's order (_places)
        # False: plain Markdown found beside the documents (no summary)
        self.ctxfst = summary is not None if ctxfst is None else ctxfst
        self._summary = summary
        # the keys of its entity declarations, in entities[] order (link_index's dumps)
        self.declares = summary.dump_keys() if summary is not None else declares or []
        # its file's identity when its bytes were hashed (unit_stamp); None: not known
        # (a link, or a file changed within a clock tick of then): hashed again next time
        self.stamp = stamp

    @property
    def summary(self) -> Summary | None:
        if self._summary is None and self.ctxfst:
            raise RuntimeError(f"{self.path}: its summary was not read (load_summaries)")
        return self._summary

    @summary.setter
    def summary(self, summary: Summary) -> None:
        self._summary = summary

    @property
    def loaded(self) -> bool:
        return self._summary is not None or not self.ctxfst

    def as_row(self) -> tuple:
        return (self.path, self.place, self.relative, self.sha256, int(self.volatile),
                compact_json_text(self.tenant), int(self.ctxfst),
                self.diagnostics_text(), " ".join(self.declares), self.stamp)

    def diagnostics_text(self) -> str | None:
        """Its diagnostics as its row keeps them (None: it has none)."""
        if not self.diagnostics:
            return None
        return compact_json_text([[d.path, d.line, d.column, d.code, d.message,
                                   d.severity.value] for d in self.diagnostics])

    @classmethod
    def from_row(cls, row: tuple) -> DocumentUnit | None:
        (path, place, relative, sha256, volatile, tenant, ctxfst, diagnostics, declares,
         stamp) = row
        tenant = None if tenant == "null" else load_row(tenant)  # (most: no tenant)
        if volatile not in (0, 1) or ctxfst not in (0, 1) or tenant is not _tenant(tenant) \
                or not is_sha256(sha256):
            return None
        found = []
        if diagnostics is not None:
            found = diagnostics_from_rows(load_row(diagnostics))
            if found is None:
                return None
        # (set here, not through __init__: 10,000 units are read back in each edit)
        unit = object.__new__(cls)
        unit.path, unit.relative, unit.sha256, unit._summary = path, relative, sha256, None
        unit.diagnostics, unit.volatile, unit.tenant, unit.place = (
            found, volatile == 1, tenant, place)
        unit.ctxfst, unit.stamp = ctxfst == 1, stamp
        unit.declares = declares.split(" ") if declares else []
        return unit


def _tenant(value: Any) -> Any:
    """A `tenant:` as JSON can keep it: the string, None when absent, False for a value
    that is no string (it decides no tenant)."""
    return value if value is None or isinstance(value, str) else False


def document_places(items: list[tuple[str, str]]) -> dict[str, bytes]:
    """Each document's place in the knowledge base's order ((path, file path) pairs in
    that order): its file path's parts as bytes that sort as the parts do, after a count
    of the times the order starts over (the skills folder's documents follow content/'s)."""
    from ..files import path_order

    places: dict[str, bytes] = {}
    turn, last = 0, b""
    for path, fs_path in items:
        if path in places:
            continue  # (walked twice: one unit, at its first place, as `found` keeps it)
        key = path_order(os.fspath(fs_path)).encode("utf-8", "surrogatepass")
        if last and key <= last:
            turn += 1
        last = key
        places[path] = turn.to_bytes(4, "big") + key
    return places


class UnitStore:
    """The units of one project (table unit_docs, and the link step's tables:
    pipeline.link_index), plus the build's records ("skills", "linked", "compiled"...)
    and chunk rows ("rows:<unit key>") as keys and values."""

    def __init__(self, path: Path) -> None:
        self.db = connect(path, _SCHEMA)
        self.index = LinkIndex(self.db)
        self.pending: dict[str, bytes] = {}
        self.removed: set[str] = set()
        # Units are kept for this toolchain (a release may change a rule's wording or
        # verdict) and for this very file: one copied in with a checkout (its inode and
        # device differ) is emptied, never obeyed. Row texts are spliced into artifacts
        # unparsed, so a stranger's rows must never be read.
        try:
            info = os.stat(path)
            owner = [__version__, UNIT_FORMAT, info.st_dev, info.st_ino]
        except OSError:
            owner = None  # an in-memory store (caches off, or unwritable): empty anyway
        self.owner = owner
        if owner is not None and self.value("owner") != owner:
            self.clear()

    def forget_rows(self) -> None:
        """Forget every document's kept chunk rows (they are compiled again)."""
        for key in self.keys("rows:") | {COMPILED}:
            self.remove(key)
        self.save()

    def clear(self) -> None:
        """Forget every unit (the next build checks everything)."""
        self.pending.clear()
        self.removed.clear()
        try:
            self.db.rollback()  # (link rows written since the last save, too)
            with self.db:
                self.db.execute("DELETE FROM units")
                self.db.execute("DELETE FROM unit_docs")
                self.db.execute("DELETE FROM compiled_docs")
                self.index.clear()
        except sqlite3.Error:
            pass
        if self.owner is not None:
            self.put("owner", self.owner)
            self.save()

    def _rows(self, sql: str, args: tuple = ()) -> list[tuple[str, bytes]]:
        try:
            return [(key, value) for key, value in self.db.execute(sql, args)
                    if isinstance(value, bytes) and len(value) <= _MAX_ROW]
        except sqlite3.Error:
            return []  # damaged pages: everything is recomputed

    def documents(self) -> tuple[dict[str, DocumentUnit], set[str]]:
        """The units that read back as this module writes them, and the paths of every
        unit row (one that does not read back is checked again and its rows replaced)."""
        found: dict[str, DocumentUnit] = {}
        listed: set[str] = set()
        for row in self.db.execute("SELECT path, place, relative, sha256, volatile, tenant, "
                                   "ctxfst, diagnostics, declares, stamp FROM unit_docs"):
            listed.add(row[0])
            unit = DocumentUnit.from_row(row)
            if unit is not None:
                found[unit.path] = unit
        return found, listed

    def load_summaries(self, units: list[DocumentUnit]) -> None:
        """Read the summaries of these units that have none yet (all at once)."""
        wanted = [unit for unit in units if not unit.loaded]
        if wanted:
            everything = len(wanted) > 2000  # (a scan beats thousands of lookups)
            found = self.index.summaries(None if everything else [u.path for u in wanted])
            for unit in wanted:
                unit.summary = found.get(unit.path) or Summary(unit.path)

    def put_units(self, units: list[DocumentUnit], removed: list[str], known: set[str]
                  ) -> None:
        """Keep these units and forget the removed paths' ones; their link rows replace
        those of their paths (only paths in `known` have rows). Written now, in the
        transaction save() commits."""
        self.db.executemany("DELETE FROM unit_docs WHERE path = ?",
                            [(path,) for path in removed])
        self.db.executemany("INSERT OR REPLACE INTO unit_docs VALUES "
                            "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", [unit.as_row() for unit in units])
        self.index.replace([(unit.path, unit.place, unit.summary if unit.ctxfst else None)
                            for unit in units] + [(path, b"", None) for path in removed],
                           known)

    def put_stamps(self, units: list[DocumentUnit]) -> None:
        """Keep these units' stamps (their files' identities changed, not their bytes)."""
        self.db.executemany("UPDATE unit_docs SET stamp = ? WHERE path = ?",
                            [(unit.stamp, unit.path) for unit in units])

    def put_diagnostics(self, units: list[DocumentUnit]) -> None:
        """Keep these units' diagnostics (checked again)."""
        self.db.executemany("UPDATE unit_docs SET diagnostics = ? WHERE path = ?",
                            [(unit.diagnostics_text(), unit.path) for unit in units])

    def compiled_changes(self, paths: list[str] | None = None
                         ) -> tuple[list[str], list[tuple[str, str, str]]] | None:
        """How the CtxFST documents' units differ from the documents the last compile
        compiled from (put_compiled): the paths of the units it did not compile as they
        are now (new, or of other bytes or relative path), and the (path, relative path,
        sha256) it compiled that no unit has now; None where the tables do not read
        (damaged pages). Two scans in SQLite, not every document's entry read back and
        compared in Python; with `paths` (the only ones that can differ), two look-ups
        of those."""
        differ_sql = ("SELECT u.path FROM unit_docs u LEFT JOIN compiled_docs c ON c.path ="
                      " u.path WHERE u.ctxfst = 1 AND (c.path IS NULL OR c.relative IS NOT"
                      " u.relative OR c.sha256 IS NOT u.sha256)")
        gone_sql = ("SELECT c.path, c.relative, c.sha256 FROM compiled_docs c LEFT JOIN"
                    " unit_docs u ON u.path = c.path AND u.ctxfst = 1 WHERE (u.path IS NULL"
                    " OR u.relative IS NOT c.relative OR u.sha256 IS NOT c.sha256)")
        try:
            if paths is None:
                return [path for (path,) in self.db.execute(differ_sql)], \
                    self.db.execute(gone_sql).fetchall()
            differ, gone = [], []
            for batch, marks in _batches(paths):
                differ += [path for (path,) in self.db.execute(
                    f"{differ_sql} AND u.path IN ({marks})", batch)]
                gone += self.db.execute(f"{gone_sql} AND c.path IN ({marks})", batch
                                        ).fetchall()
            return differ, gone
        except sqlite3.Error:
            return None

    def put_compiled(self, units: list[DocumentUnit], gone: list[str] | None) -> None:
        """What a compile compiled from: these units now, the paths in gone no longer
        (None: these units alone, every other path forgotten). Written now, in the
        transaction save() commits (with the compile's record)."""
        if gone is None:
            self.db.execute("DELETE FROM compiled_docs")
        else:
            self.db.executemany("DELETE FROM compiled_docs WHERE path = ?",
                                [(path,) for path in gone])
        self.db.executemany("INSERT OR REPLACE INTO compiled_docs VALUES (?, ?, ?)",
                            [(unit.path, unit.relative, unit.sha256) for unit in units])

    def entity_labels(self, units: list[DocumentUnit]) -> dict[str, list[tuple[str, list[str]]]]:
        """Each unit's entities as (id, [name, *aliases]), in its entities[] order, from
        the declarations it names (a key with no kept declaration raises ValueError)."""
        keys = {key for unit in units for key in unit.declares}
        self.index.load_dumps(keys)
        made: dict[str, tuple[str, list[str]]] = {}  # key -> its label (shared)
        for key in keys:
            dump = self.index.dump(key)
            made[key] = (dump["id"], [dump["name"], *dump.get("aliases", [])])
        return {unit.path: [made[key] for key in unit.declares] for unit in units}

    def value(self, key: str) -> Any:
        rows = self._rows("SELECT key, value FROM units WHERE key = ? AND "
                          "typeof(value) = 'blob'", (key,))
        return load_row(rows[0][1]) if rows else None

    def blobs(self, keys: list[str]) -> dict[str, bytes]:
        found: dict[str, bytes] = {}
        for batch, marks in _batches(keys):
            found.update(self._rows(f"SELECT key, value FROM units WHERE key IN ({marks}) "
                                    "AND typeof(value) = 'blob'", batch))
        return found

    def values(self, keys: list[str]) -> dict[str, Any]:
        return {key: load_row(blob) for key, blob in self.blobs(keys).items()}

    def put(self, key: str, value: Any) -> None:
        self.put_blob(key, compact_json(value))

    def put_blob(self, key: str, blob: bytes) -> None:
        self.pending[key] = blob
        self.removed.discard(key)

    def remove(self, key: str) -> None:
        self.pending.pop(key, None)
        self.removed.add(key)

    def keys(self, prefix: str) -> set[str]:
        try:
            return {key for (key,) in self.db.execute(
                "SELECT key FROM units WHERE key >= ? AND key < ?", _prefix_range(prefix))}
        except sqlite3.Error:
            return set()

    def save(self) -> None:
        try:
            with self.db:
                self.db.executemany("DELETE FROM units WHERE key = ?",
                                    [(key,) for key in sorted(self.removed)])
                self.db.executemany("INSERT OR REPLACE INTO units VALUES (?, ?)",
                                    sorted(self.pending.items()))
        except sqlite3.Error:
            pass  # a read-only or full disk: the next build recomputes
        self.pending.clear()
        self.removed.clear()

    def close(self) -> None:
        self.db.close()  # (what save() did not commit is rolled back)


def _batches(items: list[str], size: int = 500) -> Iterator[tuple[tuple[str, ...], str]]:
    """items a batch at a time, each with its `IN (...)` placeholders (SQLite takes some
    thousands of parameters at most)."""
    for start in range(0, len(items), size):
        batch = tuple(items[start:start + size])
        yield batch, ",".join("?" * len(batch))


def _prefix_range(prefix: str) -> tuple[str, str]:
    """The keys that start with prefix are those from the first to before the second."""
    return prefix, prefix[:-1] + chr(ord(prefix[-1]) + 1)


def load_row(blob: bytes) -> Any:
    try:
        return json.loads(blob)
    except (ValueError, RecursionError):
        return None


def unit_key(relative: str, sha256: str) -> str:
    """Content-addressed: a rename back or a revert finds its rows again."""
    return hashlib.sha256(f"{__version__}\0{UNIT_FORMAT}\0{relative}\0{sha256}".encode()
                          ).hexdigest()


def is_volatile(doc: ParsedDocument) -> bool:
    return any(record.content_path is not None for _, record in doc.chunks)


def declared_tenant(doc) -> Any:
    frontmatter = doc.frontmatter if isinstance(doc.frontmatter, dict) else {}
    return _tenant(frontmatter.get("tenant"))


def catalog_rows(declarations: dict, merged: dict[str, dict],
                  relative_of: dict[str, str]) -> dict[str, dict]:
    """The catalog rows (compile.chunks.entity_rows) of these entities, by id."""
    from ..compile.chunks import entity_rows

    declared_in = {entity_id: [relative_of[place.path] for place in places]
                   for entity_id, places in declarations.items()}
    return {row["id"]: row for row in entity_rows(merged, declared_in)}


def units_digest(units) -> str:
    """Which units these are: each one's path and the sha256 of its bytes, in path order
    (a unit's summary is a function of them)."""
    text = "\n".join(sorted(f"{unit.path}\0{unit.sha256}" for unit in units))
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()


