"""Validation rules over a whole knowledge base (the per-file ones run while parsing)."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from ..diagnostics import Diagnostic, diag, ordered
from ..files import inside
from ..skills.model import SPEC_FIELDS
from ..skills.index import skill_node_id
from ..skills.parse import check_skill_dirs
from .edges import ExtraEdge
from .kb import CatalogEntry, Declaration, KnowledgeBase, Place, merge_entities
from .model import ChunkRecord, ParsedDocument, path_problem, strip_not
from .source import MAX_FILE_BYTES, Source, load_text
from .model import diagnostic_at as _at
from .parse import short_repr
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


def validate(kb: KnowledgeBase, strict_spec: bool = False) -> Validation:
    out: list[Diagnostic] = kb.parse_diagnostics()
    catalog = build_catalog(kb, out)
    chunks = _chunk_index(kb, out)
    suggest = _Suggestions(catalog)
    for doc in kb.documents:
        _check_body_sync(doc, kb.root, out)
        for index, entity in doc.entities:
            _check_conditions(doc, ("entities", index), f"entity '{entity.id}'", entity,
                              catalog, suggest, out)
        for index, chunk in doc.chunks:
            base = ("chunks", index)
            label = f"chunk '{chunk.id}'"
            for position, ref in enumerate(chunk.entities):
                if ref not in catalog:
                    out.append(_at(doc, base + ("entities", position), "CTX204",
                                   f"{label} mentions '{ref}', which no document declares"
                                   f"{suggest(ref)}"))
            _check_conditions(doc, base, label, chunk, catalog, suggest, out)
            for position, dependency in enumerate(chunk.dependencies):
                if dependency not in chunks:
                    out.append(_at(doc, base + ("dependencies", position), "CTX206",
                                   f"{label} depends on '{dependency}', which is no chunk "
                                   "in the knowledge base"))
    _check_cycles(chunks, out)
    _check_skills(kb, catalog, suggest, out, strict_spec)
    skill_nodes = {skill_node_id(s.record.name) for s in kb.skills if s.record is not None}
    edges = _check_extra_edges(kb, set(catalog) | skill_nodes, out)
    return Validation(catalog=catalog, chunks=chunks, diagnostics=ordered(out),
                      extra_edges=edges)


def _check_extra_edges(kb: KnowledgeBase, nodes: set[str], out) -> list[ExtraEdge]:
    kept: dict[tuple[str, str, str], tuple[str, ExtraEdge]] = {}
    for edge_file in kb.edge_files:
        for index, edge in edge_file.edges:
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


def build_catalog(kb: KnowledgeBase, out: list[Diagnostic]) -> dict[str, CatalogEntry]:
    catalog: dict[str, CatalogEntry] = {}
    merges: dict[str, list] = {}  # re-declarations, merged into the first at the end
    for doc in kb.documents:
        seen_here: dict[str, int] = {}
        for index, entity in doc.entities:
            place = Declaration(doc, index)
            if entity.id in seen_here:
                first = Declaration(doc, seen_here[entity.id])
                out.append(_at(doc, ("entities", index, "id"), "CTX201",
                               f"entity '{entity.id}' is declared twice in this document "
                               f"(first at {first.location()})"))
                continue
            seen_here[entity.id] = index
            entry = catalog.get(entity.id)
            if entry is None:
                catalog[entity.id] = CatalogEntry(entity, [place])
                continue
            known = entry.entity
            if known.name != entity.name or known.type != entity.type:
                out.append(_at(doc, ("entities", index, "id"), "CTX202",
                               f"entity '{entity.id}' is declared here as {entity.name!r} "
                               f"({entity.type}) but as {known.name!r} ({known.type}) at "
                               f"{entry.declarations[0].location()}"))
                continue
            merges.setdefault(entity.id, []).append(entity)
            entry.declarations.append(place)
    for entity_id, others in merges.items():
        catalog[entity_id].entity = merge_entities(catalog[entity_id].entity, others)
    return catalog


def _chunk_index(kb: KnowledgeBase, out: list[Diagnostic]) -> dict[str, ChunkPlace]:
    chunks: dict[str, ChunkPlace] = {}
    for doc in kb.documents:
        for index, record in doc.chunks:
            place = ChunkPlace(doc, index, "chunks", record)
            if record.id in chunks:
                first = chunks[record.id]
                where = "in this document" if first.doc is doc else "in the knowledge base"
                out.append(_at(doc, ("chunks", index, "id"), "CTX203",
                               f"chunk id '{record.id}' is used twice {where} "
                               f"(first at {first.location()})"))
                continue
            chunks[record.id] = place
    return chunks


def _check_conditions(doc, base: KeyPath, label: str, record, catalog, suggest,
                      out) -> None:
    for field_name, allowed in _CONDITION_TYPES.items():
        references = getattr(record, field_name, None)  # entities: an extra state_refs
        if references is None:
            continue
        if not (isinstance(references, list) and all(isinstance(r, str) for r in references)):
            out.append(_at(doc, base + (field_name,), "CTX102",
                           f"{label}: {field_name} must be a list of state ids, found "
                           f"{type(references).__name__} {short_repr(references)}"))
            continue  # (a string would be read one character per id)
        for position, reference in enumerate(references):
            _negated, ref_id = strip_not(reference)
            path = base + (field_name, position)
            entry = catalog.get(ref_id)
            if entry is None:
                out.append(_at(doc, path, "CTX204",
                               f"{label}: {field_name} names '{ref_id}', which no document "
                               f"declares (declare it as a {' or '.join(allowed)} entity)"
                               f"{suggest(ref_id)}"))
            elif entry.entity.type not in allowed:
                out.append(_at(doc, path, "CTX205",
                               f"{label}: {field_name} names '{ref_id}', a "
                               f"{entry.entity.type} entity; it must name a "
                               f"{' or '.join(allowed)}"))


class _Suggestions:
    """A hint when an unknown id differs from a declared one only by its type prefix
    (state: vs entity:); looked up by last part, not by scanning the catalog per id."""

    def __init__(self, catalog: dict[str, CatalogEntry]) -> None:
        self.by_tail: dict[str, str] = {}
        for candidate in catalog:  # the first declared wins, as in catalog order
            self.by_tail.setdefault(candidate.split(":")[-1], candidate)

    def __call__(self, reference: str) -> str:
        candidate = self.by_tail.get(reference.split(":")[-1])
        if candidate is None or candidate == reference:
            return ""
        return f"; did you mean '{candidate}'?"


def _check_body_sync(doc: ParsedDocument, root: Path, out: list[Diagnostic]) -> None:
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
            _check_content_path(doc, root, base, record, out)
        elif chunk_id not in doc.bodies:
            out.append(_at(doc, base + ("id",), "CTX302",
                           f"chunk '{chunk_id}' is declared but has no <Chunk id=\"{chunk_id}\">"
                           " passage in the body (or content_path)"))
    _check_passage_evidence(doc, root, out)


def content_target(doc, record: ChunkRecord) -> tuple[Path | None, str | None]:
    """The resolved file a chunk's content_path names, or why it names none. The one
    place that resolves content_path: validation, the compiler and facts use it (each
    still checks the target is inside the root: a file may change between them)."""
    problem = path_problem(record.content_path)
    if problem is not None:
        return None, problem
    try:
        return (Path(doc.fs_path).resolve().parent / record.content_path).resolve(), None
    except (OSError, RuntimeError) as error:  # RuntimeError: a symlink loop
        return None, f"cannot be resolved: {error}"


def passage_file(doc, record: ChunkRecord, root: Path) -> tuple[Path | None, str | None]:
    """content_target, refused when it leaves root (resolved): what the compiler and the
    facts stage read, checked again there since a file may change after validation."""
    target, problem = content_target(doc, record)
    if target is not None and not inside(root, target):
        return None, "is outside the knowledge base root"
    return target, problem


def _file_size(target: Path, root: Path) -> int | None:
    """The size of target when it is a regular file inside root, else None."""
    if not inside(root, target):
        return None
    try:
        info = target.stat()
    except OSError:  # missing, a name too long for this file system, ...
        return None
    return info.st_size if stat.S_ISREG(info.st_mode) else None


def _check_content_path(doc, root: Path, base, record: ChunkRecord, out) -> None:
    where = base + ("content_path",)
    if doc.fs_path is None:
        return
    target, problem = content_target(doc, record)
    root = root.resolve()
    if target is None:
        out.append(_at(doc, where, "CTX311",
                       f"content_path {short_repr(record.content_path)} {problem}"))
    elif not inside(root, target):
        out.append(_at(doc, where, "CTX308",
                       f"content_path '{record.content_path}' points outside the knowledge "
                       f"base root {root}"))
    elif (size := _file_size(target, root)) is None:
        out.append(_at(doc, where, "CTX309",
                       f"content_path '{record.content_path}' does not exist"))
    elif size > MAX_FILE_BYTES:  # the build could not read it
        out.append(_at(doc, where, "CTX004", f"content_path '{record.content_path}' names "
                       f"a file over the {MAX_FILE_BYTES:,}-byte limit"))


def _check_passage_evidence(doc: ParsedDocument, root: Path, out: list[Diagnostic]) -> None:
    """`evidence:` of declared facts that parsing could not check because a passage lives
    in a content_path file (parsing sees one file; a KB-level check sees them all)."""
    from .facts import EvidenceSearch

    if doc.fs_path is None or all(record.content_path is None for _, record in doc.chunks):
        return
    passages: dict[str, str] = {chunk_id: body.content for chunk_id, body in doc.bodies.items()}
    for _, record in doc.chunks:
        if record.content_path is None:
            continue
        target, _ = content_target(doc, record)
        if target is not None and _file_size(target, root.resolve()) is not None:
            text, _ = load_text(Source(str(target), target))  # size-limited
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


_CYCLE_ENDS = 10  # ids shown at each end of a long cycle: a message never grows with the KB


def _check_cycles(chunks: dict[str, ChunkPlace], out: list[Diagnostic]) -> None:
    """Report each dependency cycle once (iterative DFS; KBs can be deep)."""
    state: dict[str, int] = {}  # 1 = on the stack, 2 = done
    positions: dict[tuple[str, str], int] = {}  # (chunk, dependency) -> its index
    for start in sorted(chunks):
        if start in state:
            continue
        stack = [(start, iter(chunks[start].record.dependencies))]
        trail = [start]
        depth = {start: 0}  # trail index of each chunk on it
        state[start] = 1
        while stack:
            node, children = stack[-1]
            advanced = False
            for child in children:
                if child not in chunks:
                    continue
                if state.get(child) == 1:
                    first = depth[child]
                    second = trail[first + 1] if first + 1 < len(trail) else child
                    place = chunks[child]
                    if (child, second) not in positions:
                        positions[child, second] = place.record.dependencies.index(second)
                    out.append(_at(place.doc, ("chunks", place.index, "dependencies",
                                               positions[child, second]),
                                   "CTX207", "dependency cycle: " + _cycle_text(trail, first)))
                elif child not in state:
                    state[child] = 1
                    depth[child] = len(trail)
                    trail.append(child)
                    stack.append((child, iter(chunks[child].record.dependencies)))
                    advanced = True
                    break
            if not advanced:
                state[node] = 2
                depth.pop(trail.pop())
                stack.pop()


def _cycle_text(trail: list[str], first: int) -> str:
    """trail[first:] and back to its first id; a long cycle by its two ends."""
    length = len(trail) - first
    if length < 2 * _CYCLE_ENDS:
        ids = trail[first:]
    else:
        ids = (trail[first:first + _CYCLE_ENDS] + [f"... {length - 2 * _CYCLE_ENDS + 1} more ..."]
               + trail[len(trail) - _CYCLE_ENDS + 1:])
    return " -> ".join(ids + [trail[first]])


def _check_skills(kb: KnowledgeBase, catalog, suggest, out: list[Diagnostic],
                  strict_spec: bool) -> None:
    if kb.skills_dir is not None:
        shown = os.path.relpath(kb.skills_dir) if kb.skills_dir.is_absolute() else str(
            kb.skills_dir)
        out.extend(check_skill_dirs(kb.skills_dir, kb.root, Path(shown).as_posix()))
    skills = [skill for skill in kb.skills if skill.record is not None]
    names: dict[str, str] = {}
    produced: set[str] = set()
    for skill in skills:
        record = skill.record
        if record.name in names:
            out.append(_at(skill, ("name",), "CTX403", f"skill name '{record.name}' is also "
                           f"used by {names[record.name]}"))
        else:
            names[record.name] = skill.path
        produced.update(record.split_conditions()["add"])
    for skill in kb.skills:
        if strict_spec and skill.frontmatter is not None:
            for key in skill.frontmatter:
                if key not in SPEC_FIELDS:
                    out.append(_at(skill, (key,), "CTX413",
                                   f"top-level '{key}' is not allowed by the Agent Skills "
                                   "specification; `ctxfst skills migrate` moves it into "
                                   "metadata"))
    for skill in skills:
        _check_skill(skill, catalog, suggest, set(names), produced, out)
    if not kb.skills:
        return  # nothing to resolve entities' related_skills against
    for doc in kb.documents:
        for index, entity in doc.entities:
            for position, other in enumerate(entity.related_skills):
                if other not in names:
                    out.append(_at(doc, ("entities", index, "related_skills", position),
                                   "CTX208", f"entity '{entity.id}': related skill '{other}' "
                                   f"has no skills/{other}/SKILL.md"))


def _check_skill(skill, catalog, suggest, names: set[str], produced: set[str],
                 out) -> None:
    record = skill.record
    label = f"skill '{record.name}'"
    for field_name in ("preconditions", "postconditions"):
        for position, reference in enumerate(getattr(record, field_name)):
            negated, ref_id = strip_not(reference)
            entry = catalog.get(ref_id)
            path = (field_name, position)
            if entry is not None and entry.entity.type not in ("state", "goal"):
                out.append(_at(skill, path, "CTX205",
                               f"{label}: {field_name} names '{ref_id}', a "
                               f"{entry.entity.type} entity; it must name a state or goal"))
            elif (entry is None and field_name == "preconditions" and not negated
                  and ref_id not in produced):
                out.append(_at(skill, path, "CTX409",
                               f"{label}: precondition '{ref_id}' is produced by no skill "
                               "and declared by no document, so nothing can make it hold"))
            elif entry is None:
                out.append(_at(skill, path, "CTX404",
                               f"{label}: {field_name} names '{ref_id}', which no document "
                               "declares (a state of the skill's own)"))
    for position, node in enumerate(record.related_nodes):
        if node not in catalog:
            out.append(_at(skill, ("related_nodes", position), "CTX406",
                           f"{label}: related node '{node}' is no entity of the knowledge "
                           f"base{suggest(node)}"))
    for position, other in enumerate(record.related_skills):
        if other not in names:
            out.append(_at(skill, ("related_skills", position), "CTX407",
                           f"{label}: related skill '{other}' has no skills/{other}/SKILL.md"))
    effects = record.split_conditions()
    if effects["add"] and not effects["delete"] and set(effects["add"]) <= set(
            effects["pre_positive"]):
        out.append(_at(skill, ("postconditions",), "CTX408",
                       f"{label}: every postcondition already holds before it runs, so it "
                       "changes nothing"))
