"""The incremental check: validate a project's inputs, typing only the documents whose
bytes changed and checking again only those a change can reach (units.py says why this
is exact). Its phases: look at each document's stat and digest (_look), type what
changed (_Reader), make the units, find what the change reaches (_reached), link (the
saved link step, or every summary), and check.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..artifacts.cache import PASSAGES
from ..diagnostics import Diagnostic, ordered
from ..document.kb import Mapper
from ..document.link import Summary, link, summarize
from ..document.model import ParsedDocument
from ..files import changed_lately, file_stamp
from .errors import BuildFailed
from .units import (
    GENERATION,
    LINKED,
    DocumentUnit,
    UnitStore,
    catalog_rows,
    declared_tenant,
    document_places,
    is_volatile,
    units_digest,
)

# Typed documents held at once (some 40 KB each). A validation that types more than this
# keeps none of them: it types and checks them this many at a time, and a later stage
# loads again, as many at a time, those it needs (Checked.documents).
TYPED_AT_ONCE = 20_000


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
    mark: str = ""  # the units digest its link step was saved with (LINKED)
    # which validation of the store this is (GENERATION, one more than the last), and
    # the documents whose units it made anew (changed or added): a later stage that
    # ran on the last validation's units needs to look again only at these
    generation: int = 0
    changed: set[str] = field(default_factory=set)
    # the units digest (units_digest) of the units it started from, where the saved link
    # step vouched for them ("" otherwise): a stage that ran on units of that digest
    # sees them changed only in `changed` and `removed` (the paths whose units it dropped)
    based_on: str = ""
    removed: list[str] = field(default_factory=list)
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

    def let_go(self, path: str) -> None:
        """Forget one typed document (loaded again if asked for: documents()); the
        knowledge base's list of them goes with the first."""
        self.typed.pop(path, None)
        self.kb.documents = []

    @staticmethod
    def in_parts(items: list) -> list[list]:
        """items in parts of TYPED_AT_ONCE: the typed documents a stage holds at once."""
        return [items[start:start + TYPED_AT_ONCE]
                for start in range(0, len(items), TYPED_AT_ONCE)]

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
                        digested: dict[str, tuple[str, str, int]] | None = None,
                        mapper: Mapper | None = None,
                        stamps: Mapping[str, str | None] | None = None) -> Checked:
    """Validate the project's inputs, typing only what changed (see the module doc).
    regular_files: the stat of the paths known to be regular files, not links, as this
    run took it: a document whose stat is its unit's stamp, at the same place, is the
    unit's, neither hashed nor its path resolved again (git's index). digested: where
    the (file, relative path, sha256, size) of those documents are added (digests
    gives the others': digests(file, relative path, volatile) -> sha256 or None, where
    volatile says the document's unit has content_path passages, checked every build).
    mapper: what parses the documents the parse cache has no row for (forked workers
    by default; the ray engine's map). stamps: the unit_stamp of some of those regular
    files, made from the same stat (None where it was not sure)."""
    from ..document.rules import check_document
    from ..kb import check_kb_wide
    from ..skills import SKILL_FILE
    from ..skills.rules import skill_names

    root = config.root
    previous, listed = store.documents()
    documents, others = [], []
    for item in inputs:
        name = os.path.basename(item.source.path)
        (others if name == SKILL_FILE or not name.endswith(".md") else documents).append(item)
    looked = _look(documents, previous, root, regular_files or {}, digests,
                   {} if digested is None else digested, stamps or {})
    reader = _Reader(root, looked, open_parse_cache, mapper)
    made: dict[str, DocumentUnit] = {}  # the changed documents' units, made as typed
    declarations: dict[str, tuple[str, dict]] = {}  # (shared by the units alike)
    kb = reader.type_changed(others, lambda doc: made.__setitem__(
        doc.path, _unit_of(looked, doc, declarations)))
    kb.skills_dir = config.skills_dir  # its folders are checked as `ctxfst validate` does
    units = _units_now(looked, made, previous)
    order, changed = looked.order, looked.changed
    live = [units[path] for path in order if units[path].ctxfst]
    # What the changed and removed documents declared before, and declare now: only
    # these ids' standing in the view can change, and only they can make a conflict or
    # close a cycle that spans documents.
    removed = sorted(listed - set(units))
    touched_paths = [*changed, *removed]
    old_summaries = store.index.summaries(
        [path for path in touched_paths if path in listed])
    entity_ids, chunk_ids = _declared_ids(
        [*old_summaries.values(), *(units[p].summary for p in changed if units[p].ctxfst)])
    names = skill_names(kb.skills)
    old_skills = store.value("skills")
    everything = (not any(path in previous for path in touched_paths)
                  and len(changed) == len(order)) or not _names_record(old_skills) \
        or (old_skills["names"] is None) != (names is None)
    standing = None if everything else store.index.standing(entity_ids, chunk_ids)
    linked_before = store.value(LINKED)
    reusable = _link_step_reusable(store, linked_before, previous)  # (before the units move)
    store.put_units([units[path] for path in changed], removed, listed)
    _restamp(store, looked, previous)
    if everything:
        recheck = set(order)  # nothing known to compare with: check everything
    else:
        recheck = set(changed) | _reached(store, standing, entity_ids, chunk_ids,
                                          set(old_skills["names"] or ()) ^ (names or set()),
                                          order)
    relative_of = {path: unit.relative for path, unit in units.items()}
    if reusable and not store.index.conflicted(entity_ids, chunk_ids) \
            and not store.index.cycles_through(chunk_ids):
        linked = store.index.link([], reader.position)
        # the catalog rows of the entities whose declarations changed (kept, the others)
        touched = _touched([*changed, *removed], previous, old_summaries, units)
        redeclared = _redeclared(touched)
        if redeclared:
            patched = _patched_catalog(store.index, redeclared, touched, relative_of)
            rest = redeclared - patched.keys()
            rows = catalog_rows(*store.index.catalog_of(rest, reader.position),
                                relative_of) if rest else {}
            store.index.put_catalog({**{entity_id: rows.get(entity_id) for entity_id in rest},
                                     **patched})
    else:  # in full, from every summary: the diagnostics in `ctxfst validate`'s order
        store.load_summaries(live)
        linked = link([unit.summary for unit in live], reader.position)
        store.index.clear_catalog()
        store.index.put_catalog(catalog_rows(linked.declarations, linked.merged,
                                              relative_of))
    typed = reader.typed
    missing = [unit.path for unit in live if unit.path in recheck and unit.path not in typed]
    # (all kept for the later stages, unless that is more than TYPED_AT_ONCE at once)
    hold = len(typed) + len(missing) <= TYPED_AT_ONCE
    out: list[Diagnostic] = [*refused, *linked.diagnostics]
    for item in kb.skills + kb.edge_files:
        out.extend(item.diagnostics)
    rechecked = []
    passages: set[str] = set()
    volatile: list[ParsedDocument] = []  # (a volatile document is always rechecked)
    loaded: dict[str, ParsedDocument] = {}
    # Documents not held are typed again to be checked: in forked workers, a batch at a
    # time, when they are too many to hold (a first build of more than TYPED_AT_ONCE).
    apart = {} if hold else _checked_apart(reader, missing, linked.view, names)
    parts = iter(Checked.in_parts([path for path in missing if path not in apart]))
    for unit in live:
        if unit.path in apart:
            unit.diagnostics, found = apart[unit.path]
            passages.update(found)
            rechecked.append(unit)
        elif unit.path in recheck:
            doc = typed.get(unit.path, loaded.get(unit.path))
            if doc is None:  # the next missing ones, typed together (in parallel)
                passages.update(_passages(root, volatile))
                volatile = []
                loaded = reader.load(next(parts))
                if hold:
                    typed.update(loaded)
                doc = loaded[unit.path]
            unit.diagnostics = doc.diagnostics + check_document(doc, linked.view, names, root)
            rechecked.append(unit)
            if unit.volatile:
                volatile.append(doc)
        out.extend(unit.diagnostics)
    passages.update(_passages(root, volatile))
    del loaded, volatile
    store.put_diagnostics(rechecked)
    wide, edges = check_kb_wide(kb, linked.view)
    out.extend(wide)
    passages = sorted(passages)
    store.put(PASSAGES, passages)
    store.put("skills", {"names": sorted(names) if names is not None else None})
    labels = store.entity_labels(live)  # (the facts catalogs)
    mark = units_digest(units[path] for path in order)
    store.put(LINKED, {"clean": not linked.diagnostics, "units": mark,
                        "entities": store.index.catalog_count()})
    generation = store.value(GENERATION)
    generation = generation + 1 if type(generation) is int and generation > 0 else 1
    store.put(GENERATION, generation)
    store.save()
    return Checked(root, live, typed, kb, linked, ordered(out), edges, reader.load, passages,
                   {"documents_checked": len(recheck & {u.path for u in live}),
                    "documents_typed": len(reader.counted)}, labels, mark, generation=generation,
                   changed=set(changed), based_on=linked_before["units"] if reusable else "",
                   removed=removed)


# Documents a worker types and checks at a time (_checked_apart), at most TYPED_AT_ONCE.
CHECK_BATCH = 250


def _checked_apart(reader: _Reader, paths: list[str], view, names
                   ) -> dict[str, tuple[list[Diagnostic], list[str]]]:
    """Each document's diagnostics (its own and check_document's against the linked
    view) and the content_path files it names (_passages), typed and checked in forked
    workers, a batch at a time; {} for one batch, one core or another engine's mapper
    (the caller's loop then checks them, as many at a time as it holds)."""
    from ..document.rules import check_document
    from ..parallel import forked_map, worker_count

    size = max(1, min(CHECK_BATCH, TYPED_AT_ONCE))
    batches = [paths[start:start + size] for start in range(0, len(paths), size)]
    if len(batches) < 2 or worker_count() < 2 or reader.mapper is not None:
        return {}  # (another engine's mapper parses what the cache lacks: not forked)

    def check(batch: list[str]) -> list[tuple[str, list[Diagnostic], list[str]]]:
        docs = reader.load(batch)
        return [(path, docs[path].diagnostics + check_document(docs[path], view, names,
                                                                 reader.root),
                 _passages(reader.root, [docs[path]])) for path in batch]

    found: dict[str, tuple[list[Diagnostic], list[str]]] = {}
    for results in forked_map(check, batches, threshold=2, chunksize=1):
        for path, diagnostics, passages in results:
            found[path] = (diagnostics, passages)
    reader.counted.update(found)  # (typed in the workers)
    return found


@dataclass
class _Looked:
    """The documents as their stats and digests show them, before any is parsed."""

    found: dict[str, tuple[Any, str, str | None]]  # path -> (input, relative, sha256)
    changed: list[str]  # paths whose bytes (or place, or relative path) are not their unit's
    stamps: dict[str, str | None]  # path -> its file's stamp now, when not its unit's
    places: dict[str, bytes]  # path -> its place in the knowledge base's order
    now_ns: int  # when the stamps were taken
    # new documents, not hashed by the look: _Reader hashes the bytes it types and adds
    # them to `digested` (file -> relative path, sha256, size), as the look does the others'
    unhashed: set[str] = field(default_factory=set)
    digested: dict[str, tuple[str, str, int]] = field(default_factory=dict)

    @property
    def order(self) -> list[str]:
        return list(self.found)


def _look(documents: list, previous: dict[str, DocumentUnit], root: Path,
          regular_files: Mapping[str, os.stat_result], digests,
          digested: dict[str, tuple[str, str, int]],
          known_stamps: Mapping[str, str | None]) -> _Looked:
    """Which documents changed since their units: one whose stat is its unit's stamp is
    its unit's without a read; the others are hashed (digests) and compared.
    known_stamps: the stamps of regular_files' stats, where made with them (a stamp
    is made here for the others, and for those it names None)."""
    from ..files import ProjectRelative

    relative_to_root = ProjectRelative(root, regular_files)
    places = document_places([(item.source.path, item.source.fs_path)
                              for item in documents])
    looked = _Looked({}, [], {}, places, time.time_ns(), digested=digested)
    found, stamps, now_ns = looked.found, looked.stamps, looked.now_ns
    for item in documents:
        path = item.source.path
        if path in found:
            continue  # (walked twice: the skills folder inside content/): one unit
        fs_path = item.source.fs_path
        unit = previous.get(path)
        info = regular_files.get(fs_path)
        if info is not None and unit is not None and unit.stamp is not None \
                and unit.stamp == (known_stamps.get(fs_path) or unit_stamp(info, now_ns)) \
                and unit.place == places[path] \
                and not unit.volatile and unit.relative == relative_to_root.of_regular(fs_path):
            found[path] = (item, unit.relative, unit.sha256)
            digested[fs_path] = (unit.relative, unit.sha256, info.st_size)
            continue
        relative = relative_to_root(fs_path, path)
        if unit is None and info is not None:  # (a first build: every document)
            found[path] = (item, relative, None)
            looked.changed.append(path)
            looked.unhashed.add(path)
            stamps[path] = unit_stamp(info, now_ns)
            continue
        sha = digests(fs_path, relative, unit is not None and unit.volatile)
        found[path] = (item, relative, sha)
        stamp = unit_stamp(info, now_ns) if info is not None and sha is not None else None
        if (sha is None or unit is None or unit.sha256 != sha or unit.relative != relative
                or unit.volatile or unit.place != places[path]):
            looked.changed.append(path)
            stamps[path] = stamp
        elif stamp != unit.stamp:
            stamps[path] = stamp  # (its bytes are the unit's: its stamp is kept anew)
    return looked


class _Reader:
    """Types documents from exactly the bytes the look hashed: a file edited since stops
    the build (it would be checked from bytes its digest does not name)."""

    def __init__(self, root: Path, looked: _Looked, open_parse_cache: Callable,
                 mapper: Mapper | None = None) -> None:
        self.root, self.looked, self.open_parse_cache = root, looked, open_parse_cache
        self.mapper = mapper
        self.typed: dict[str, ParsedDocument] = {}  # path -> typed in this run, and kept
        self.counted: set[str] = set()  # every document typed in this run
        self.holding = True  # whether the documents typed are kept (not typed in parts)

    def type_changed(self, others: list, made: Callable[[ParsedDocument], Any]):
        """The knowledge base of the changed documents and the other inputs (skills,
        extra-edge files), typed; a changed file's bytes become its digest. Each typed
        document is given to `made`, and kept; more than TYPED_AT_ONCE are typed that
        many at a time, and none kept (nor in the knowledge base's list)."""
        from ..kb import load_kb

        changed = self.looked.changed
        self.holding = len(changed) <= TYPED_AT_ONCE
        kb = None
        cache = self.open_parse_cache()
        try:
            for paths in Checked.in_parts(changed) or [[]]:  # (the others come with the first)
                part = load_kb(self.root, self._verified(paths, False)
                               + (others if kb is None else []), cache, self.mapper)
                self.counted.update(doc.path for doc in part.documents)
                for doc in part.documents:
                    made(doc)
                if self.holding:
                    self.typed.update((doc.path, doc) for doc in part.documents)
                else:
                    part.documents = []
                if kb is None:
                    kb = part
        finally:
            cache.close()
        return kb

    def load(self, paths: list[str]) -> dict[str, ParsedDocument]:
        """Documents typed now, together, from the bytes their units record."""
        from ..kb import load_kb

        cache = self.open_parse_cache()
        try:
            loaded = {doc.path: doc for doc in load_kb(self.root, self._verified(paths, True),
                                                       cache, self.mapper).documents}
        finally:
            cache.close()
        self.counted.update(loaded)
        gone = [path for path in paths if path not in loaded]
        if gone:  # plain Markdown now: it changed during the build
            raise BuildFailed(f"{gone[0]} changed during the build: run `doit` again")
        return loaded

    def position(self, path: str, key: tuple) -> tuple[int, int]:
        """Where a document declares key (the link step's diagnostics point there); one
        typed for it is kept, unless the changed ones were typed in parts."""
        doc = self.typed.get(path)
        if doc is None:
            doc = self.load([path])[path]
            if self.holding:
                self.typed[path] = doc
        pos = doc.source_map.value(key)
        return pos.line, pos.column

    def _verified(self, paths: list[str], check: bool) -> list:
        """The inputs of paths with the bytes to parse: exactly those whose sha256 the
        unit records (check: a file edited since it was hashed stops the build). A
        stamp is kept only when it is the identity of the file the bytes came from (a
        folder link pointed elsewhere meanwhile reads another file)."""
        from ..document.kb import Input
        from ..document.source import Source

        found, stamps, now_ns = self.looked.found, self.looked.stamps, self.looked.now_ns
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
                if path in self.looked.unhashed:
                    self.looked.digested[os.fspath(item.source.fs_path)] = (
                        relative, actual, len(data))
                item = Input(Source(item.source.path, item.source.fs_path, data), item.explicit)
            chosen.append(item)
        return chosen


def _unit_of(looked: _Looked, doc: ParsedDocument,
             declarations: dict[str, tuple[str, dict]]) -> DocumentUnit:
    """The unit of a changed document, typed now. declarations: each declaration met so
    far by its key (dump_key), as (key, declaration): an equal one is held once, its id
    and name with it (documents re-declare the same entities), as the units read back
    from the store share theirs."""
    _, relative, sha = looked.found[doc.path]
    summary = summarize(doc)
    keys = summary.dump_keys()
    for number, item in enumerate(summary.entities):
        keys[number], dump = declarations.setdefault(keys[number], (keys[number], item[4]))
        item[1], item[2], item[4] = dump["id"], dump["name"], dump
    return DocumentUnit(doc.path, relative, sha or "", summary, [], is_volatile(doc),
                        declared_tenant(doc), looked.places[doc.path],
                        stamp=looked.stamps.get(doc.path))


def _units_now(looked: _Looked, made: dict[str, DocumentUnit],
               previous: dict[str, DocumentUnit]) -> dict[str, DocumentUnit]:
    """Every document's unit: made anew for a changed one (made: those typed), its
    unit's for the others."""
    units: dict[str, DocumentUnit] = {}
    changed = set(looked.changed)
    for path in looked.order:
        unit = made.get(path)
        if unit is not None:
            units[path] = unit
        elif path in changed:  # plain Markdown beside the documents
            _, relative, sha = looked.found[path]
            units[path] = DocumentUnit(path, relative, sha or "", None,
                                       place=looked.places[path],
                                       stamp=looked.stamps.get(path))
        else:
            units[path] = previous[path]
    return units


def _declared_ids(summaries: list[Summary]) -> tuple[set[str], set[str]]:
    """The entity ids and the chunk ids these summaries declare."""
    entity_ids: set[str] = set()
    chunk_ids: set[str] = set()
    for summary in summaries:
        entity_ids.update(item[1] for item in summary.entities)
        chunk_ids.update(item[1] for item in summary.chunks)
    return entity_ids, chunk_ids


def _link_step_reusable(store: UnitStore, linked_before: Any,
                        previous: dict[str, DocumentUnit]) -> bool:
    """Whether the saved link step holds for the units the store had: it was clean,
    for exactly those units, and left its whole catalog."""
    return (isinstance(linked_before, dict) and linked_before.get("clean") is True
            and linked_before.get("units") == units_digest(previous.values())
            and linked_before.get("entities") == store.index.catalog_count())


def _restamp(store: UnitStore, looked: _Looked, previous: dict[str, DocumentUnit]) -> None:
    """Keep the new stamps of documents whose bytes are their unit's."""
    changed = set(looked.changed)
    restamped = [previous[path] for path in looked.stamps if path not in changed]
    for unit in restamped:
        unit.stamp = looked.stamps[unit.path]
    store.put_stamps(restamped)


def _reached(store: UnitStore, standing: tuple, entity_ids: set[str], chunk_ids: set[str],
             skill_names_changed: set[str], order: list[str]) -> set[str]:
    """The documents a change reaches: those naming an id whose standing in the view
    changed (standing: as it was before the units moved), or a skill name that came or
    went."""
    now = store.index.standing(entity_ids, chunk_ids)
    ids = {i for i in entity_ids if standing[0].get(i) != now[0].get(i)}
    ids |= standing[2] ^ now[2]
    ids |= skill_names_changed
    tails = {t for t in standing[1].keys() | now[1].keys()
             if standing[1].get(t) != now[1].get(t)}
    return store.index.referring(ids, tails) & set(order)


def _touched(paths: list[str], previous: dict[str, DocumentUnit], old: dict[str, Summary],
             units: dict[str, DocumentUnit]) -> list[tuple]:
    """Each touched (changed or removed) document's entity declarations before and now
    (_declarations), and its unit before and now (None where it had or has none)."""
    found = []
    for path in paths:
        unit = units.get(path)
        found.append((_declarations(old.get(path)), _declarations(
            unit.summary if unit is not None and unit.ctxfst else None),
            previous.get(path), unit))
    return found


def _redeclared(touched: list[tuple]) -> set[str]:
    """The entity ids whose catalog rows these changes (_touched) can change: those a
    changed document declared, or declares, otherwise than before (another declaration,
    place in entities[], or project-relative path), and those a removed document
    declared."""
    found: set[str] = set()
    for before, now, was, unit in touched:
        if before != now or unit is None or was is None or was.relative != unit.relative:
            found.update(item[1] for item in [*before, *now])
    return found


def _declarations(summary: Summary | None) -> list[tuple]:
    """A document's entity declarations as (index, id, dump key), in entities[] order."""
    if summary is None:
        return []
    return [(item[0], item[1], key) for item, key in
            zip(summary.entities, summary.dump_keys(), strict=True)]


def _patched_catalog(index, ids: set[str], touched: list[tuple],
                     relative_of: dict[str, str]) -> dict[str, dict | None]:
    """The catalog rows of those of these entities whose merged declaration the touched
    (changed or removed) documents (_touched) cannot change, from their kept rows: every
    declaration of the entity, before and now, is the same dump (so the merge is that
    dump), and only the documents that declare it change (their paths in declared_in).
    An entity no document declares any more has no row (None). The others (another
    dump among them, a new entity, a path two units share) are left to catalog_of, which
    reads every declaration of them (20,000 each for an entity all documents of a
    100,000-document knowledge base declare)."""
    from collections import Counter

    kept = index.catalog_rows_of(ids)
    held = None  # how many units hold each project-relative path now
    patched: dict[str, dict | None] = {}
    for entity_id in sorted(ids):
        row = kept.get(entity_id)
        declared_in = row.get("declared_in") if row is not None else None
        gone: set[str] = set()  # the touched documents' paths before, where they declared it
        come: set[str] = set()  # and now
        dumps: set[str] = set()  # the dumps they declared it with, before and now
        known = True
        for was_declared, now_declared, was, unit in touched:
            before = [key for _, found, key in was_declared if found == entity_id]
            now = [key for _, found, key in now_declared if found == entity_id]
            dumps.update(before, now)
            known &= was is not None or not before
            if before and was is not None:
                gone.add(was.relative)
            if now:
                come.add(unit.relative)
        if not (isinstance(declared_in, list) and all(type(p) is str for p in declared_in)) \
                or len(dumps) != 1 or not known:
            continue  # (a kept row not of the shape this module writes: made anew)
        count, alike = index.declarations_of(entity_id, next(iter(dumps)))
        if count == 0:
            patched[entity_id] = None
            continue
        if alike != count:
            continue  # another dump among its declarations: the merge may change
        if held is None:
            held = Counter(relative_of.values())
        if any(held[relative] > (relative in come) for relative in gone):
            continue  # a path another unit holds too: it may declare the entity still
        patched[entity_id] = {**row, "declared_in": sorted(
            (set(declared_in) - gone) | come)}
    return patched


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
