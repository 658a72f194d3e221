"""Validation rules over a knowledge base's documents and extra edges (the per-file
ones run while parsing). ctxfst.kb.validate runs them with the skills' rules."""

from __future__ import annotations

from collections.abc import Container
from dataclasses import dataclass, field
from pathlib import Path

from ..diagnostics import Diagnostic, diag
from ..files import inside
from .edges import EdgeFile, ExtraEdge
from .kb import CatalogEntry, Declaration, Place, merge_entities
from .link import Link, View, link, summarize
from .model import ChunkRecord, ParsedDocument, path_problem, strip_not
from .model import diagnostic_at as _at
from .parse import short_repr
from .source import MAX_FILE_BYTES
from .tree import WORK_TREE, TreeFiles
from .yamlpos import Path as KeyPath

# Which entity types each condition field may name.
_CONDITION_TYPES = {
    "preconditions": ("state",),
    "postconditions": ("state", "goal"),
    "state_refs": ("state",),
}


@dataclass
class ChunkPlace(Place):
    record: ChunkRecord | None = None


@dataclass
class Validation:
    """The outcome of validating a knowledge base."""

    catalog: dict[str, CatalogEntry]
    chunks: dict[str, ChunkPlace]
    diagnostics: list[Diagnostic] = field(default_factory=list)
    extra_edges: list[ExtraEdge] = field(default_factory=list)  # valid, deduplicated
    link: Link | None = None


def link_documents(documents: list[ParsedDocument]) -> Link:
    """The link step over the documents' summaries, its diagnostics located in them."""
    docs = {doc.path: doc for doc in documents}

    def position(path: str, key: KeyPath) -> tuple[int, int]:
        pos = docs[path].source_map.value(key)
        return pos.line, pos.column

    return link([summarize(doc) for doc in documents], position)


def validation_of(documents: list[ParsedDocument], linked: Link,
                  diagnostics: list[Diagnostic], extra_edges: list[ExtraEdge]) -> Validation:
    docs = {doc.path: doc for doc in documents}
    return Validation(catalog=_catalog(linked, docs), chunks=_chunk_places(linked, docs),
                      diagnostics=diagnostics, extra_edges=extra_edges, link=linked)


def check_document(doc: ParsedDocument, view: View, names: set[str] | None,
                   root: Path, files: TreeFiles | None = None) -> list[Diagnostic]:
    """One document's rules against the knowledge base's view: what it declares twice,
    its passages, and every id it names (related_skills against names, the skills'
    names; None: no skills to resolve them against). A pure function of the document
    (and its content_path files, as `files` shows them: the work tree's by default),
    the view and names: a build reuses it while they are unchanged."""
    out: list[Diagnostic] = []
    view.start_document()
    seen_here: dict[str, int] = {}
    for index, entity in doc.entities:
        if entity.id in seen_here:
            first = Declaration(doc, seen_here[entity.id])
            out.append(_at(doc, ("entities", index, "id"), "CTX201",
                           f"entity '{entity.id}' is declared twice in this document "
                           f"(first at {first.location()})"))
        else:
            seen_here[entity.id] = index
    _check_body_sync(doc, root, out, files or WORK_TREE)
    refused = _refused_entity_ids(doc)
    for index, entity in doc.entities:
        _check_conditions(doc, ("entities", index), f"entity '{entity.id}'", entity, view,
                          out, refused)
        if names is not None:
            for position, other in enumerate(entity.related_skills):
                if other not in names:
                    out.append(_at(doc, ("entities", index, "related_skills", position),
                                   "CTX208", f"entity '{entity.id}': related skill '{other}' "
                                   f"has no skills/{other}/SKILL.md"))
    # An entity this document declares but whose declaration was refused (a bad type,
    # a bad field) is reported there; "no document declares it" would mislead.
    refused = _refused_entity_ids(doc)
    for index, chunk in doc.chunks:
        base = ("chunks", index)
        label = f"chunk '{chunk.id}'"
        for position, ref in enumerate(chunk.entities):
            if ref not in view.types and ref not in refused:
                out.append(_at(doc, base + ("entities", position), "CTX204",
                               f"{label} mentions '{ref}', which no document declares"
                               f"{view.suggest(ref)}"))
        _check_conditions(doc, base, label, chunk, view, out, refused)
        for position, dependency in enumerate(chunk.dependencies):
            if dependency not in view.chunk_ids:
                out.append(_at(doc, base + ("dependencies", position), "CTX206",
                               f"{label} depends on '{dependency}', which is no chunk "
                               "in the knowledge base"))
    return out


def check_extra_edges(edge_files: list[EdgeFile], nodes: Container[str], out,
                      bare_skills: dict[str, str] | None = None) -> list[ExtraEdge]:
    """Report the edges whose ends are no node; the others, deduplicated, in order. An
    end that is no node but a skill's bare name (the reference runtime writes
    `analyze-resume` where ctxfst writes `skill:analyze-resume`) names that skill's node
    (`bare_skills`: bare name -> node)."""
    bare_skills = bare_skills or {}
    kept: dict[tuple[str, str, str], tuple[str, ExtraEdge]] = {}
    for edge_file in edge_files:
        for index, edge in edge_file.edges:
            ends = {end: bare_skills[end] for end in (edge.source, edge.target)
                    if end not in nodes and end in bare_skills}
            if ends:
                edge = edge.model_copy(update={"source": ends.get(edge.source, edge.source),
                                               "target": ends.get(edge.target, edge.target)})
            unknown = [end for end in (edge.source, edge.target) if end not in nodes]
            for end in unknown:
                field_name = "source" if end == edge.source else "target"
                out.append(_at(edge_file, (index, field_name), "CTX604",
                               f"edge #{index + 1}: {field_name} '{end}' is no entity or skill "
                               "(skill:<name>) of the knowledge base"))
            if unknown:
                continue
            key = (edge.source, edge.target, edge.relation)
            if key in kept:
                out.append(_at(edge_file, (index,), "CTX605",
                               f"edge {edge.source} -{edge.relation}-> {edge.target} is "
                               f"already given in {kept[key][0]}; the first one is kept"))
                continue
            kept[key] = (edge_file.location((index,)), edge)
    return [kept[key][1] for key in sorted(kept)]


def _catalog(linked: Link, docs: dict[str, ParsedDocument]) -> dict[str, CatalogEntry]:
    catalog: dict[str, CatalogEntry] = {}
    entities = {path: dict(doc.entities) for path, doc in docs.items()}
    for entity_id, places in linked.declarations.items():
        found = [entities[place.path][place.index] for place in places]
        catalog[entity_id] = CatalogEntry(merge_entities(found[0], found[1:]),
                                          [Declaration(docs[p.path], p.index) for p in places])
    return catalog


def _chunk_places(linked: Link, docs: dict[str, ParsedDocument]) -> dict[str, ChunkPlace]:
    records = {path: dict(doc.chunks) for path, doc in docs.items()}
    return {chunk_id: ChunkPlace(docs[p.path], p.index, "chunks", records[p.path][p.index])
            for chunk_id, p in linked.chunk_places.items()}


def _refused_entity_ids(doc: ParsedDocument) -> frozenset[str]:
    """Ids of entities[] entries of doc that have a string id but were not kept."""
    raw = (doc.frontmatter or {}).get("entities")
    if not isinstance(raw, list) or len(doc.entities) == len(raw):
        return frozenset()
    kept = {index for index, _ in doc.entities}
    return frozenset(item["id"] for index, item in enumerate(raw) if index not in kept
                     and isinstance(item, dict) and isinstance(item.get("id"), str))


def _check_conditions(doc, base: KeyPath, label: str, record, view: View, out,
                      refused: frozenset[str] = frozenset()) -> None:
    for field_name, allowed in _CONDITION_TYPES.items():
        references = record.field_value(field_name)  # entities: an extra state_refs
        if references is None or references == []:
            continue
        if not (isinstance(references, list) and all(isinstance(r, str) for r in references)):
            out.append(_at(doc, base + (field_name,), "CTX102",
                           f"{label}: {field_name} must be a list of state ids, found "
                           f"{type(references).__name__} {short_repr(references)}"))
            continue  # (a string would be read one character per id)
        for position, reference in enumerate(references):
            _negated, ref_id = strip_not(reference)
            path = base + (field_name, position)
            found = view.types.get(ref_id)
            if found is None and ref_id in refused:
                continue
            if found is None:
                out.append(_at(doc, path, "CTX204",
                               f"{label}: {field_name} names '{ref_id}', which no document "
                               f"declares (declare it as a {' or '.join(allowed)} entity)"
                               f"{view.suggest(ref_id)}"))
            elif found not in allowed:
                out.append(_at(doc, path, "CTX205",
                               f"{label}: {field_name} names '{ref_id}', a "
                               f"{found} entity; it must name a {' or '.join(allowed)}"))


def _check_body_sync(doc: ParsedDocument, root: Path, out: list[Diagnostic],
                     files: TreeFiles) -> None:
    declared = {record.id: (index, record) for index, record in doc.chunks}
    raw_ids = set()
    raw_chunks = (doc.frontmatter or {}).get("chunks")
    for item in raw_chunks if isinstance(raw_chunks, list) else []:
        if isinstance(item, dict) and isinstance(item.get("id"), str):
            raw_ids.add(item["id"])
    for body in doc.bodies.values():
        if body.id not in raw_ids:
            out.append(diag("CTX301", f"chunk '{body.id}' appears in the body but not in "
                            "the frontmatter chunks[]", doc.path, body.line, body.column))
    for chunk_id, (index, record) in declared.items():
        base = ("chunks", index)
        if record.content_path is not None:
            if chunk_id in doc.bodies:
                out.append(_at(doc, base + ("content_path",), "CTX310",
                               f"chunk '{chunk_id}' has a body passage and a content_path; "
                               "keep one"))
            _check_content_path(doc, root, base, record, out, files)
        elif chunk_id not in doc.bodies:
            out.append(_at(doc, base + ("id",), "CTX302",
                           f"chunk '{chunk_id}' is declared but has no <Chunk id=\"{chunk_id}\">"
                           " passage in the body (or content_path)"))
    _check_passage_evidence(doc, root, out, files)


def content_target(doc, record: ChunkRecord, files: TreeFiles = WORK_TREE
                   ) -> tuple[Path | None, str | None]:
    """The resolved file a chunk's content_path names, or why it names none. The one
    place that resolves content_path: validation, the compiler and facts use it (each
    still checks the target is inside the root: a file may change between them)."""
    problem = path_problem(record.content_path)
    if problem is not None:
        return None, problem
    try:
        folder = files.resolve(Path(doc.fs_path)).parent
        return files.resolve(folder / record.content_path), None
    except (OSError, RuntimeError) as error:  # RuntimeError: a symlink loop
        return None, f"cannot be resolved: {error}"


def passage_file(doc, record: ChunkRecord, root: Path) -> tuple[Path | None, str | None]:
    """content_target, refused when it leaves root (resolved): what the compiler and the
    facts stage read, checked again there since a file may change after validation."""
    target, problem = content_target(doc, record)
    if target is not None and not inside(root, target):
        return None, "is outside the knowledge base root"
    return target, problem


def _check_content_path(doc, root: Path, base, record: ChunkRecord, out,
                        files: TreeFiles) -> None:
    where = base + ("content_path",)
    if doc.fs_path is None:
        return
    target, problem = content_target(doc, record, files)
    root = root.resolve()
    if target is None:
        out.append(_at(doc, where, "CTX311",
                       f"content_path {short_repr(record.content_path)} {problem}"))
    elif not files.inside(root, target):
        out.append(_at(doc, where, "CTX308",
                       f"content_path '{record.content_path}' points outside the knowledge "
                       f"base root {root}"))
    elif (size := files.size(target)) is None:
        if files.exists(target):  # a folder, FIFO, socket or device
            out.append(_at(doc, where, "CTX311", f"content_path '{record.content_path}' "
                           "names no regular file"))
        else:
            out.append(_at(doc, where, "CTX309",
                           f"content_path '{record.content_path}' does not exist"))
    elif size > MAX_FILE_BYTES:  # the build could not read it
        out.append(_at(doc, where, "CTX004", f"content_path '{record.content_path}' names "
                       f"a file over the {MAX_FILE_BYTES:,}-byte limit"))


def _check_passage_evidence(doc: ParsedDocument, root: Path, out: list[Diagnostic],
                            files: TreeFiles) -> None:
    """`evidence:` of declared facts that parsing could not check because a passage lives
    in a content_path file (parsing sees one file; a KB-level check sees them all)."""
    from .facts import EvidenceSearch

    if doc.fs_path is None or all(record.content_path is None for _, record in doc.chunks):
        return
    passages: dict[str, str] = {chunk_id: body.content for chunk_id, body in doc.bodies.items()}
    for _, record in doc.chunks:
        if record.content_path is None:
            continue
        target, _ = content_target(doc, record, files)
        if target is not None and files.inside(root.resolve(), target) \
                and files.size(target) is not None:
            text = files.text(target)
            if text is not None:
                passages[record.id] = text
    chunk_ids = {("chunks", index): record.id for index, record in doc.chunks}
    search = EvidenceSearch()
    for owner, facts in sorted((getattr(doc, "facts", None) or {}).items()):
        if owner in chunk_ids:
            if doc.chunks[owner[1]][1].content_path is None:
                continue  # a body passage: checked while parsing
            texts, where = [passages.get(chunk_ids[owner], "")], "the chunk's passage"
        else:
            texts, where = [passages[key] for key in sorted(passages)], \
                "any passage of the document"
        for fact in facts:
            found = True if fact.evidence is None else search.occurs(fact.evidence, texts)
            if found is None:
                out.extend(filter(None, [search.refusal(doc, fact.path + ("evidence",))]))
            elif not found:
                out.append(_at(doc, fact.path + ("evidence",), "CTX708",
                               f"evidence {fact.evidence!r:.60} does not occur in {where}"))
