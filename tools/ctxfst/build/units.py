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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from .. import __version__
from ..diagnostics import RULES, Diagnostic, Severity, ordered
from ..document.link import Summary, View, dependency_digest, link, summarize
from ..document.model import ParsedDocument
from .cache import connect

UNIT_FORMAT = "1"
_SCHEMA = "CREATE TABLE IF NOT EXISTS units (key TEXT PRIMARY KEY, value BLOB NOT NULL)"
_MAX_ROW = 64 * 1024 * 1024


@dataclass
class DocumentUnit:
    """One document as the last build checked it."""

    relative: str            # project-relative POSIX path
    sha256: str              # of its bytes
    summary: Summary | None  # None: plain Markdown found beside the documents
    diagnostics: list[Diagnostic] = field(default_factory=list)
    volatile: bool = False   # content_path passages: other files, so always checked
    tenant: Any = None       # its frontmatter's `tenant:` value, when it has one

    def as_data(self) -> dict[str, Any]:
        return {"sha256": self.sha256, "summary": self.summary.as_data() if self.summary
                else None, "diagnostics": [[d.path, d.line, d.column, d.code, d.message,
                                             d.severity.value] for d in self.diagnostics],
                "volatile": self.volatile, "tenant": self.tenant}

    @classmethod
    def from_data(cls, relative: str, data: Any) -> DocumentUnit | None:
        if not isinstance(data, dict) or set(data) != {"sha256", "summary", "diagnostics",
                                                       "volatile", "tenant"}:
            return None
        summary = None
        if data["summary"] is not None:
            summary = Summary.from_data(data["summary"])
            if summary is None:
                return None
        if not isinstance(data["sha256"], str) or type(data["volatile"]) is not bool \
                or data["tenant"] is not _tenant(data["tenant"]):
            return None
        if not isinstance(data["diagnostics"], list):
            return None
        diagnostics = _read_diagnostics(data["diagnostics"])
        if diagnostics is None:
            return None
        return cls(relative, data["sha256"], summary, diagnostics, data["volatile"],
                   data["tenant"])


_ROW_TYPES = (str, int, int, str, str, str)
_SEVERITIES = {severity.value: severity for severity in Severity}


def _read_diagnostics(rows: list) -> list[Diagnostic] | None:
    found = []
    for row in rows:
        if type(row) is not list or tuple(map(type, row)) != _ROW_TYPES:
            return None
        path, line, column, code, message, severity = row
        if not (line >= 1 and column >= 1 and code in RULES and severity in _SEVERITIES):
            return None
        found.append(Diagnostic(path, line, column, code, message, _SEVERITIES[severity]))
    return found


def _tenant(value: Any) -> Any:
    """A `tenant:` as JSON can keep it: the string, None when absent, False for a value
    that is no string (it decides no tenant)."""
    return value if value is None or isinstance(value, str) else False


class UnitStore:
    """The units of one project, keyed "doc:<relative path>", plus the build's link
    records ("view", "cycles") and chunk rows ("rows:<unit key>")."""

    def __init__(self, path: Path) -> None:
        self.db = connect(path, _SCHEMA)
        try:
            if self.db.execute("PRAGMA user_version").fetchone()[0] != int(UNIT_FORMAT):
                with self.db:
                    self.db.execute("DELETE FROM units")
                    self.db.execute(f"PRAGMA user_version = {int(UNIT_FORMAT)}")
        except sqlite3.Error:
            pass
        self.pending: dict[str, bytes] = {}
        self.removed: set[str] = set()

    def _rows(self, sql: str, args: tuple = ()) -> list[tuple[str, bytes]]:
        try:
            return [(key, value) for key, value in self.db.execute(sql, args)
                    if isinstance(value, bytes) and len(value) <= _MAX_ROW]
        except sqlite3.Error:
            return []  # damaged pages: everything is recomputed

    def documents(self) -> dict[str, DocumentUnit]:
        found = {}
        for key, value in self._rows("SELECT key, value FROM units WHERE key >= 'doc:' AND "
                                     "key < 'doc;' AND typeof(value) = 'blob'"):
            relative = key[4:]
            unit = DocumentUnit.from_data(relative, _loads(value))
            if unit is not None:
                found[relative] = unit
        return found

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

    def put(self, key: str, value: Any) -> None:
        self.put_blob(key, json.dumps(value, ensure_ascii=False, separators=(",", ":"),
                                      allow_nan=False).encode("utf-8"))

    def put_blob(self, key: str, blob: bytes) -> None:
        self.pending[key] = blob
        self.removed.discard(key)

    def remove(self, key: str) -> None:
        self.pending.pop(key, None)
        self.removed.add(key)

    def keys(self, prefix: str) -> set[str]:
        try:
            return {key for (key,) in self.db.execute(
                "SELECT key FROM units WHERE key >= ? AND key < ?",
                (prefix, prefix[:-1] + chr(ord(prefix[-1]) + 1)))}
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
        self.db.close()


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
    typed: dict[str, ParsedDocument]          # relative path -> typed this run
    kb: Any                                   # the loaded KnowledgeBase (skills, edges)
    link: Any
    diagnostics: list[Diagnostic]
    extra_edges: list
    load: Callable[[list[str]], dict[str, ParsedDocument]]  # relative paths -> typed
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def files(self) -> int:
        """The files checked: documents, skills and extra-edge files."""
        return len(self.units) + len(self.kb.skills) + len(self.kb.edge_files)

    def document(self, relative: str) -> ParsedDocument:
        return self.documents([relative])[relative]

    def documents(self, relatives: list[str]) -> dict[str, ParsedDocument]:
        """Typed documents (those not typed yet are loaded together)."""
        missing = [r for r in relatives if r not in self.typed]
        if missing:
            self.typed.update(self.load(missing))
        return {relative: self.typed[relative] for relative in relatives}


def check_incrementally(config, inputs: list, refused: list[Diagnostic], digests,
                        open_parse_cache: Callable, store: UnitStore) -> Checked:
    """Validate the project's inputs, typing only what changed (see the module doc)."""
    from ..document.kb import load_kb
    from ..document.rules import (check_document, check_extra_edges, check_skills,
                                  skill_names)
    from ..files import ProjectRelative
    from ..skills.index import skill_node_id
    from ..skills.parse import SKILL_FILE

    root = config.root
    relative_to_root = ProjectRelative(root)
    previous = store.documents()
    documents, others = [], []
    for item in inputs:
        name = os.path.basename(item.source.path)
        (others if name == SKILL_FILE or not name.endswith(".md") else documents).append(item)
    identity: dict[str, tuple[Any, str | None]] = {}  # relative -> (input, sha256)
    order: list[str] = []
    changed: list[str] = []
    for item in documents:
        relative = relative_to_root(item.source.fs_path, item.source.path)
        sha = digests(item.source.fs_path, relative)
        identity[relative] = (item, sha)
        order.append(relative)
        unit = previous.get(relative)
        if (sha is None or unit is None or unit.sha256 != sha or unit.volatile
                or (unit.summary is not None and unit.summary.path != item.source.path)):
            changed.append(relative)

    def load(relatives: list[str]) -> dict[str, ParsedDocument]:
        cache = open_parse_cache()
        try:
            found = load_kb(root, [identity[r][0] for r in relatives], cache).documents
        finally:
            cache.close()
        loaded = {relative_to_root(doc.fs_path, doc.path): doc for doc in found}
        gone = [r for r in relatives if r not in loaded]
        if gone:  # plain Markdown now: it changed during the build
            from .pipeline import BuildFailed

            raise BuildFailed(f"{gone[0]} changed during the build: run `doit` again")
        return loaded

    cache = open_parse_cache()
    try:
        kb = load_kb(root, [identity[r][0] for r in changed] + others, cache)
    finally:
        cache.close()
    typed = {relative_to_root(doc.fs_path, doc.path): doc for doc in kb.documents}
    units: dict[str, DocumentUnit] = {}
    for relative in order:
        doc = typed.get(relative)
        if doc is not None:
            units[relative] = DocumentUnit(relative, identity[relative][1] or "",
                                           summarize(doc), [], is_volatile(doc),
                                           declared_tenant(doc))
        elif relative in changed:  # plain Markdown beside the documents
            units[relative] = DocumentUnit(relative, identity[relative][1] or "", None)
        else:
            units[relative] = previous[relative]
    live = [units[r] for r in order if units[r].summary is not None]
    by_path = {unit.summary.path: unit.relative for unit in live}

    def document(relative: str) -> ParsedDocument:
        if relative not in typed:
            typed.update(load([relative]))
        return typed[relative]

    def position(path: str, key: tuple) -> tuple[int, int]:
        pos = document(by_path[path]).source_map.value(key)
        return pos.line, pos.column

    summaries = [unit.summary for unit in live]
    no_cycles = store.value("cycles") == dependency_digest(summaries)
    linked = link(summaries, position, cycles=(lambda: []) if no_cycles else None)
    names = skill_names(kb.skills)
    old_view = View.from_data(store.value("view"))
    old_names = store.value("skill_names")
    recheck = set(changed)
    if old_view is None or (old_names is None) != (names is None):
        recheck.update(order)
    else:
        ids, tails = linked.view.changed_since(old_view)
        ids |= set(old_names or ()) ^ (names or set())
        if ids or tails:
            for unit in live:
                if any(ref in ids or ref.split(":")[-1] in tails for ref in unit.summary.refs):
                    recheck.add(unit.relative)
    missing = [r for r in order if r in recheck and r not in typed
               and units[r].summary is not None]
    if missing:  # typed together: in parallel, with one cache query
        typed.update(load(missing))
    out: list[Diagnostic] = [*refused, *linked.diagnostics]
    for item in kb.skills + kb.edge_files:
        out.extend(item.diagnostics)
    for unit in live:
        if unit.relative in recheck:
            doc = document(unit.relative)
            unit.diagnostics = doc.diagnostics + check_document(doc, linked.view, names, root)
            store.put(f"doc:{unit.relative}", unit.as_data())
        out.extend(unit.diagnostics)
    for relative in changed:
        if units[relative].summary is None:
            store.put(f"doc:{relative}", units[relative].as_data())
    for relative in set(previous) - set(units):
        store.remove(f"doc:{relative}")
    out.extend(check_skills(kb, linked.view, False))
    skill_nodes = {skill_node_id(s.record.name) for s in kb.skills if s.record is not None}
    edges = check_extra_edges(kb, set(linked.view.types) | skill_nodes, out)
    diagnostics = ordered(out)
    store.put("view", linked.view.as_data())
    store.put("skill_names", sorted(names) if names is not None else None)
    if not any(d.code == "CTX207" for d in linked.diagnostics):
        store.put("cycles", dependency_digest(summaries))
    store.save()
    return Checked(root, [units[r] for r in order if units[r].summary is not None], typed,
                   kb, linked, diagnostics, edges, load,
                   {"documents_checked": len(recheck & {u.relative for u in live}),
                    "documents_typed": len(typed)})


@dataclass
class Compiled:
    """The chunk artifacts' bytes and what they were made from."""

    json: bytes
    parquet: bytes
    chunks: int
    entity_rows: list[dict[str, Any]]
    recompiled: int
    made_from: dict[str, Any]

    @property
    def entities(self) -> int:
        return len(self.entity_rows)

    def record(self, store: UnitStore) -> None:
        """Once the staged chunks.parquet holds these bytes: the next build splices it."""
        store.put("compiled", self.made_from)
        store.save()


def _kept_rows(blob: bytes | None, summary: Summary) -> list[tuple[str, bytes]] | None:
    """A document's kept rows: their compact JSON texts, one per line (compact JSON holds
    no raw newline), each the row of the summary's chunk at its place; else None."""
    if blob is None:
        return None
    texts = blob.split(b"\n") if blob else []
    if len(texts) != len(summary.chunks):
        return None
    for text, chunk in zip(texts, summary.chunks):
        if not text.startswith(_row_start(chunk[1])):
            return None
    return [(chunk[1], text) for chunk, text in zip(summary.chunks, texts)]


def _row_start(chunk_id: str) -> bytes:
    return ('{"id":' + json.dumps(chunk_id, ensure_ascii=False) + ",").encode("utf-8")


def compile_chunks(checked: Checked, store: UnitStore, previous_parquet: Path) -> Compiled:
    """chunks.json and chunks.parquet from the units: rows are compiled only for the
    documents without kept rows, chunks.json is joined from the rows' texts, and
    chunks.parquet splices the changed documents' rows into the previous one."""
    from ..compile.chunks import (CompileError, chunks_json, document_rows, entity_rows,
                                  row_text)

    root = checked.root.resolve()
    keys = {unit.relative: "rows:" + unit_key(unit.relative, unit.sha256)
            for unit in checked.units}
    cached = store.blobs([keys[u.relative] for u in checked.units if not u.volatile])
    texts: list[tuple[str, bytes]] = []
    fresh: dict[str, list[dict[str, Any]]] = {}  # relative -> rows compiled now
    errors: list[Diagnostic] = []
    kept_rows = {unit.relative: None if unit.volatile else
                 _kept_rows(cached.get(keys[unit.relative]), unit.summary)
                 for unit in checked.units}
    checked.documents([r for r, kept in kept_rows.items() if kept is None])  # together
    for unit in checked.units:
        kept = kept_rows[unit.relative]
        if kept is None:
            rows = document_rows(checked.document(unit.relative), unit.relative, root,
                                 errors)
            fresh[unit.relative] = rows
            kept = [(row["id"], row_text(row).encode("utf-8")) for row in rows]
            if not unit.volatile:
                store.put_blob(keys[unit.relative], b"\n".join(text for _, text in kept))
        texts.extend(kept)
    if errors:
        raise CompileError(errors)
    wanted = {keys[u.relative] for u in checked.units if not u.volatile}
    for key in store.keys("rows:") - wanted:
        store.remove(key)
    store.save()
    texts.sort(key=lambda item: item[0])
    relative_of = {unit.summary.path: unit.relative for unit in checked.units}
    declared_in = {entity_id: [relative_of[place.path] for place in places]
                   for entity_id, places in checked.link.declarations.items()}
    entities = entity_rows(checked.link.merged, declared_in)
    documents = {unit.relative: keys[unit.relative] for unit in checked.units}
    volatile = {unit.relative for unit in checked.units if unit.volatile}
    parquet = _chunks_parquet(checked, texts, fresh, documents, volatile,
                              store.value("compiled"), previous_parquet)
    made_from = {"sha256": hashlib.sha256(parquet).hexdigest(), "documents": documents}
    return Compiled(chunks_json(entities, [text for _, text in texts]), parquet, len(texts),
                    entities, len(fresh), made_from)


def _chunks_parquet(checked: Checked, texts: list[tuple[str, bytes]],
                    fresh: dict[str, list[dict]], documents: dict[str, str],
                    volatile: set[str], made_from: Any, previous: Path) -> bytes:
    from ..compile.chunks import chunks_table
    from .io import parquet_bytes

    base = _previous_chunks(made_from, previous)
    if base is None:  # no usable previous table: every row (compiled now, or its text)
        compiled = {row["id"]: row for rows in fresh.values() for row in rows}
        return parquet_bytes(chunks_table([compiled.get(chunk_id) or json.loads(text)
                                           for chunk_id, text in texts]))
    import pyarrow as pa
    import pyarrow.compute as pc

    before: dict[str, str] = made_from["documents"]
    changed = {relative for relative, key in documents.items()
               if before.get(relative) != key or relative in volatile}
    changed |= set(before) - set(documents)
    rows = []
    for unit in checked.units:
        if unit.relative in changed:
            rows.extend(fresh.get(unit.relative) or [
                json.loads(text) for text in _texts_of(checked, unit, texts)])
    table = chunks_table(rows)
    kept = base.cast(table.schema).filter(pc.invert(pc.is_in(
        base.column("source"), value_set=pa.array(sorted(changed), pa.string()))))
    both = pa.concat_tables([kept, table])
    order = pc.sort_indices(both.column("chunk_id"))
    merged = both.take(order).combine_chunks().replace_schema_metadata(table.schema.metadata)
    return parquet_bytes(merged)


def _texts_of(checked: Checked, unit: DocumentUnit, texts: list[tuple[str, bytes]]
              ) -> list[bytes]:
    ids = {chunk[1] for chunk in unit.summary.chunks}
    return [text for chunk_id, text in texts if chunk_id in ids]


def _previous_chunks(made_from: Any, path: Path):
    """The previous staged chunks.parquet, when it is the one the last compile recorded
    (by sha256) and reads as a chunks table; else None."""
    if not (isinstance(made_from, dict) and isinstance(made_from.get("sha256"), str)
            and isinstance(made_from.get("documents"), dict)
            and all(isinstance(v, str) for v in made_from["documents"].values())):
        return None
    from .io import read_regular

    try:
        data = read_regular(path)[0]
    except OSError:
        return None
    if hashlib.sha256(data).hexdigest() != made_from["sha256"]:
        return None
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        return pq.read_table(pa.BufferReader(data))
    except (pa.ArrowException, OSError, ValueError):
        return None
