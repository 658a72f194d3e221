"""The link step: what spans documents, checked from their interface summaries alone.

A document's summary is what other documents can see of it: the entities it declares,
its chunk ids and their dependencies, and the ids it refers to. The link step merges the
summaries into the catalog view every document is checked against (entity types, chunk
ids, the id suggestions) and finds what no single document shows: conflicting entity
declarations (CTX202), chunk ids used twice (CTX203) and dependency cycles (CTX207).

Summaries are plain data, so a build keeps them between runs (as rows indexed by id:
pipeline.link_index) and links a 10,000-document knowledge base without typing its
documents again, from the ids an edit touches. A diagnostic the
link step raises needs a position inside a document; `position` gives it (and loads that
document when only its summary is at hand: only for errors, which stop a build).
"""

from __future__ import annotations

import difflib
import hashlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..artifacts.io import compact_json
from ..diagnostics import Diagnostic, diag
from .model import ParsedDocument, strip_not

SUMMARY_FORMAT = 1
_CONDITIONS = ("preconditions", "postconditions", "state_refs")
_CYCLE_ENDS = 10  # ids shown at each end of a long cycle: a message never grows with the KB


@dataclass
class Summary:
    """The interface of one document (positions are indexes into entities[]/chunks[])."""

    path: str                                  # as diagnostics show it
    entities: list[list] = field(default_factory=list)   # [index, id, name, type, dump]
    chunks: list[list] = field(default_factory=list)     # [index, id, [dependencies]]
    refs: list[str] = field(default_factory=list)        # ids named, sorted
    keys: list[str] | None = None   # each declaration's dump_key (computed when needed)

    def dump_keys(self) -> list[str]:
        if self.keys is None:
            self.keys = [dump_key(item[4]) for item in self.entities]
        return self.keys

    def dumps(self) -> dict[str, dict]:
        return {key: item[4] for item, key in zip(self.entities, self.dump_keys(), strict=True)}


_LISTS = ("aliases", "preconditions", "postconditions", "related_skills")


def dump_key(dump: dict) -> str:
    """A declaration's key: the digest of the text it is kept as (compact_json)."""
    return text_key(compact_json(dump))


def text_key(text: bytes) -> str:
    return hashlib.sha256(text).hexdigest()[:32]


def dump_ok(key: str, dump: Any, text: bytes) -> bool:
    """A kept declaration (`dump`, read from `text`) is what summarize() writes: the
    text its key names, and the fields later stages read with their types."""
    return (isinstance(dump, dict) and all(isinstance(dump.get(name), str)
                                           for name in ("id", "name", "type"))
            and all(_strings(dump.get(name, [])) for name in _LISTS)
            and text_key(text) == key)


def _strings(value: Any) -> bool:
    """A list of strings only (join checks every item in C: a TypeError at the first that
    is no str; 80,000 lists are checked when a 10,000-document build starts)."""
    if not isinstance(value, list):
        return False
    try:
        "".join(value)
    except TypeError:
        return False
    return True


def summarize(doc: ParsedDocument) -> Summary:
    """A typed document's interface (cheap: no positions are computed)."""
    refs: set[str] = set()
    entities = []
    for index, entity in doc.entities:
        entities.append([index, entity.id, entity.name, entity.type,
                         entity.model_dump(mode="json", exclude_none=True)])
        refs.update(_conditions(entity))
        refs.update(entity.related_skills)
    chunks = []
    for index, record in doc.chunks:
        chunks.append([index, record.id, list(record.dependencies)])
        refs.update(record.entities)
        refs.update(record.dependencies)
        refs.update(_conditions(record))
    return Summary(doc.path, entities, chunks, sorted(refs))


def _conditions(record) -> list[str]:
    found = []
    for name in _CONDITIONS:
        value = record.field_value(name)
        if value and isinstance(value, list):
            found.extend(strip_not(item)[1] for item in value if isinstance(item, str))
    return found


@dataclass
class Declaration:
    path: str    # the declaring document, as diagnostics show it
    index: int   # in its entities[]


@dataclass
class View:
    """What every document is checked against."""

    types: dict[str, str]          # entity id -> type
    chunk_ids: set[str]
    by_tail: dict[str, str]        # last id part -> the first declared id with it

    def suggest(self, reference: str) -> str:
        """A hint for an unknown id: a declared one that differs only by its type prefix
        (state: vs entity:), else the closest declared id of the same prefix (a typo)."""
        candidate = self.by_tail.get(tail(reference))
        if (candidate is None or candidate == reference) and self._typo_budget() > 0:
            self._typo_left[0] -= 1
            alike = self._ids_by_prefix().get(reference.rpartition(":")[0], ())
            close = difflib.get_close_matches(reference, alike, n=1, cutoff=0.8)
            candidate = close[0] if close else None
        if candidate is None or candidate == reference:
            return ""
        return f"; did you mean '{candidate}'?"

    # Each typo hint compares the id with every declared id of its prefix: a document of
    # 10,000 unknown ids must not cost 10,000 such scans. (Per document: its diagnostics
    # are the same whichever documents were checked before it.)
    TYPO_HINTS = 50

    def start_document(self) -> None:
        self._typo_left = [self.TYPO_HINTS]

    def _typo_budget(self) -> int:
        if "_typo_left" not in self.__dict__:
            self.start_document()
        return self._typo_left[0]

    def _ids_by_prefix(self) -> dict[str, list[str]]:
        if "_by_prefix" not in self.__dict__:
            grouped: dict[str, list[str]] = {}
            for known in sorted(self.types):
                grouped.setdefault(known.rpartition(":")[0], []).append(known)
            self._by_prefix = grouped
        return self._by_prefix


class Link:
    """What the link step found: the view, its diagnostics, where each chunk id is first
    declared, and (made when first asked for: compile needs them, validation does not)
    each entity's kept declarations and its merged declaration."""

    def __init__(self, view: View, diagnostics: list[Diagnostic],
                 chunk_places: Mapping[str, Declaration],
                 catalog: Callable[[], tuple[dict[str, list[Declaration]], dict[str, dict]]]
                 ) -> None:
        self.view = view
        self.diagnostics = diagnostics
        self.chunk_places = chunk_places
        self._catalog = catalog
        self._made: tuple | None = None

    @property
    def declarations(self) -> dict[str, list[Declaration]]:
        """entity id -> its kept declarations, in the knowledge base's order."""
        return self._catalog_made()[0]

    @property
    def merged(self) -> dict[str, dict]:
        """entity id -> its declarations merged (the first one when all are the same)."""
        return self._catalog_made()[1]

    def _catalog_made(self) -> tuple[dict[str, list[Declaration]], dict[str, dict]]:
        if self._made is None:
            self._made = self._catalog()
        return self._made


Position = Callable[[str, tuple], tuple[int, int]]  # (path, key path) -> (line, column)
# One entity declaration as the link step reads it: (path, index, id, name, type, dump);
# `dump` is the declaration itself, or anything that names it (see declared()).
DeclarationRow = tuple[str, int, str, str, str, Any]


def declared(rows: Iterable[DeclarationRow], position: Position
             ) -> tuple[dict[str, tuple[str, str]], dict[str, list[Declaration]],
                        dict[str, list[Any]], list[Diagnostic]]:
    """The entity declarations, in the knowledge base's order: each id's first (name,
    type), its kept declarations and their dumps, and the conflicting ones (CTX202). A
    repeat within one document is skipped (CTX201, a per-document rule)."""
    out: list[Diagnostic] = []
    first: dict[str, tuple[str, int, str, str]] = {}
    declarations: dict[str, list[Declaration]] = {}
    dumps: dict[str, list[Any]] = {}
    seen_here: set[str] = set()
    here = None
    for path, index, entity_id, name, entity_type, dump in rows:
        if path != here:
            here, seen_here = path, set()
        if entity_id in seen_here:
            continue
        seen_here.add(entity_id)
        known = first.get(entity_id)
        if known is None:
            first[entity_id] = (path, index, name, entity_type)
            declarations[entity_id] = [Declaration(path, index)]
            dumps[entity_id] = [dump]
            continue
        where, known_index, known_name, known_type = known
        if known_name != name or known_type != entity_type:
            first_at = _where(where, position, ("entities", known_index, "id"))
            out.append(_at(path, position, ("entities", index, "id"), "CTX202",
                           f"entity '{entity_id}' is declared here as {name!r} "
                           f"({entity_type}) but as {known_name!r} ({known_type}) at "
                           f"{first_at}"))
            continue
        declarations[entity_id].append(Declaration(path, index))
        dumps[entity_id].append(dump)
    return ({entity_id: (item[2], item[3]) for entity_id, item in first.items()},
            declarations, dumps, out)


def link(summaries: list[Summary], position: Position) -> Link:
    """Merge the summaries (in the knowledge base's order: the first declaration wins).
    (A build asks pipeline.link_index about the ids an edit touched instead.)"""
    first, declarations, dumps, out = declared(
        ((summary.path, *item) for summary in summaries for item in summary.entities),
        position)
    chunk_places: dict[str, Declaration] = {}
    dependencies: dict[str, list[str]] = {}
    for summary in summaries:
        for index, chunk_id, needs in summary.chunks:
            if chunk_id in chunk_places:
                out.append(_twice(chunk_id, chunk_places[chunk_id], summary.path, index,
                                  position))
                continue
            chunk_places[chunk_id] = Declaration(summary.path, index)
            dependencies[chunk_id] = needs
    view = View({entity_id: item[1] for entity_id, item in first.items()},
                set(chunk_places), first_by_tail(first))
    out.extend(find_cycles(dependencies, chunk_places, position))
    merged = {entity_id: merged_declaration(found) for entity_id, found in dumps.items()}
    return Link(view, out, chunk_places, lambda: (declarations, merged))


def first_by_tail(ids: Iterable[str]) -> dict[str, str]:
    """Each id tail (its last part) -> the first of these ids with it."""
    by_tail: dict[str, str] = {}
    for entity_id in ids:
        by_tail.setdefault(tail(entity_id), entity_id)
    return by_tail


def tail(entity_id: str) -> str:
    """An id's last part (`state:ready` -> `ready`): what a suggestion matches on."""
    return entity_id.split(":")[-1]


def _twice(chunk_id: str, known: Declaration, path: str, index: int,
           position: Position) -> Diagnostic:
    first_at = _where(known.path, position, ("chunks", known.index, "id"))
    where = "in this document" if known.path == path else "in the knowledge base"
    return _at(path, position, ("chunks", index, "id"), "CTX203",
               f"chunk id '{chunk_id}' is used twice {where} (first at {first_at})")


def _where(path: str, position: Position, key: tuple) -> str:
    line, column = position(path, key)
    return f"{path}:{line}:{column}"


def _at(path: str, position: Position, key: tuple, code: str, message: str) -> Diagnostic:
    line, column = position(path, key)
    return diag(code, message, path, line, column)


def merged_declaration(dumps: list[dict]) -> dict:
    first = dumps[0]
    others = [dump for dump in dumps[1:] if dump != first]
    if not others:
        return first  # the common case: verbatim re-declarations add nothing
    from .kb import merge_entities
    from .model import Entity

    merged = merge_entities(Entity.model_validate(first),
                            [Entity.model_validate(dump) for dump in others])
    return merged.model_dump(mode="json", exclude_none=True)


def find_cycles(dependencies: dict[str, list[str]], places: dict[str, Declaration],
                position: Position, starts: set[str] | None = None) -> list[Diagnostic]:
    """Each dependency cycle once (iterative DFS; knowledge bases can be deep); with
    starts, those reachable from these chunk ids."""
    out: list[Diagnostic] = []
    state: dict[str, int] = {}  # 1 = on the stack, 2 = done
    for start in sorted(dependencies if starts is None else
                        {start for start in starts if start in dependencies}):
        if start in state:
            continue
        stack = [(start, iter(dependencies[start]))]
        trail = [start]
        depth = {start: 0}  # trail index of each chunk on it
        state[start] = 1
        while stack:
            node, children = stack[-1]
            advanced = False
            for child in children:
                if child not in dependencies:
                    continue
                if state.get(child) == 1:
                    first = depth[child]
                    second = trail[first + 1] if first + 1 < len(trail) else child
                    place = places[child]
                    key = ("chunks", place.index, "dependencies",
                           dependencies[child].index(second))
                    out.append(_at(place.path, position, key, "CTX207",
                                   "dependency cycle: " + _cycle_text(trail, first)))
                elif child not in state:
                    state[child] = 1
                    depth[child] = len(trail)
                    trail.append(child)
                    stack.append((child, iter(dependencies[child])))
                    advanced = True
                    break
            if not advanced:
                state[node] = 2
                depth.pop(trail.pop())
                stack.pop()
    return out


def _cycle_text(trail: list[str], first: int) -> str:
    """trail[first:] and back to its first id; a long cycle by its two ends."""
    length = len(trail) - first
    if length < 2 * _CYCLE_ENDS:
        ids = trail[first:]
    else:
        ids = (trail[first:first + _CYCLE_ENDS] + [f"... {length - 2 * _CYCLE_ENDS + 1} more ..."]
               + trail[len(trail) - _CYCLE_ENDS + 1:])
    return " -> ".join(ids + [trail[first]])
