"""The link step: what spans documents, checked from their interface summaries alone.

A document's summary is what other documents can see of it: the entities it declares,
its chunk ids and their dependencies, and the ids it refers to. The link step merges the
summaries into the catalog view every document is checked against (entity types, chunk
ids, the id suggestions) and finds what no single document shows: conflicting entity
declarations (CTX202), chunk ids used twice (CTX203) and dependency cycles (CTX207).

Summaries are plain data (JSON-ready), so a build keeps them between runs and links a
10,000-document knowledge base without typing its documents again. A diagnostic the
link step raises needs a position inside a document; `position` gives it (and loads that
document when only its summary is at hand: only for errors, which stop a build).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Callable

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

    def as_data(self) -> dict[str, Any]:
        """JSON-ready, each declaration by the key of its dump (declarations repeat across
        documents: they are kept once, see dumps())."""
        return {"path": self.path, "entities": [[*item[:4], key] for item, key in
                                                zip(self.entities, self.dump_keys())],
                "chunks": self.chunks, "refs": self.refs}

    def dumps(self) -> dict[str, dict]:
        return {key: item[4] for item, key in zip(self.entities, self.dump_keys())}

    @classmethod
    def from_data(cls, data: Any, dumps: dict[str, dict]) -> Summary | None:
        """A summary read back from a cache, its declarations from dumps (key -> dump,
        each checked by dump_ok); None for anything of another shape."""
        if not isinstance(data, dict) or set(data) != {"path", "entities", "chunks", "refs"}:
            return None
        path, entities, chunks, refs = (data["path"], data["entities"], data["chunks"],
                                        data["refs"])
        if not (isinstance(path, str) and _strings(refs) and isinstance(entities, list)
                and isinstance(chunks, list)):
            return None
        keys = []
        for item in entities:  # each [index, id, name, type, key]: the key becomes its dump
            if not (type(item) is list and len(item) == 5 and type(item[4]) is str):
                return None
            dump = dumps.get(item[4])
            if not (dump is not None and type(item[0]) is int and dump["id"] == item[1]
                    and dump["name"] == item[2] and dump["type"] == item[3]):
                return None
            keys.append(item[4])
            item[4] = dump  # (the data was read for this summary alone)
        for item in chunks:
            if not (type(item) is list and len(item) == 3 and type(item[0]) is int
                    and type(item[1]) is str and _strings(item[2])):
                return None
        return cls(path, entities, chunks, refs, keys)


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
        value = getattr(record, name, None)
        if isinstance(value, list):
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
        """A hint when an unknown id differs from a declared one only by its type prefix
        (state: vs entity:)."""
        candidate = self.by_tail.get(reference.split(":")[-1])
        if candidate is None or candidate == reference:
            return ""
        return f"; did you mean '{candidate}'?"

    def as_data(self) -> dict[str, Any]:
        return {"types": self.types, "chunk_ids": sorted(self.chunk_ids),
                "by_tail": self.by_tail}

    @classmethod
    def from_data(cls, data: Any) -> View | None:
        if not isinstance(data, dict) or set(data) != {"types", "chunk_ids", "by_tail"}:
            return None
        types, chunk_ids, by_tail = data["types"], data["chunk_ids"], data["by_tail"]
        if not (_string_map(types) and _strings(chunk_ids) and _string_map(by_tail)):
            return None
        return cls(types, set(chunk_ids), by_tail)

    def changed_since(self, other: View) -> tuple[set[str], set[str]]:
        """Ids whose standing differs between the two views (declared or not, another
        type, a chunk or not), and id tails whose suggestion differs."""
        ids = {key for key in self.types.keys() | other.types.keys()
               if self.types.get(key) != other.types.get(key)}
        ids |= self.chunk_ids ^ other.chunk_ids
        tails = {key for key in self.by_tail.keys() | other.by_tail.keys()
                 if self.by_tail.get(key) != other.by_tail.get(key)}
        return ids, tails


def _string_map(value: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(v, str) for v in value.values())


@dataclass
class Link:
    view: View
    declarations: dict[str, list[Declaration]]   # entity id -> its kept declarations
    merged: dict[str, dict]                     # entity id -> the merged declaration
    chunk_places: dict[str, Declaration]        # chunk id -> its first declaration
    diagnostics: list[Diagnostic] = field(default_factory=list)


Position = Callable[[str, tuple], tuple[int, int]]  # (path, key path) -> (line, column)


def link(summaries: list[Summary], position: Position,
         touched: set[str] | None = None) -> Link:
    """Merge the summaries (in the knowledge base's order: the first declaration wins).
    touched: the knowledge base had no dependency cycle before, and only these chunk
    ids were declared, dropped or declared otherwise since: a new cycle passes through
    one of them (its new edge leaves one, or enters one that is new), so the cycles are
    looked for from them alone, and everywhere only when one is found."""
    out: list[Diagnostic] = []
    first: dict[str, tuple[Summary, list]] = {}
    declarations: dict[str, list[Declaration]] = {}
    dumps: dict[str, list[dict]] = {}
    for summary in summaries:
        seen_here: set[str] = set()
        for index, entity_id, name, entity_type, dump in summary.entities:
            if entity_id in seen_here:
                continue  # twice in one document: CTX201, a per-document rule
            seen_here.add(entity_id)
            known = first.get(entity_id)
            if known is None:
                first[entity_id] = (summary, [index, entity_id, name, entity_type])
                declarations[entity_id] = [Declaration(summary.path, index)]
                dumps[entity_id] = [dump]
                continue
            where, (known_index, _, known_name, known_type) = known
            if known_name != name or known_type != entity_type:
                first_at = _where(where.path, position, ("entities", known_index, "id"))
                out.append(_at(summary.path, position, ("entities", index, "id"), "CTX202",
                               f"entity '{entity_id}' is declared here as {name!r} "
                               f"({entity_type}) but as {known_name!r} ({known_type}) at "
                               f"{first_at}"))
                continue
            declarations[entity_id].append(Declaration(summary.path, index))
            dumps[entity_id].append(dump)
    chunk_places: dict[str, Declaration] = {}
    dependencies: dict[str, list[str]] = {}
    for summary in summaries:
        for index, chunk_id, needs in summary.chunks:
            if chunk_id in chunk_places:
                known = chunk_places[chunk_id]
                first_at = _where(known.path, position, ("chunks", known.index, "id"))
                where = "in this document" if known.path == summary.path else \
                    "in the knowledge base"
                out.append(_at(summary.path, position, ("chunks", index, "id"), "CTX203",
                               f"chunk id '{chunk_id}' is used twice {where} "
                               f"(first at {first_at})"))
                continue
            chunk_places[chunk_id] = Declaration(summary.path, index)
            dependencies[chunk_id] = needs
    by_tail: dict[str, str] = {}
    for entity_id in first:  # the first declared wins, in declaration order
        by_tail.setdefault(entity_id.split(":")[-1], entity_id)
    view = View({entity_id: item[1][3] for entity_id, item in first.items()},
                set(chunk_places), by_tail)
    if touched is None or find_cycles(dependencies, chunk_places, lambda path, key: (0, 0),
                                      touched):
        out.extend(find_cycles(dependencies, chunk_places, position))  # (in full: its order)
    merged = {entity_id: _merged(found) for entity_id, found in dumps.items()}
    return Link(view, declarations, merged, chunk_places, out)


def _where(path: str, position: Position, key: tuple) -> str:
    line, column = position(path, key)
    return f"{path}:{line}:{column}"


def _at(path: str, position: Position, key: tuple, code: str, message: str) -> Diagnostic:
    line, column = position(path, key)
    return diag(code, message, path, line, column)


def _merged(dumps: list[dict]) -> dict:
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
    for start in sorted(dependencies if starts is None else starts & dependencies.keys()):
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
