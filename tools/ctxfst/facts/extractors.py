"""Extractors: deterministic, versioned functions from one source to candidate facts.

The interface is small so a model-based extractor can be added later: an object with
`name`, `version` and `extract(view) -> iterable of Candidate`, made by a factory named
in the settings (`[facts] extractors = ["package.module:factory"]`). Extractors run in
the build's facts stage only, never during validation.

Built in:
- `declared`: the `facts:` lists of documents, entities and chunks (confidence 1.0
  unless given), evidence the `evidence:` excerpt in the passage or else the value as
  written in the frontmatter.
- `derived`: facts the knowledge base implies, one rule each with its own confidence
  (RULES below).
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..document.facts import VALUE_TYPES, canonical_date
from ..document.ids import NAME_HINT, NAME_PATTERN
from ..document.mentions import NameFinder
from ..document.text import normalize
from .model import Candidate, Evidence


class ExtractionError(Exception):
    """One source could not be extracted; its run fails, the build goes on."""


class Extractor(Protocol):
    name: str
    version: str

    def extract(self, view: SourceView) -> Iterable[Candidate]: ...


# A YAML scalar as written: quoted, or plain up to a flow delimiter, comment or line end.
_SCALAR = re.compile(r""""(?:[^"\\\n]|\\.)*"|'(?:[^'\n]|'')*'|[^,\]}#\n]*""")


@dataclass
class Catalog:
    """One tenant's entities: names and aliases (normalised) -> entity id, and where
    they are mentioned (document.mentions: the rule graph retrieval uses too)."""

    names: dict[str, str] = field(default_factory=dict)
    finder: NameFinder = field(default_factory=lambda: NameFinder(()))

    @classmethod
    def build(cls, labels: dict[str, list[str]]) -> Catalog:
        catalog = cls()
        for entity_id in sorted(labels):
            for label in labels[entity_id]:
                catalog.names.setdefault(normalize(label), entity_id)
        catalog.finder = NameFinder(catalog.names)
        return catalog

    def canonical(self, value_norm: str) -> str:
        """The alias table: a keyword naming an entity normalises to the entity's id."""
        return self.names.get(value_norm, value_norm)

    def mentions(self, passage: str) -> list[tuple[int, int, str]]:
        """(start, end, entity id) of names in the passage: leftmost first, the longest
        name at a position, no overlaps."""
        return [(start, end, self.names[name])
                for start, end, name in self.finder.mentions(passage)]


def _written(text: str, start: int) -> str:
    """The YAML value at start as written: a block scalar (| or >) with its indented
    lines, a flow collection to its closing bracket (on its line), else one scalar."""
    if text[start:start + 1] in ("|", ">"):
        line_start = text.rfind("\n", 0, start) + 1
        prefix = text[line_start:start]  # "  - value: " : the key sits at column 4
        indent = len(prefix) - len(prefix.lstrip(" -"))
        end = text.find("\n", start)
        end = len(text) if end < 0 else end
        block_end = end
        while end < len(text):
            next_end = text.find("\n", end + 1)
            next_end = len(text) if next_end < 0 else next_end
            line = text[end + 1:next_end]
            if line.strip() and len(line) - len(line.lstrip(" ")) <= indent:
                break
            if line.strip():
                block_end = next_end
            end = next_end
        return text[start:block_end]
    if text[start:start + 1] in ("{", "["):
        depth = 0
        for index in range(start, len(text)):
            char = text[index]
            if char == "\n":
                break
            depth += (char in "{[") - (char in "}]")
            if depth == 0:
                return text[start:index + 1]
        end = text.find("\n", start)
        return text[start:len(text) if end < 0 else end].rstrip()
    token = _SCALAR.match(text, start)
    return token.group().rstrip() if token else ""


@dataclass
class SourceView:
    """What an extractor sees of one source file."""

    path: str                 # project-relative, POSIX
    kind: str                 # document | skill
    tenant: str
    text: str                 # the file's text (UTF-8, LF, no BOM): offsets index it
    record: Any               # ParsedDocument or ParsedSkill (typed, with source map)
    catalog: Catalog
    freshness: str | None     # the source's own date (updated, else date)
    files: dict[str, str] = field(default_factory=dict)  # path -> text, for evidence
    passages: dict[str, tuple[str, int, str]] = field(default_factory=dict)
    # chunk id -> (file path, offset of the passage in that file, passage text)
    _lines: list[int] | None = None

    def offset(self, line: int, column: int) -> int:
        if self._lines is None:
            self._lines = [0] + [m.end() for m in re.finditer("\n", self.text)]
        line = max(1, min(line, len(self._lines)))
        return self._lines[line - 1] + column - 1

    def at(self, path: tuple, needle: str, source_type: str, source_id: str, rule: Rule,
           freshness: str | None = None, confidence: float | None = None) -> Evidence:
        """Evidence for a frontmatter value: needle as written at (or just after) path."""
        pos = self.record.source_map.value(path)
        start = self.offset(pos.line, pos.column)
        # The value itself, or just inside its opening quote; anything else (a number, a
        # flow collection, escapes, an alias, a block scalar) is cited as written. Never
        # searched for further on: a later occurrence would be evidence of something else.
        if needle and self.text.startswith(needle, start):
            found = start
        elif needle and self.text[start:start + 1] in ("'", '"') and \
                self.text.startswith(needle, start + 1):
            found = start + 1
        else:
            found, needle = start, _written(self.text, start)
        return rule.evidence(source_type, source_id, self.path, found, found + len(needle),
                             self.text[found:found + len(needle)],
                             freshness if freshness is not None else self.freshness,
                             confidence)

    def in_passage(self, chunk_id: str, start: int, end: int, rule: Rule,
                   freshness: str | None, confidence: float | None = None) -> Evidence:
        """Evidence for text[start:end] of a chunk's passage (offsets within the passage)."""
        path, base, passage = self.passages[chunk_id]
        return rule.evidence("chunk", chunk_id, path, base + start, base + end,
                             passage[start:end], freshness, confidence)


@dataclass(frozen=True)
class Rule:
    name: str
    version: str
    confidence: float

    def evidence(self, source_type, source_id, path, start, end, excerpt, freshness,
                 confidence=None) -> Evidence:
        return Evidence(source_type, source_id, path, start, end, excerpt, self.name,
                        self.version, self.confidence if confidence is None else confidence,
                        freshness)

    def cites(self, evidence: Evidence) -> Evidence:
        """The span another rule's evidence cites, as this rule's evidence."""
        return Evidence(*evidence[:6], self.name, self.version, self.confidence,
                        evidence.freshness_at)


RULES = {rule.name: rule for rule in (
    Rule("declared", "1", 1.0),                 # confidence from the entry, default 1.0
    Rule("derived.title", "1", 1.0),
    Rule("derived.date", "1", 1.0),
    Rule("derived.entity_type", "1", 1.0),
    Rule("derived.alias", "1", 1.0),
    Rule("derived.chunk_tag", "1", 0.9),
    Rule("derived.document_theme", "1", 0.8),
    Rule("derived.declared_mention", "1", 0.95),
    Rule("derived.text_mention", "2", 0.8),     # 0.6 for names shorter than 4 characters
    Rule("derived.capability", "1", 1.0),
)}


def _candidate(view: SourceView, entity_type: str, entity_id: str, namespace: str, key: str,
               value_text: str, value_norm: str, value_type: str,
               evidence: Evidence) -> Candidate:
    return Candidate(view.tenant, entity_type, entity_id, namespace, key, value_text,
                     value_norm, value_type, evidence)


def _keyword(view: SourceView, text: str) -> str:
    return view.catalog.canonical(normalize(text))


def _record_freshness(view: SourceView, raw: Any, *fields: str) -> str | None:
    if isinstance(raw, dict):
        for name in fields:
            if raw.get(name) is not None:
                try:
                    return canonical_date(raw[name])
                except ValueError:
                    continue
    return view.freshness


class DeclaredExtractor:
    """The `facts:` lists of a document, its entities and its chunks."""

    name, version = "declared", "1"

    def extract(self, view: SourceView) -> Iterator[Candidate]:
        if view.kind != "document":
            return
        doc = view.record
        rule = RULES["declared"]
        data = doc.frontmatter or {}
        entities = dict(doc.entities)
        chunks = dict(doc.chunks)
        for owner, declared in sorted(doc.facts.items()):
            if owner == ("document",):
                entity_type, entity_id, chunk_ids = "document", view.path, sorted(view.passages)
                freshness = view.freshness
            elif owner[0] == "entities":
                entity_type, entity_id = "entity", entities[owner[1]].id
                chunk_ids, freshness = sorted(view.passages), view.freshness
            else:
                entity_type, entity_id = "chunk", chunks[owner[1]].id
                chunk_ids = [entity_id]
                freshness = _record_freshness(view, data["chunks"][owner[1]], "updated",
                                              "created_at")
            for fact in declared:
                norm = _keyword(view, fact.value_text) if fact.value_type == "keyword" \
                    else fact.value_norm
                evidence = None
                if fact.evidence is not None:
                    for chunk_id in chunk_ids:
                        passage = view.passages.get(chunk_id)
                        where = passage[2].find(fact.evidence) if passage else -1
                        if where >= 0:
                            evidence = view.in_passage(chunk_id, where,
                                                       where + len(fact.evidence), rule,
                                                       freshness, fact.confidence)
                            break
                    if evidence is None:
                        raise ExtractionError(f"{view.path}: evidence {fact.evidence!r} of "
                                              f"{entity_type} {entity_id} is not in its text")
                else:
                    needle = fact.value_text if isinstance(
                        data_at(data, fact.path + ("value",)), str) else ""
                    evidence = view.at(fact.path + ("value",), needle, entity_type, entity_id,
                                       rule, freshness, fact.confidence)
                yield _candidate(view, entity_type, entity_id, fact.namespace, fact.key,
                                 fact.value_text, norm, fact.value_type, evidence)


def data_at(data: Any, path: tuple) -> Any:
    for part in path:
        try:
            data = data[part]
        except (KeyError, IndexError, TypeError):
            return None
    return data


class DerivedExtractor:
    """Facts the knowledge base implies: titles, dates, entity types and aliases, chunk
    tags as themes, entity mentions, skill capabilities."""

    name, version = "derived", "2"  # 2: mentions by document.mentions

    def extract(self, view: SourceView) -> Iterator[Candidate]:
        if view.kind == "skill":
            yield from self._skill(view)
        else:
            yield from self._document(view)

    def _document(self, view: SourceView) -> Iterator[Candidate]:
        doc = view.record
        data = doc.frontmatter or {}
        me = view.path
        if isinstance(data.get("title"), str) and data["title"].strip():
            title = data["title"]
            yield _candidate(view, "document", me, "document", "title", title,
                             normalize(title), "text",
                             view.at(("title",), title, "document", me, RULES["derived.title"]))
        for name in ("date", "updated"):
            if data.get(name) is not None:
                try:
                    norm = canonical_date(data[name])
                except ValueError:
                    continue
                yield _candidate(view, "document", me, "lifecycle", name, str(data[name]), norm,
                                 "date", view.at((name,), str(data[name]), "document", me,
                                                 RULES["derived.date"]))
        for index, entity in doc.entities:
            base = ("entities", index)
            yield _candidate(view, "entity", entity.id, "classification", "entity_type",
                             entity.type, entity.type, "enum",
                             view.at(base + ("type",), entity.type, "entity", entity.id,
                                     RULES["derived.entity_type"]))
            labels = [(("name",), entity.name)] + [(("aliases", i), alias)
                                                   for i, alias in enumerate(entity.aliases)]
            for where, label in labels:
                norm = normalize(label)
                if norm:
                    yield _candidate(view, "entity", entity.id, "alias", "name", label,
                                     norm, "keyword",
                                     view.at(base + where, label, "entity", entity.id,
                                             RULES["derived.alias"]))
        raw_chunks = data.get("chunks") if isinstance(data.get("chunks"), list) else []
        chunk_tag, theme = RULES["derived.chunk_tag"], RULES["derived.document_theme"]
        for index, chunk in doc.chunks:
            base = ("chunks", index)
            raw = raw_chunks[index] if index < len(raw_chunks) else {}
            freshness = _record_freshness(view, raw, "updated", "created_at")
            if chunk.created_at:
                norm = canonical_date(chunk.created_at)
                yield _candidate(view, "chunk", chunk.id, "lifecycle", "created",
                                 chunk.created_at, norm, "date",
                                 view.at(base + ("created_at",), chunk.created_at, "chunk",
                                         chunk.id, RULES["derived.date"], freshness))
            for position, tag in enumerate(chunk.tags):
                norm = normalize(tag)
                if not norm:
                    continue
                # A chunk's tag and its document's theme: one span, cited by two rules.
                keyword = view.catalog.canonical(norm)
                cited = view.at(base + ("tags", position), tag, "chunk", chunk.id, chunk_tag,
                                freshness)
                yield _candidate(view, "chunk", chunk.id, "theme", "tag", tag, keyword,
                                 "keyword", cited)
                yield _candidate(view, "document", me, "theme", "tag", tag, keyword,
                                 "keyword", theme.cites(cited))
            for position, ref in enumerate(chunk.entities):
                yield _candidate(view, "chunk", chunk.id, "mention", "entity", ref, ref,
                                 "keyword", view.at(base + ("entities", position), ref, "chunk",
                                                    chunk.id, RULES["derived.declared_mention"],
                                                    freshness))
            yield from self._mentions(view, chunk.id, freshness)

    def _mentions(self, view: SourceView, chunk_id: str,
                  freshness: str | None) -> Iterator[Candidate]:
        """Entity names and aliases in the passage: the first mention of each entity."""
        if chunk_id not in view.passages:
            return
        passage = view.passages[chunk_id][2]
        seen: set[str] = set()
        rule = RULES["derived.text_mention"]
        for start, end, entity_id in view.catalog.mentions(passage):
            if entity_id in seen:
                continue
            seen.add(entity_id)
            excerpt = passage[start:end]
            confidence = rule.confidence if len(excerpt) >= 4 else 0.6
            yield _candidate(view, "chunk", chunk_id, "mention", "entity", excerpt, entity_id,
                             "keyword", view.in_passage(chunk_id, start, end, rule, freshness,
                                                        confidence))

    def _skill(self, view: SourceView) -> Iterator[Candidate]:
        from ..document.model import strip_not
        from ..skills.index import skill_node_id

        skill = view.record
        record = skill.record
        if record is None:
            return
        me = skill_node_id(record.name)
        rule = RULES["derived.capability"]
        data = skill.frontmatter or {}
        for field_name, keys in (("postconditions", ("produces", "removes")),
                                 ("preconditions", ("requires", "requires_absent"))):
            top_level = field_name in data
            for position, reference in enumerate(getattr(record, field_name)):
                negated, ref_id = strip_not(reference)
                where = (field_name, position) if top_level else ("metadata", field_name)
                yield _candidate(view, "skill", me, "capability", keys[negated], ref_id,
                                 ref_id.casefold(), "keyword",
                                 view.at(where, ref_id, "skill", me, rule))


def load_extractors(names: tuple[str, ...]) -> list[Extractor]:
    """The built-in extractors, then the configured ones ("module:factory")."""
    extractors: list[Extractor] = [DeclaredExtractor(), DerivedExtractor()]
    for spec in names:
        module_name, _, factory = spec.partition(":")
        try:
            made = getattr(importlib.import_module(module_name), factory)()
        except Exception as error:  # a plugin that cannot load: say which and why
            raise ExtractionError(f"extractor {spec!r} could not be loaded: "
                                  f"{type(error).__name__}: {error}") from None
        if not all(hasattr(made, a) for a in ("name", "version", "extract")):
            raise ExtractionError(f"extractor {spec!r} has no name, version and extract()")
        extractors.append(made)
    return extractors


def extract_version(extractors: list[Extractor]) -> str:
    """The version of the extractor set: what a run records and "no" answers check."""
    return "+".join(f"{e.name}@{e.version}" for e in extractors)


def reader_version(plugins: tuple[str, ...], recorded: str) -> str:
    """The extractor version a reader (`facts ask`) checks runs against, importing no
    plugin: readers run no code a KB's settings name (docs/security.md). Without plugins
    it is the current built-in version; with them, the version the build recorded, as
    long as its built-in part is the current one (a plugin upgraded since the build is
    seen by the next build, which re-extracts)."""
    builtin = extract_version(load_extractors(()))
    if not plugins:
        return builtin
    return recorded if recorded.startswith(builtin + "+") else f"{builtin}+(plugins)"


def _plugin_problem(candidate: Any) -> str | None:
    """What is wrong with a plugin's candidate (the built-in extractors are tested)."""
    if not isinstance(candidate, Candidate) or not isinstance(candidate.evidence, Evidence):
        return f"gave a {type(candidate).__name__}, not a Candidate with its Evidence"
    for name in ("tenant_id", "entity_type", "entity_id", "value_text", "value_norm"):
        value = getattr(candidate, name)
        if not isinstance(value, str) or not value:
            return f"{name} must be a non-empty string, found {value!r}"
    for name in ("namespace", "key"):
        if not (isinstance(getattr(candidate, name), str)
                and NAME_PATTERN.fullmatch(getattr(candidate, name))):
            return f"{name} {getattr(candidate, name)!r} is invalid; use {NAME_HINT}"
    if candidate.value_type not in VALUE_TYPES:
        return (f"unknown value_type {candidate.value_type!r}; expected one of "
                f"{', '.join(VALUE_TYPES)}")
    ev = candidate.evidence
    if not (all(isinstance(v, int) and not isinstance(v, bool) for v in (ev.start, ev.end))
            and all(isinstance(v, str) for v in (ev.path, ev.excerpt, ev.extractor,
                                                 ev.extract_version))
            and isinstance(ev.confidence, (int, float)) and not isinstance(ev.confidence, bool)):
        return "evidence needs integer start/end, text path/excerpt/extractor/version and a " \
               "number confidence"
    return None


def extract(view: SourceView, extractors: list[Extractor]) -> list[Candidate]:
    """All candidates of one source, every evidence span checked against its text."""
    found: list[Candidate] = []
    for extractor in extractors:
        try:
            produced = list(extractor.extract(view))
        except ExtractionError:
            raise
        except Exception as error:
            raise ExtractionError(f"extractor {extractor.name} failed on {view.path}: "
                                  f"{type(error).__name__}: {error}") from None
        trusted = isinstance(extractor, (DeclaredExtractor, DerivedExtractor))
        for candidate in produced:
            problem = None if trusted else _plugin_problem(candidate)
            if problem is not None:  # fail this source's run, never the build
                raise ExtractionError(f"extractor {extractor.name} on {view.path}: {problem}")
            ev = candidate.evidence
            text = view.files.get(ev.path)
            if candidate.tenant_id != view.tenant:
                raise ExtractionError(f"extractor {extractor.name} gave a fact of tenant "
                                      f"{candidate.tenant_id!r} for a source of "
                                      f"{view.tenant!r}")
            if text is None or not 0 <= ev.start <= ev.end <= len(text) or \
                    text[ev.start:ev.end] != ev.excerpt:
                raise ExtractionError(f"extractor {extractor.name}: evidence offsets "
                                      f"{ev.start}-{ev.end} in {ev.path} do not hold the "
                                      f"excerpt {ev.excerpt[:60]!r}")
            if not 0.0 <= ev.confidence <= 1.0:
                raise ExtractionError(f"extractor {extractor.name}: confidence "
                                      f"{ev.confidence} outside 0-1")
            found.append(candidate)
    return found

