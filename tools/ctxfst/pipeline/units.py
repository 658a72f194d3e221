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

import base64
import bisect
import hashlib
import json
import os
import sqlite3
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from json.encoder import encode_basestring
from pathlib import Path
from typing import Any

import numpy as np

from ..artifacts.arrays import arrow_reader
from ..artifacts.cache import PASSAGES, connect
from ..artifacts.io import Span, compact_json, digest_written, is_sha256, write_pieces
from ..diagnostics import Diagnostic, diagnostics_from_rows, ordered
from ..document.link import Summary, link, summarize
from ..document.model import ParsedDocument
from ..files import changed_lately, file_stamp
from ..version import __version__
from .errors import BuildFailed
from .link_index import TABLES as LINK_TABLES
from .link_index import LinkIndex

UNIT_FORMAT = "6"  # 3: declarations keyed by their text; 4: units and link step as tables;
# 5: each unit keeps the stamp (unit_stamp) of the file it was checked from
_SCHEMA = """
CREATE TABLE IF NOT EXISTS units (key TEXT PRIMARY KEY, value BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS unit_docs (path TEXT PRIMARY KEY, place BLOB NOT NULL,
  relative TEXT NOT NULL, sha256 TEXT NOT NULL, volatile INTEGER NOT NULL,
  tenant TEXT NOT NULL, ctxfst INTEGER NOT NULL, diagnostics TEXT,
  declares TEXT NOT NULL, stamp TEXT) STRICT;
""" + LINK_TABLES
_MAX_ROW = 64 * 1024 * 1024
# Whether the last link step found nothing that spans documents (no CTX202, CTX203 or
# CTX207), saved with the units: then only the ids an edit touches can give one. It is
# trusted for the units it names alone (units_digest): a store written since by a
# toolchain that does not keep it, or a unit that no longer reads back, sends the link
# step through every summary. It also records how many catalog rows it left.
PUBLISHED = "published"  # staged file -> its stamp and sha256 when last published
PUBLISHED_ROWS = "published_rows"  # sha256 -> rows, of the artifacts last published
_LINKED = "linked"


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
        diagnostics = [[d.path, d.line, d.column, d.code, d.message, d.severity.value]
                       for d in self.diagnostics]
        return (self.path, self.place, self.relative, self.sha256, int(self.volatile),
                compact_json(self.tenant).decode("utf-8"), int(self.ctxfst),
                compact_json(diagnostics).decode("utf-8") if diagnostics else None,
                " ".join(self.declares), self.stamp)

    @classmethod
    def from_row(cls, row: tuple) -> DocumentUnit | None:
        (path, place, relative, sha256, volatile, tenant, ctxfst, diagnostics, declares,
         stamp) = row
        tenant = None if tenant == "null" else _loads(tenant)  # (most: no tenant)
        if volatile not in (0, 1) or ctxfst not in (0, 1) or tenant is not _tenant(tenant) \
                or not is_sha256(sha256):
            return None
        found = []
        if diagnostics is not None:
            found = diagnostics_from_rows(_loads(diagnostics))
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


def _places(items: list[tuple[str, str]]) -> dict[str, bytes]:
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
        for key in self.keys("rows:") | {_COMPILED}:
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

    def put_diagnostics(self, unit: DocumentUnit) -> None:
        self.db.execute("UPDATE unit_docs SET diagnostics = ? WHERE path = ?",
                        (unit.as_row()[7], unit.path))

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
        return _loads(rows[0][1]) if rows else None

    def blobs(self, keys: list[str]) -> dict[str, bytes]:
        found: dict[str, bytes] = {}
        for start in range(0, len(keys), 500):
            batch = keys[start:start + 500]
            marks = ",".join("?" * len(batch))
            found.update(self._rows(f"SELECT key, value FROM units WHERE key IN ({marks}) "
                                    "AND typeof(value) = 'blob'", tuple(batch)))
        return found

    def values(self, keys: list[str]) -> dict[str, Any]:
        return {key: _loads(blob) for key, blob in self.blobs(keys).items()}

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

    def count(self, prefix: str) -> int:
        """How many keys start with prefix (saved ones)."""
        try:
            return self.db.execute("SELECT count(*) FROM units WHERE key >= ? AND key < ?",
                                   _prefix_range(prefix)).fetchone()[0]
        except sqlite3.Error:
            return 0

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


def _prefix_range(prefix: str) -> tuple[str, str]:
    """The keys that start with prefix are those from the first to before the second."""
    return prefix, prefix[:-1] + chr(ord(prefix[-1]) + 1)


def _loads(blob: bytes) -> Any:
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


@dataclass
class Checked:
    """A validated knowledge base as the later stages see it: every document by its unit,
    the documents typed in this run, and a loader for the others."""

    root: Path
    units: list[DocumentUnit]                 # every CtxFST document, in input order
    typed: dict[str, ParsedDocument]          # path -> typed this run
    kb: Any                                   # the loaded KnowledgeBase (skills, edges)
    link: Any
    diagnostics: list[Diagnostic]
    extra_edges: list
    load: Callable[[list[str]], dict[str, ParsedDocument]]  # paths -> typed
    passages: list[str] = field(default_factory=list)  # content_path files (relative)
    counts: dict[str, int] = field(default_factory=dict)
    # each document's entities as (id, [name, *aliases]), by path (the facts catalogs)
    labels: dict[str, list[tuple[str, list[str]]]] = field(default_factory=dict)
    mark: str = ""  # the units digest its link step was saved with (_LINKED)
    # file -> (relative path, sha256, size) of the inputs hashed for this validation
    digested: dict[str, tuple[str, str, int]] = field(default_factory=dict)

    @property
    def files(self) -> int:
        """The files checked: documents, skills and extra-edge files."""
        return len(self.units) + len(self.kb.skills) + len(self.kb.edge_files)

    def document(self, path: str) -> ParsedDocument:
        return self.documents([path])[path]

    def let_go_typed(self) -> None:
        """Forget the documents typed so far (a first build types every one, some 60 KB
        each); whatever needs one later loads it again (documents())."""
        self.typed.clear()
        self.kb.documents = []

    def documents(self, paths: list[str]) -> dict[str, ParsedDocument]:
        """Typed documents, by path (those not typed yet are loaded together, from the
        bytes their units record: a file edited since stops the build)."""
        missing = [path for path in paths if path not in self.typed]
        if missing:
            self.typed.update(self.load(missing))
        return {path: self.typed[path] for path in paths}


def unit_stamp(info: os.stat_result, now_ns: int) -> str | None:
    """A file's identity (artifacts.io.file_stamp) as a unit keeps it; None for a file
    changed within a clock tick of now_ns (files.changed_lately)."""
    if changed_lately(info, now_ns):
        return None
    return ":".join(map(str, file_stamp(info)))


def check_incrementally(config, inputs: list, refused: list[Diagnostic], digests,
                        open_parse_cache: Callable, store: UnitStore,
                        regular_files: Mapping[str, os.stat_result] | None = None,
                        digested: dict[str, tuple[str, str, int]] | None = None) -> Checked:
    """Validate the project's inputs, typing only what changed (see the module doc).
    regular_files: the stat of the paths known to be regular files, not links, as this
    run took it: a document whose stat is its unit's stamp, at the same place, is the
    unit's, neither hashed nor its path resolved again (git's index). digested: where
    the (file, relative path, sha256, size) of those documents are added (digests
    gives the others': digests(file, relative path, volatile) -> sha256 or None, where
    volatile says the document's unit has content_path passages, checked every build)."""
    from ..document.kb import Input
    from ..document.rules import check_document
    from ..document.source import Source
    from ..files import ProjectRelative
    from ..kb import check_kb_wide, load_kb
    from ..skills import SKILL_FILE
    from ..skills.rules import skill_names

    root = config.root
    regular_files = regular_files or {}
    digested = {} if digested is None else digested
    relative_to_root = ProjectRelative(root, regular_files)
    previous, listed = store.documents()
    documents, others = [], []
    for item in inputs:
        name = os.path.basename(item.source.path)
        (others if name == SKILL_FILE or not name.endswith(".md") else documents).append(item)
    places = _places([(item.source.path, item.source.fs_path) for item in documents])
    found: dict[str, tuple[Any, str, str | None]] = {}  # path -> (input, relative, sha256)
    changed: list[str] = []
    stamps: dict[str, str | None] = {}  # path -> its file's stamp now, when not its unit's
    now_ns = time.time_ns()
    for item in documents:
        path = item.source.path
        if path in found:
            continue  # (walked twice: the skills folder inside content/): one unit
        fs_path = item.source.fs_path
        unit = previous.get(path)
        info = regular_files.get(fs_path)
        if info is not None and unit is not None and unit.stamp is not None \
                and unit.stamp == unit_stamp(info, now_ns) and unit.place == places[path] \
                and not unit.volatile and unit.relative == relative_to_root.of_regular(fs_path):
            found[path] = (item, unit.relative, unit.sha256)
            digested[fs_path] = (unit.relative, unit.sha256, info.st_size)
            continue
        relative = relative_to_root(fs_path, path)
        sha = digests(fs_path, relative, unit is not None and unit.volatile)
        found[path] = (item, relative, sha)
        stamp = unit_stamp(info, now_ns) if info is not None and sha is not None else None
        if (sha is None or unit is None or unit.sha256 != sha or unit.relative != relative
                or unit.volatile or unit.place != places[path]):
            changed.append(path)
            stamps[path] = stamp
        elif stamp != unit.stamp:
            stamps[path] = stamp  # (its bytes are the unit's: its stamp is kept anew)
    order = list(found)

    def verified(paths: list[str], check: bool) -> list:
        """The inputs of paths with the bytes to parse: exactly those whose sha256 the
        unit records (check: a file edited since it was hashed stops the build). A
        stamp is kept only when it is the identity of the file the bytes came from (a
        folder link pointed elsewhere meanwhile reads another file)."""
        chosen = []
        for path in paths:
            item, relative, sha = found[path]
            data, problem, read_from = item.source.read_with_stat()
            if stamps.get(path) is not None and (
                    read_from is None or unit_stamp(read_from, now_ns) != stamps[path]):
                stamps[path] = None
            if problem is None and data is not None:
                actual = hashlib.sha256(data).hexdigest()
                if check and actual != sha:

                    raise BuildFailed(f"{path} changed during the build: run `doit` again")
                found[path] = (item, relative, actual)
                item = Input(Source(item.source.path, item.source.fs_path, data), item.explicit)
            chosen.append(item)
        return chosen

    def load(paths: list[str]) -> dict[str, ParsedDocument]:
        cache = open_parse_cache()
        try:
            loaded = {doc.path: doc for doc in load_kb(root, verified(paths, True),
                                                       cache).documents}
        finally:
            cache.close()
        gone = [path for path in paths if path not in loaded]
        if gone:  # plain Markdown now: it changed during the build

            raise BuildFailed(f"{gone[0]} changed during the build: run `doit` again")
        return loaded

    cache = open_parse_cache()
    try:
        kb = load_kb(root, verified(changed, False) + others, cache)
    finally:
        cache.close()
    kb.skills_dir = config.skills_dir  # its folders are checked as `ctxfst validate` does
    typed = {doc.path: doc for doc in kb.documents}
    units: dict[str, DocumentUnit] = {}
    for path in order:
        doc = typed.get(path)
        _, relative, sha = found[path]
        if doc is not None:
            units[path] = DocumentUnit(path, relative, sha or "", summarize(doc), [],
                                       is_volatile(doc), declared_tenant(doc), places[path],
                                       stamp=stamps[path])
        elif path in changed:  # plain Markdown beside the documents
            units[path] = DocumentUnit(path, relative, sha or "", None, place=places[path],
                                       stamp=stamps[path])
        else:
            units[path] = previous[path]
    live = [units[path] for path in order if units[path].ctxfst]

    def document(path: str) -> ParsedDocument:
        if path not in typed:
            typed.update(load([path]))
        return typed[path]

    def position(path: str, key: tuple) -> tuple[int, int]:
        pos = document(path).source_map.value(key)
        return pos.line, pos.column

    # What the changed and removed documents declared before, and declare now: only
    # these ids' standing in the view can change, and only they can make a conflict or
    # close a cycle that spans documents.
    removed = sorted(listed - set(units))
    touched_paths = [*changed, *removed]
    before_units = [previous[path] for path in touched_paths if path in previous]
    old_summaries = store.index.summaries(
        [path for path in touched_paths if path in listed])
    entity_ids: set[str] = set()
    chunk_ids: set[str] = set()
    for summary in [*old_summaries.values(),
                    *(units[p].summary for p in changed if units[p].ctxfst)]:
        entity_ids.update(item[1] for item in summary.entities)
        chunk_ids.update(item[1] for item in summary.chunks)
    names = skill_names(kb.skills)
    old_skills = store.value("skills")
    recheck = set(changed)
    everything = (not before_units and len(changed) == len(order)) or not _names_record(
        old_skills) or (old_skills["names"] is None) != (names is None)
    standing = None if everything else store.index.standing(entity_ids, chunk_ids)
    linked_before = store.value(_LINKED)
    catalog_complete = (isinstance(linked_before, dict) and  # (as the last link left it)
                        linked_before.get("entities") == store.index.catalog_count())
    store.put_units([units[path] for path in changed], removed, listed)
    changed_set = set(changed)
    restamped = [previous[path] for path in stamps if path not in changed_set]
    for unit in restamped:
        unit.stamp = stamps[unit.path]
    store.put_stamps(restamped)
    if everything:
        recheck.update(order)  # nothing known to compare with: check everything
    else:
        now = store.index.standing(entity_ids, chunk_ids)
        ids = {i for i in entity_ids if standing[0].get(i) != now[0].get(i)}
        ids |= standing[2] ^ now[2]
        ids |= set(old_skills["names"] or ()) ^ (names or set())
        tails = {t for t in standing[1].keys() | now[1].keys()
                 if standing[1].get(t) != now[1].get(t)}
        recheck |= store.index.referring(ids, tails) & set(order)
    relative_of = {path: unit.relative for path, unit in units.items()}
    if (isinstance(linked_before, dict) and linked_before.get("clean") is True
            and linked_before.get("units") == units_digest(previous.values())
            and catalog_complete
            and not store.index.conflicted(entity_ids, chunk_ids)
            and not store.index.cycles_through(chunk_ids)):
        linked = store.index.link([], position)
        # the catalog rows of the entities whose declarations changed (kept, the others)
        redeclared = _redeclared(changed, removed, previous, old_summaries, units)
        if redeclared:
            rows = _catalog_rows(*store.index.catalog_of(redeclared, position), relative_of)
            store.index.put_catalog({entity_id: rows.get(entity_id)
                                     for entity_id in redeclared})
    else:  # in full, from every summary: the diagnostics in `ctxfst validate`'s order
        store.load_summaries(live)
        linked = link([unit.summary for unit in live], position)
        store.index.clear_catalog()
        store.index.put_catalog(_catalog_rows(linked.declarations, linked.merged,
                                              relative_of))
    missing = [unit.path for unit in live if unit.path in recheck and unit.path not in typed]
    if missing:  # typed together: in parallel, with one cache query
        typed.update(load(missing))
    out: list[Diagnostic] = [*refused, *linked.diagnostics]
    for item in kb.skills + kb.edge_files:
        out.extend(item.diagnostics)
    for unit in live:
        if unit.path in recheck:
            doc = typed[unit.path]
            unit.diagnostics = doc.diagnostics + check_document(doc, linked.view, names, root)
            store.put_diagnostics(unit)
        out.extend(unit.diagnostics)
    wide, edges = check_kb_wide(kb, linked.view)
    out.extend(wide)
    passages = _passages(root, [typed[u.path] for u in live if u.volatile])
    store.put(PASSAGES, passages)
    store.put("skills", {"names": sorted(names) if names is not None else None})
    labels = store.entity_labels(live)  # (the facts catalogs)
    mark = units_digest(units[path] for path in order)
    store.put(_LINKED, {"clean": not linked.diagnostics, "units": mark,
                        "entities": store.index.catalog_count()})
    store.save()
    return Checked(root, live, typed, kb, linked, ordered(out), edges, load, passages,
                   {"documents_checked": len(recheck & {u.path for u in live}),
                    "documents_typed": len(typed)}, labels, mark)


def _redeclared(changed: list[str], removed: list[str], previous: dict[str, DocumentUnit],
                old: dict[str, Summary], units: dict[str, DocumentUnit]) -> set[str]:
    """The entity ids whose catalog rows these changes can change: those a changed
    document declared, or declares, otherwise than before (another declaration, place
    in entities[], or project-relative path), and those a removed document declared."""
    def declarations(summary: Summary | None) -> list[tuple]:
        if summary is None:
            return []
        return [(item[0], item[1], key) for item, key in
                zip(summary.entities, summary.dump_keys(), strict=True)]

    found: set[str] = set()
    for path in [*changed, *removed]:
        unit = units.get(path)
        before = declarations(old.get(path))
        now = declarations(unit.summary if unit is not None and unit.ctxfst else None)
        was = previous.get(path)
        if before != now or unit is None or was is None or was.relative != unit.relative:
            found.update(item[1] for item in [*before, *now])
    return found


def _catalog_rows(declarations: dict, merged: dict[str, dict],
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


def _passages(root: Path, docs: list[ParsedDocument]) -> list[str]:
    """The project-relative paths of the content_path files documents name (inside the
    root): the build's task graph depends on them as on the documents."""
    from ..document.rules import content_target
    from ..files import ProjectRelative, inside

    relative_to_root = ProjectRelative(root)
    found = set()
    for doc in docs:
        for _, record in doc.chunks:
            if record.content_path is not None:
                target, _ = content_target(doc, record)
                if target is not None and inside(root.resolve(), target):
                    found.add(relative_to_root(target))
    return sorted(found)


def _names_record(value: Any) -> bool:
    names = value.get("names", 0) if isinstance(value, dict) else 0
    return names is None or (isinstance(names, list)
                             and all(isinstance(name, str) for name in names))


@dataclass
class Compiled:
    """The chunk artifacts (chunks.json and chunks.parquet as pieces, some of them spans
    of the previous files, still open) and what they were made from."""

    json: list[bytes | Span]
    parquet: list[bytes | memoryview | Span]
    chunks: int
    entities_json: bytes  # the entity catalog's rows, compact (catalog.json)
    entities: int
    recompiled: int
    made_from: dict[str, Any]
    copied: int = 0  # rows copied from the previous chunks.json
    opened: list[int] = field(default_factory=list)  # files the spans copy from
    read_from: dict[str, Any] = field(default_factory=dict)  # (load_compiled)

    def write(self, json_path: Path, parquet_path: Path) -> None:
        """Write chunks.json and chunks.parquet, and note their sha256 in the record
        (the next compile reads them only while they are still those files)."""
        try:
            json_sha256 = write_pieces(json_path, self.json)
            self.made_from["sha256"] = write_pieces(parquet_path, self.parquet)
        finally:
            self.close()
        if self.made_from["json"] is not None:
            self.made_from["json"]["sha256"] = json_sha256

    def close(self) -> None:
        while self.opened:
            os.close(self.opened.pop())

    def record(self, store: UnitStore) -> None:
        """Once the staged files hold what write() wrote: the next build splices them."""
        save_compiled(store, self.made_from, self.read_from)
        store.save()


def _kept_rows(blob: bytes | None, summary: Summary) -> list[tuple[str, bytes]] | None:
    """A document's kept rows: their compact JSON texts, one per line (compact JSON holds
    no raw newline), each the row of the summary's chunk at its place; else None."""
    if blob is None:
        return None
    texts = blob.split(b"\n") if blob else []
    if len(texts) != len(summary.chunks):
        return None
    for text, chunk in zip(texts, summary.chunks, strict=True):
        if not text.startswith(_row_start(chunk[1])):
            return None
    return [(chunk[1], text) for chunk, text in zip(summary.chunks, texts, strict=True)]


def _row_start(chunk_id: str) -> bytes:
    # (json's own string encoder: what json.dumps(ensure_ascii=False) writes, 10x faster)
    return ('{"id":' + encode_basestring(chunk_id) + ",").encode("utf-8")


def compile_chunks(checked: Checked, store: UnitStore, previous_parquet: Path,
                   previous_json: Path | None = None) -> Compiled:
    """chunks.json and chunks.parquet from the units: rows are compiled only for the
    documents without kept rows. With the layout of the previous chunks.json (the file
    the last compile recorded), only the changed documents' rows are read: the others'
    texts are copied from it; without it, chunks.json is joined from every document's
    kept rows. chunks.parquet splices the changed documents' rows into the previous one."""
    from ..compile.chunks import CompileError, chunks_json

    # Each document's entry: its rows are unchanged while it is (and it is not volatile).
    entries = {unit.path: _entry(unit) for unit in checked.units}
    made_from, read_from = load_compiled(store)
    previous = made_from.get("documents") if made_from is not None else None
    if _entries_record(previous):
        known = set(previous)
        changed = {unit.path for unit in checked.units
                   if unit.volatile or entries[unit.path] not in known}
    else:  # (no record, or not one this module writes: nothing is copied from)
        changed, previous, made_from = set(entries), None, None
    published = store.value(PUBLISHED)
    before = _previous_json(made_from, previous_json, published)
    opened = [before[2]] if before is not None else []  # (the files spans copy from)
    try:
        errors: list[Diagnostic] = []
        # (without the previous chunks.json, it is joined from every document's rows)
        kept, fresh = _unit_rows(checked, store, changed if before is not None
                                 else set(entries), errors)
        if errors:
            raise CompileError(errors)
        _forget_stale_rows(store, checked.units, previous, entries)
        store.save()
        rows = _ChunkRows(kept, before, set(entries) - changed)
        entities = _catalog(checked, store)
        parquet, layout = _chunks_parquet(rows, fresh, made_from, previous_parquet, changed,
                                          published, opened)
        recompiled = len(fresh)
        fresh.clear()  # (the rows as dicts, some 100 MB at 10,000 documents: not needed)
        entities_json = compact_json(entities)  # (catalog.json, and inside chunks.json)
        pieces = chunks_json(entities_json, rows.texts())
        made_from = {"sha256": None, "documents": [entries[unit.path] for unit in
                                                   checked.units],
                     "layout": layout, "json": rows.layout(pieces)}  # (sha256: write())
        return Compiled(pieces, parquet, len(rows.ids), entities_json, len(entities),
                        recompiled, made_from, rows.copied, opened, read_from)
    except BaseException:
        for handle in opened:  # (Compiled.write closes them otherwise)
            os.close(handle)
        raise


def _rows_key(relative: str, sha256: str) -> str:
    return "rows:" + unit_key(relative, sha256)


def _entry(unit: DocumentUnit) -> str:
    """What a document's kept rows were compiled from: its path, project-relative path
    and sha256 (its rows key is made from the last two)."""
    return f"{unit.path}\0{unit.relative}\0{unit.sha256}"


def _entries_record(value: Any) -> bool:
    return isinstance(value, list) and all(type(entry) is str and entry.count("\0") == 2
                                           for entry in value)


def _forget_stale_rows(store: UnitStore, units: list[DocumentUnit], previous: list | None,
                       entries: dict[str, str]) -> None:
    """Forget the kept rows no document has now: those of the entries the last compile
    had and this one has not. Every stale key is looked for (a scan of the keys) without
    that record, or when more rows are kept than documents (rows left by a compile that
    stopped before its record)."""
    kept = sum(not unit.volatile for unit in units)
    if previous is None or store.count("rows:") > kept:
        stale = store.keys("rows:") - {_rows_key(unit.relative, unit.sha256)
                                        for unit in units if not unit.volatile}
    else:
        now = set(entries.values())
        gone = [entry.split("\0")[1:] for entry in previous if entry not in now]
        # (a link to a document shares its rows: keep what a unit still has)
        live = {(unit.relative, unit.sha256) for unit in units if not unit.volatile} \
            if gone else set()
        stale = {_rows_key(relative, sha256) for relative, sha256 in gone
                 if (relative, sha256) not in live}
    for key in stale:
        store.remove(key)


_COMPILED = "compiled"


def _compiled_parts(record: dict) -> list[tuple[str, dict, str]]:
    """The compile record's long parts, kept under keys of their own so that an edit
    rewrites only those it changes (the chunk ids and document paths stay): (key, the
    dict holding the part, its name)."""
    parts = [(_COMPILED + ":documents", record, "documents")]
    if isinstance(record.get("json"), dict):
        parts += [(f"{_COMPILED}:json.{name}", record["json"], name)
                  for name in ("ids", "paths", "docs", "lengths")]
    return parts


def load_compiled(store: UnitStore) -> tuple[dict | None, dict[str, Any]]:
    """The last compile's record with its parts in place (None when it does not read
    back), and the parts as read, by key (save_compiled writes only the others)."""
    record = store.value(_COMPILED)
    if not isinstance(record, dict) or not isinstance(record.get("json"), (dict, type(None))):
        return None, {}
    parts = _compiled_parts(record)
    blobs = store.blobs([key for key, _, _ in parts])
    for key, holder, name in parts:
        value = _loads(blobs[key]) if key in blobs else None
        if value is None:
            return None, {}
        holder[name] = value
    return record, {key: holder[name] for key, holder, name in parts}


def compiled_groups(record: Any, size: int) -> list[tuple[str, int]] | None:
    """The row groups of the chunks.parquet a compile record describes (the unit store's
    "compiled" value), each as (the sha256 of its bytes, its rows), when the record lists
    them as this module writes them (lying one after the other in a file of `size`
    bytes); else None."""
    layout = record.get("layout") if isinstance(record, dict) else None
    entries = layout.get("groups") if isinstance(layout, dict) else None
    if not isinstance(entries, list):
        return None
    found, at = [], 4  # (the file's first group starts after its magic)
    for entry in entries:
        part = entry.get("part") if isinstance(entry, dict) else None
        if not (isinstance(part, dict) and is_sha256(entry.get("sha256"))
                and all(type(part.get(name)) is int for name in ("start", "size", "rows"))
                and part["start"] == at and part["size"] >= 0 and part["rows"] >= 0):
            return None
        at += part["size"]
        found.append((entry["sha256"], part["rows"]))
    return found if at <= size else None


def save_compiled(store: UnitStore, record: dict, read_from: dict[str, Any]) -> None:
    """Keep a compile record (load_compiled reads it back); parts equal to those
    read_from holds are not encoded or written again."""
    record = {**record, "json": dict(record["json"]) if isinstance(record.get("json"), dict)
              else record.get("json")}
    for key, holder, name in _compiled_parts(record):
        value = holder.pop(name)
        if key not in read_from or read_from[key] != value:
            store.put_blob(key, compact_json(value))
    store.put(_COMPILED, record)


def _catalog(checked: Checked, store: UnitStore) -> list[dict[str, Any]]:
    """The entity catalog the link step kept; made again from every summary when the
    store does not hold what validation linked (caches off, or its save failed), or
    when a kept row does not read back (then kept again)."""
    saved = store.value(_LINKED)
    ours = (isinstance(saved, dict) and saved.get("units") == checked.mark
            and saved.get("entities") == store.index.catalog_count())
    if ours:
        try:
            return store.index.catalog()
        except ValueError:
            pass
    store.load_summaries(checked.units)
    linked = link([unit.summary for unit in checked.units], _no_position)
    rows = _catalog_rows(linked.declarations, linked.merged,
                         {unit.path: unit.relative for unit in checked.units})
    if ours:
        store.index.clear_catalog()
        store.index.put_catalog(rows)
        store.save()
    return [rows[entity_id] for entity_id in sorted(rows)]


def _no_position(path: str, key: tuple) -> tuple[int, int]:
    # (a validated knowledge base declares nothing otherwise: no diagnostic is made)
    return 0, 0


def _unit_rows(checked: Checked, store: UnitStore, paths: set[str],
               errors: list[Diagnostic]
               ) -> tuple[dict[str, list[tuple[str, bytes]]], dict[str, list[dict]]]:
    """The rows of these documents' units, as (chunk id, text): kept ones, else compiled
    now (and kept); and the rows compiled now, by document."""
    from ..compile.chunks import document_rows, row_text

    root = checked.root.resolve()
    units = [unit for unit in checked.units if unit.path in paths]
    keys = {unit.path: _rows_key(unit.relative, unit.sha256) for unit in units}
    store.load_summaries(units)  # (each kept row is checked against its chunk id)
    cached = store.blobs([keys[u.path] for u in units if not u.volatile])
    kept = {unit.path: None if unit.volatile else
            _kept_rows(cached.get(keys[unit.path]), unit.summary) for unit in units}
    checked.documents([path for path, rows in kept.items() if rows is None])  # together
    fresh: dict[str, list[dict[str, Any]]] = {}  # path -> rows compiled now
    for unit in units:
        if kept[unit.path] is None:
            rows = document_rows(checked.document(unit.path), unit.relative, root, errors)
            fresh[unit.path] = rows
            kept[unit.path] = [(row["id"], row_text(row).encode("utf-8")) for row in rows]
            if not unit.volatile:
                store.put_blob(keys[unit.path],
                               b"\n".join(text for _, text in kept[unit.path]))
    return kept, fresh


class _ChunkRows:
    """Every chunk row in id order, as chunks.json writes it: the rows of the documents
    read now, and runs of the others' rows as they lie in the previous chunks.json
    (copied as whole blocks of bytes, commas included). Per-row numbers are arrays: an
    edit handles every row of the knowledge base here, and only the changed ones one
    by one."""

    def __init__(self, read: dict[str, list[tuple[str, bytes]]],
                 before: tuple[bytes, dict] | None, keep: set[str]) -> None:
        """read: rows by document; before: the previous chunks.json and its layout
        (_previous_json); keep: the documents whose rows in it are kept."""
        added = sorted((chunk_id, path, text) for path, rows in read.items()
                       for chunk_id, text in rows)
        old_paths = before[1]["paths"] if before is not None else []
        self.paths = sorted({path for _, path, _ in added} |
                            {path for path in old_paths if path in keep})
        number = {path: index for index, path in enumerate(self.paths)}
        self.ids: list[str] = []
        docs: list[np.ndarray] = []     # each row's document, an index into paths
        lengths: list[np.ndarray] = []
        self.pieces: list[bytes | Span] = []  # joined by commas: the rows
        self._segments: list[tuple[int, int, int]] = []  # (first row, old row, rows)
        self._old: tuple[memoryview, np.ndarray] | None = None
        self._read: dict[int, bytes] = {}  # new row -> its text, for the rows read now
        self.copied = 0
        events: list[tuple[int, int, Any]] = []  # (old row, 0 add | 1 drop, added row)
        old_ids: list[str] = []
        # the previous rows' ids, their natural group starts and the target they are of
        self._old_natural: tuple[list[str], np.ndarray | None, Any] = ([], None, None)
        self.natural: tuple[list[int], int] | None = None  # (natural_starts(), once asked)
        if before is not None:
            data, old, self._fd, self._stamp = before
            old_lengths = old["lengths"]
            starts = np.empty(len(old_lengths) + 1, np.int64)
            starts[0] = 0
            np.cumsum(old_lengths + 1, out=starts[1:])
            self._old = (memoryview(data), starts + old["head"])
            keeping = np.array([path in keep for path in old_paths], bool)
            remap = np.array([number.get(path, -1) for path in old_paths], np.int64)
            old_ids, old_docs = old["ids"], old["docs"]
            self._old_natural = (old_ids, old.get("natural"), old.get("natural_target"))
            events = [(row, 1, None) for row in
                      np.flatnonzero(~keeping[old_docs]).tolist()] if len(old_docs) else []
            events += [(bisect.bisect_left(old_ids, item[0]), 0, item) for item in added]
        else:
            events = [(0, 0, item) for item in added]
        events.sort(key=lambda event: (event[0], event[1], event[2] and event[2][0]))
        at = 0  # the next old row
        for row, kind, item in [*events, (len(old_ids), 2, None)]:
            if row > at:  # the old rows at..row, kept: one block
                self._copy(at, row, old_ids)
                docs.append(remap[old_docs[at:row]])
                lengths.append(old_lengths[at:row])
                at = row
            if kind == 0:
                chunk_id, path, text = item
                self._read[len(self.ids)] = text
                self.ids.append(chunk_id)
                docs.append(np.array([number[path]], np.int64))
                lengths.append(np.array([len(text)], np.int64))
                self.pieces.append(text)
            elif kind == 1:
                at = row + 1
        self.docs = np.concatenate(docs) if docs else np.zeros(0, np.int64)
        self.lengths = np.concatenate(lengths) if lengths else np.zeros(0, np.int64)

    def _copy(self, begin: int, end: int, ids: list[str]) -> None:
        body, starts = self._old
        first, last = int(starts[begin]), int(starts[end])
        # (the layout must fit the block: its first row's start, and a comma or the
        # rows' end after it; the stage compiles every row again otherwise)
        if not (bytes(body[first:first + len(_row_start(ids[begin]))])
                == _row_start(ids[begin]) and body[last - 1:last] in
                (b",", _JSON_TAIL[:1])):
            raise ValueError("a chunks.json layout that does not fit the file")
        self._segments.append((len(self.ids), begin, end - begin))
        self.ids.extend(ids[begin:end])
        # (less the last comma; copied by the kernel when chunks.json is written)
        self.pieces.append(Span(self._fd, first, body[first:last - 1], self._stamp))
        self.copied += end - begin

    def natural_starts(self, target: int) -> list[int]:
        """parquet_splice.natural_starts() of the rows' ids: for the rows copied, from
        the previous layout's (each checked to start a group by its CRC); for the rows
        read now, computed. (A CRC of all 70,000 ids took 20 ms of each edit.)"""
        from ..artifacts.parquet_splice import natural_starts, starts_group

        old_ids, old, old_target = self._old_natural
        if old is None or old_target != target or not all(
                starts_group(old_ids[row], target) for row in old.tolist()):
            found = natural_starts(self.ids, target)
        else:
            found = [row for row in self._read if row and starts_group(self.ids[row], target)]
            for first, old_row, count in self._segments:
                begin, end = np.searchsorted(old, [old_row, old_row + count])
                found.extend((old[begin:end] - old_row + first).tolist())
                # (the old first row is never recorded: copied after a row added before
                # it, it starts a group by its CRC like any other)
                if old_row == 0 and count and starts_group(old_ids[0], target):
                    found.append(first)
            found = sorted(row for row in found if row)  # (never the first row)
        self.natural = (found, target)
        return found

    def changed_rows(self, changed: set[str]) -> np.ndarray:
        """Whether each row belongs to one of these documents."""
        return np.array([path in changed for path in self.paths], bool)[self.docs] \
            if self.paths else np.zeros(0, bool)

    def texts(self) -> list[bytes | Span]:
        return self.pieces

    def row(self, index: int) -> dict[str, Any]:
        """Row `index` of the new order, parsed from its text."""
        if index in self._read:
            return json.loads(self._read[index])
        row = self.old_row(index)
        body, starts = self._old
        return json.loads(bytes(body[int(starts[row]):int(starts[row + 1]) - 1]))

    @property
    def old_count(self) -> int:
        """The rows of the previous chunks.json (0 without one)."""
        return len(self._old[1]) - 1 if self._old is not None else 0

    def old_row(self, index: int) -> int | None:
        """Where row `index` of the new order lay in the previous chunks.json (None for a
        row read now)."""
        if index in self._read:
            return None
        place = bisect.bisect_right(self._segments, (index, len(self._old[1]))) - 1
        first, old_row, count = self._segments[place]
        return old_row + index - first

    def layout(self, pieces: list[bytes | Span]) -> dict[str, Any] | None:
        """Where each row lies in chunks.json (these pieces), for the next compile (its
        sha256 is added once it is written); None when an id could not be kept in it (a
        newline)."""
        ids = "\n".join(self.ids)
        if ids.count("\n") != max(len(self.ids) - 1, 0):
            return None
        size = sum(len(piece.data if isinstance(piece, Span) else piece) for piece in pieces)
        return {"head": size - _body_size(self.lengths) - len(_JSON_TAIL),
                "paths": self.paths, "ids": ids,
                "docs": _packed(self.docs), "lengths": _packed(self.lengths),
                **({"natural": _packed(self.natural[0]), "natural_target": self.natural[1]}
                   if self.natural is not None else {})}


def _packed(numbers: np.ndarray) -> str:
    """Non-negative numbers under 2**32 as base64 text, little-endian (a list of 70,000
    in JSON took longer to write and read back)."""
    return base64.b64encode(np.asarray(numbers, "<u4").tobytes()).decode("ascii")


def _unpacked(text: Any) -> np.ndarray | None:
    if not isinstance(text, str):
        return None
    try:
        data = base64.b64decode(text, validate=True)
    except ValueError:
        return None
    if len(data) % 4:
        return None
    return np.frombuffer(data, "<u4").astype(np.int64)


_JSON_TAIL = b"]}\n"  # what chunks_json writes after the rows


def _body_size(lengths: np.ndarray) -> int:
    """The bytes of rows of these lengths, joined by commas."""
    return int(lengths.sum()) + max(0, len(lengths) - 1)


def _previous_json(made_from: Any, path: Path | None, published: Any = None
                   ) -> tuple[bytes, dict, int, tuple] | None:
    """The previous chunks.json's bytes and layout (ids, docs and lengths unpacked), and
    the file, open (the caller closes it), when it is the file the last compile recorded
    and the layout fits it; else None."""
    old = made_from.get("json") if isinstance(made_from, dict) else None
    if path is None or not isinstance(old, dict):
        return None
    ids, paths, head = old.get("ids"), old.get("paths"), old.get("head")
    docs, lengths = _unpacked(old.get("docs")), _unpacked(old.get("lengths"))
    if not isinstance(ids, str) or docs is None or lengths is None:
        return None
    ids = ids.split("\n") if ids else []
    # (rows that start a row group; malformed, they are found again from the ids)
    natural = _unpacked(old.get("natural"))
    if natural is not None and len(natural) and not (
            int(natural[0]) >= 1 and int(natural[-1]) < len(ids)
            and bool((natural[1:] > natural[:-1]).all())):
        natural = None
    if not (isinstance(paths, list) and len(ids) == len(docs) == len(lengths)
            and all(type(p) is str for p in paths) and type(head) is int
            and (not len(docs) or int(docs.max()) < len(paths))
            and (not len(lengths) or int(lengths.min()) > 0)
            and ids == sorted(ids)):
        return None
    opened = recorded_file(path, old, keep_open=True, published=published)
    if opened is None:
        return None
    data, handle, stamp = opened
    if head < 0 or head + _body_size(lengths) + len(_JSON_TAIL) != len(data):
        os.close(handle)
        return None
    return data, {**old, "ids": ids, "docs": docs, "lengths": lengths, "natural": natural}, \
        handle, stamp


CHUNK_GROUP_ROWS = 512  # rows of chunks.parquet per row group, about


def _chunks_parquet(rows: _ChunkRows, fresh: dict[str, list[dict]], made_from: Any,
                    previous: Path, changed: set[str], published: Any,
                    opened: list[int]) -> tuple[list, dict]:
    """chunks.parquet in row groups cut by chunk id (artifacts/parquet_splice.py): the
    previous file's groups whose rows are all unchanged are copied (as spans of it, the
    file left open in `opened`: the kernel copies them), the others encoded from the
    rows (compiled now, or parsed from their text); every group is encoded when there is
    no usable previous file. The bytes are the same either way. As the pieces to write
    end to end, and the file's layout (parquet_splice.file_record), for the next build
    to splice it by."""
    import pyarrow as pa

    from ..artifacts.parquet import parquet_groups_bytes
    from ..artifacts.parquet_splice import (
        SpliceError,
        capped_starts,
        copied_from,
        group_bytes,
        group_ranges,
        record_of,
        splice_recorded,
    )
    from ..compile.chunks import chunks_table

    keys = rows.ids
    starts = capped_starts(rows.natural_starts(CHUNK_GROUP_ROWS), len(keys), CHUNK_GROUP_ROWS)
    compiled = {row["id"]: row for document in fresh.values() for row in document}
    found = _previous_chunks(made_from, previous, published)
    base, piece = None, group_bytes
    if found is not None:
        base, handle, _ = found
        opened.append(handle)
        piece = copied_from(*found)
    copied = _CopiedRows.of(base, rows.old_count) if base is not None and rows.old_count \
        else None

    def row(index: int) -> dict[str, Any]:
        return compiled.get(keys[index]) or rows.row(index)

    def group(start: int, end: int):
        """The table of one row group's rows."""
        indexes = range(start, end)
        # Rows copied from the previous chunks.json are taken from the previous
        # chunks.parquet as Arrow (parsing their JSON was most of an edit's compile).
        old = {i: rows.old_row(i) for i in indexes if keys[i] not in compiled} \
            if copied is not None else {}
        taken = [i for i in indexes if old.get(i) is not None]
        made = [i for i in indexes if old.get(i) is None]
        table = chunks_table([row(i) for i in made])
        if taken:
            try:
                table = copied.combined([old[i] for i in taken], table, taken, made)
            except pa.ArrowException:  # (a previous file of another schema: from JSON)
                table = chunks_table([row(i) for i in indexes])
        return table

    def encode(ranges: list[tuple[int, int]]) -> bytes:
        # A group at a time: a first build holds one group's table, not all 70,000 rows'
        # (the bytes are those of the whole table cut at the same rows)
        return parquet_groups_bytes(chunks_table([]).schema,
                                    (group(start, end) for start, end in ranges))

    if base is not None:
        try:
            changed_row = rows.changed_rows(changed)
            return splice_recorded(base, made_from.get("layout"), keys, starts,
                                   lambda start, end: not changed_row[start:end].any(),
                                   encode, piece)
        except SpliceError:
            pass  # a layout that does not fit the file: every group is encoded
    data = encode(group_ranges(starts, len(keys)))
    try:
        return [data], record_of(data, keys, starts)
    except SpliceError:  # a footer this module cannot splice (another pyarrow): no layout
        return [data], None


class _CopiedRows:
    """Rows of the previous chunks.parquet, read as Arrow a row group at a time."""

    def __init__(self, file, starts: list[int]) -> None:
        self.file = file
        self.starts = starts  # each group's first row, and the rows in all

    @classmethod
    def of(cls, data: bytes, rows: int) -> _CopiedRows | None:
        """The previous file's rows, when it holds as many as the previous chunks.json
        (the file the last compile recorded: both hold the same rows, in id order)."""
        import pyarrow.parquet as pq

        try:
            file = pq.ParquetFile(arrow_reader(data))
        except (OSError, ValueError):
            return None
        starts = [0]
        for index in range(file.metadata.num_row_groups):
            starts.append(starts[-1] + file.metadata.row_group(index).num_rows)
        return cls(file, starts) if starts[-1] == rows else None

    def combined(self, old_rows: list[int], made, taken: list[int], made_at: list[int]):
        """The table of rows old_rows (of the previous file) and `made` (a table), put
        in the order of their places (taken and made_at: the rows' new indexes)."""
        import pyarrow as pa

        group_of = [bisect.bisect_right(self.starts, row) - 1 for row in old_rows]
        groups = sorted(set(group_of))
        at, read_from = 0, {}  # each group's first row in the groups read, end to end
        for group in groups:
            read_from[group] = at
            at += self.starts[group + 1] - self.starts[group]
        picked = self.file.read_row_groups(groups).take(
            [read_from[group] + row - self.starts[group]
             for row, group in zip(old_rows, group_of, strict=True)])
        # (read back, a list's item is named "element": cast to the schema written)
        both = pa.concat_tables([picked.cast(made.schema), made])
        place = {index: n for n, index in enumerate([*taken, *made_at])}
        # (one chunk per column, as a table made from rows: chunking changes the pages)
        return both.take([place[index] for index in sorted(place)]).combine_chunks()


def _previous_chunks(made_from: Any, path: Path, published: Any = None
                     ) -> tuple[bytes, int, tuple] | None:
    """The previous staged chunks.parquet's bytes, the file open (the caller closes it)
    and its stamp, when it is the file the last compile recorded (by sha256; made_from:
    its record, checked by compile_chunks); else None."""
    if not isinstance(made_from, dict):
        return None
    return recorded_file(path, made_from, keep_open=True, published=published)


def recorded_file(path: Path, record: dict, keep_open: bool = False,
                  published: Any = None):
    """The bytes of a staged file a stage wrote last (record: their sha256), when they
    are still those; else None. With keep_open, also the file, open for reading
    (the caller closes it), and its stamp when read (artifacts.io.Span).

    They are hashed unless the file has the stamp (size, mtime, ctime, inode) it had
    when the last build published it with that sha256 (`published`, the unit store's
    record of it: remember_published): a published twin edited in place, even to the
    same size and mtime, has another ctime."""
    from ..artifacts.io import open_no_follow

    sha256 = record.get("sha256")
    if not isinstance(sha256, str):
        return None
    try:
        handle = open_no_follow(path)
    except OSError:
        return None
    try:
        info = os.fstat(handle)
        data = _read_all(handle)
        if not (read_as_published(published, path.name, data, info, sha256)
                or hashlib.sha256(data).hexdigest() == sha256):
            data = None
    except OSError:
        data = None
    if data is None or not keep_open:
        os.close(handle)
        return data
    return data, handle, file_stamp(info)


LEDGER_STAMP = "ledger:"  # + a facts ledger file's name, in the PUBLISHED record


def remember_published(store: UnitStore, staging: Path, digests: dict[str, str],
                       rows: dict[str, int], ledger: Path, ledger_files: Collection[str]
                       ) -> None:
    """After publishing: each staged file's stamp now (publishing links it, which moves
    its ctime) with the sha256 the manifest vouched for, so that the next compile need
    not hash the previous chunk files again while they keep that stamp, and likewise the
    facts ledger's copies (LEDGER_STAMP + name: the next facts stage's prior state); and
    the rows the manifest counted in each artifact, by its sha256, so that the next one
    need not count them again in the artifacts that did not change (published_rows)."""
    stamps = {}
    places = [(name, staging / name, sha256) for name, sha256 in digests.items()]
    places += [(LEDGER_STAMP + name, ledger / name, digests[name])
               for name in ledger_files if name in digests]
    for name, path, sha256 in places:
        try:
            stamps[name] = [*file_stamp(os.lstat(path)), sha256]
        except OSError:
            continue
    store.put(PUBLISHED, stamps)
    store.put(PUBLISHED_ROWS, rows)
    store.save()


def as_published(published: Any, name: str, info: os.stat_result, sha256: str) -> bool:
    """Whether a staged file (its stat) is as the last build published it with this
    sha256 (`published`: the unit store's PUBLISHED record, remember_published), so that
    it need not be hashed again."""
    known = published.get(name) if isinstance(published, dict) else None
    return known == [*file_stamp(info), sha256]


def vouched(published: Any, path: Path, info: os.stat_result, sha256: str) -> bool:
    """Whether a staged file (its stat) holds the bytes of this sha256 without hashing
    them: this process wrote it (artifacts.io.digest_written), or it is as the last build
    published it (as_published)."""
    return digest_written(path, info) == sha256 or as_published(published, path.name, info,
                                                                sha256)


def read_as_published(published: Any, name: str, data: bytes, info: os.stat_result,
                      sha256: str) -> bool:
    """as_published() for bytes read from the file whose stat was taken before the
    read: they must also be the whole file (no writer in between)."""
    return as_published(published, name, info, sha256) and len(data) == info.st_size


def published_rows(store: UnitStore) -> dict[str, int]:
    """remember_published's rows, by sha256 (what does not read back is left out)."""
    found = store.value(PUBLISHED_ROWS)
    if not isinstance(found, dict):
        return {}
    return {sha256: rows for sha256, rows in found.items()
            if type(rows) is int and rows >= 0}


def _read_all(handle: int) -> bytes:
    """An open file's bytes from its start, leaving the handle open (the spans copy from
    it by offset, so its position does not matter)."""
    with os.fdopen(os.dup(handle), "rb") as file:
        file.seek(0)
        return file.read()
