"""Many files at once: documents and extra-edge files parsed in parallel (and through
the parse cache), and the entity catalog the documents give.

Files of other kinds (skills) are parsed by the parsers the caller passes in, by file
name: ctxfst.kb, above document/ and skills/, loads a whole knowledge base.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from ..diagnostics import Diagnostic
from ..files import display_path, walk
from ..parallel import forked_imap
from .edges import EDGE_SUFFIXES, EdgeFile, is_edge_file, parse_edge_file
from .model import Entity, ParsedDocument
from .parse import looks_like_ctxfst, parse_document, type_document
from .source import Source, decode_text

Parsers = Mapping[str, Callable[[Source], Any]]  # file name -> its parser (module level)
# How a batch of independent parses runs: forked_imap's signature, the results in order
# as they come (the ray engine's map gives them as a list)
Mapper = Callable[[Callable[[Any], Any], list], Iterable]


@dataclass
class DocumentSet:
    """A knowledge base as document/ sees it: its documents and extra-edge files
    (ctxfst.kb.KnowledgeBase adds the skills)."""

    root: Path
    documents: list[ParsedDocument] = field(default_factory=list)
    edge_files: list[EdgeFile] = field(default_factory=list)

    @property
    def file_count(self) -> int:
        return len(self.all_files())

    def all_files(self) -> list:
        return [*self.documents, *self.edge_files]

    def parse_diagnostics(self) -> list[Diagnostic]:
        found: list[Diagnostic] = []
        for item in self.all_files():
            found.extend(item.diagnostics)
        return found


@dataclass(frozen=True)
class Input:
    """A file to load, and whether the user named it (named files must be CtxFST)."""

    source: Source
    explicit: bool


def inputs_for(paths: list[Path], explicit_files: bool = True) -> list[Input]:
    result: list[Input] = []
    seen: set[str] = set()
    for path in paths:
        files = walk(path, (".md", *EDGE_SUFFIXES)) if path.is_dir() else [path]
        for file in files:
            absolute = os.path.abspath(file)  # a string operation; resolve() costs syscalls
            if absolute in seen:
                continue
            seen.add(absolute)
            result.append(Input(Source(display_path(file), file),
                                explicit=explicit_files and not path.is_dir()))
    return result


def _parse_input(item: Input, parsers: Parsers) -> Any:
    """Parse one input; None for plain Markdown found while walking a folder."""
    name = os.path.basename(item.source.path)
    if name in parsers:
        return parsers[name](item.source)
    if is_edge_file(name):
        return parse_edge_file(item.source)
    doc = parse_document(item.source, typed=False)
    if (not item.explicit and doc.frontmatter is None and doc.text
            and not looks_like_ctxfst(doc.text)):
        return None
    # The text is not needed past parsing; do not carry (or cache) it. Its hash tells
    # later stages whether the file still holds what was validated.
    doc.text_sha256 = hashlib.sha256(doc.text.encode("utf-8")).hexdigest()
    doc.text = ""
    return doc


def _parse_to_row(job: tuple[Input, int | None], parsers: Parsers) -> Any:
    """_parse_input, a document given as its parse-cache row when limit is not None and
    it has one: the worker encodes it, and the parent decodes it as it would a cache
    hit (cheaper than unpickling the document and encoding it there)."""
    item, limit = job
    value = _parse_input(item, parsers)
    if limit is not None and isinstance(value, ParsedDocument):
        from . import syntax_cache

        return syntax_cache.encode(value, limit) or value
    return value


def _parse_all(inputs: list[Input], parsers: Parsers, mapper: Mapper,
               each: Callable[[Any], None]) -> list:
    parsed = []
    for value in mapper(partial(_parse_input, parsers=parsers), inputs):
        each(value)  # (as it comes: beside the workers' parsing of the next ones)
        parsed.append(value)
    return parsed


_PLAIN = object()  # a cache hit meaning "plain Markdown, no document" (None is a miss)
_PLAIN_ROW = b"null"


def _still_plain(item: Input) -> bool:
    """Whether a cached "plain Markdown" row holds for item. Checked on its text (a
    decode, no YAML): a row could otherwise hide a document from validation."""
    if item.explicit:
        return False
    text, problem = decode_text(item.source.path, item.source.data)
    return problem is None and not looks_like_ctxfst(text)


def _parse_cached(inputs: list[Input], cache, parsers: Parsers, mapper: Mapper,
                  each: Callable[[Any], None]) -> list:
    """Parse inputs, taking documents whose exact bytes were parsed before from cache;
    each(result) is called on each one found (a hit, or a parse as the mapper yields it,
    while the workers go on with the next ones).

    Rows are data checked on read (syntax_cache): a damaged or foreign row is parsed again.
    """
    from . import syntax_cache

    keys: list[str | None] = []
    prepared: list[Input] = []
    wanted: dict[str, int] = {}
    by_key: dict[str, Input] = {}
    for item in inputs:
        key = None
        name = os.path.basename(item.source.path)
        if name.endswith(".md") and name not in parsers:
            data, problem = item.source.read_bytes()
            if problem is None and data is not None:
                item = Input(Source(item.source.path, item.source.fs_path, data), item.explicit)
                key = cache.key(item.source.path, data)
                wanted[key] = syntax_cache.row_limit(len(data))
                by_key[key] = item
        prepared.append(item)
        keys.append(key)

    def decode(key: str, blob: bytes):
        item = by_key[key]
        if blob == _PLAIN_ROW:
            return _PLAIN if _still_plain(item) else None
        return syntax_cache.decode(blob, item.source.path, item.source.fs_path)

    hits = cache.get_many(wanted, decode)
    todo = [index for index, key in enumerate(keys) if key not in hits]
    results: list = [hits.get(key) if key else None for key in keys]
    for value in hits.values():
        each(value)
    fresh: dict[str, bytes] = {}
    parsed = mapper(partial(_parse_to_row, parsers=parsers),
                    [(prepared[i], wanted.get(keys[i]) if keys[i] else None) for i in todo])
    for index, value in zip(todo, parsed, strict=True):
        key = keys[index]
        if isinstance(value, bytes):  # a row (the syntax pass: typing happens after this)
            fresh[key] = value
            value = decode(key, value)
            if value is None or value is _PLAIN:  # (a row decode refuses: parse it here)
                del fresh[key]
                value = _parse_input(prepared[index], parsers)
        elif key and value is None:
            fresh[key] = _PLAIN_ROW
        results[index] = value
        each(value)
    cache.put_many(fresh)
    return [None if value is _PLAIN else value for value in results]


def parse_inputs(inputs: list[Input], cache=None, parsers: Parsers | None = None,
                 mapper: Mapper | None = None) -> list:
    """Parse every input, in order: documents typed, extra-edge files, and what parsers
    (file name -> parser) make of the files they name; plain Markdown is left out. With
    a ParseCache, unchanged documents are not parsed again. mapper: what runs the parses
    (forked workers by default; the ray engine's map)."""
    parsers = parsers or {}
    mapper = mapper or forked_imap

    def typed(parsed: Any) -> None:
        if isinstance(parsed, ParsedDocument):
            type_document(parsed)  # here, not in a worker: typed models pickle slowly

    results = (_parse_cached(inputs, cache, parsers, mapper, typed) if cache is not None
               else _parse_all(inputs, parsers, mapper, typed))
    return [parsed for parsed in results if parsed is not None]


@dataclass
class Place:
    """A record's place: its document and index in entities[] or chunks[]."""

    doc: ParsedDocument
    index: int
    section: str = "entities"

    def location(self) -> str:
        return self.doc.location((self.section, self.index, "id"))


Declaration = Place  # where an entity was declared


@dataclass
class CatalogEntry:
    entity: Entity
    declarations: list[Declaration]


def merge_entities(first: Entity, others: list[Entity]) -> Entity:
    """Merge identical re-declarations: lists are unioned in order, the first value wins
    otherwise. All at once: merging one by one rescanned and revalidated the growing
    lists (1,000 documents re-declaring one entity took 17 s)."""
    others = [other for other in others if other != first]
    if not others:
        return first  # the common case: verbatim re-declarations add nothing
    data = first.model_dump(exclude_none=True)
    present: dict[str, set] = {}  # the items of each list in data, when hashable
    for other in others:
        for key, value in other.model_dump(exclude_none=True).items():
            if key not in data:
                data[key] = value
            elif isinstance(data[key], list) and isinstance(value, list):
                try:
                    known = present.get(key)
                    if known is None:
                        known = present[key] = set(data[key])
                    added = [item for item in value if item not in known]
                    known.update(added)
                except TypeError:  # unhashable items (mappings in an extra field)
                    present.pop(key, None)
                    added = [item for item in value if item not in data[key]]
                data[key].extend(added)
    return Entity.model_validate(data)
