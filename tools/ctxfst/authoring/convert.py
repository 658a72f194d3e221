"""Converting a batch of notes: find them, draft each against the catalog, give ids,
validate the drafts together with the knowledge base they join, then write all or none."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..diagnostics import Diagnostic, Severity, diag, ordered
from ..files import display_path, walk
from .chunk import (
    Catalog,
    ChunkError,
    Draft,
    Note,
    Options,
    assign_ids,
    draft_note,
    read_note,
    render,
)

CTXFST_SUFFIX = ".ctxfst.md"


@dataclass
class Conversion:
    drafts: list[Draft] = field(default_factory=list)
    diagnostics: list[Diagnostic] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # CtxFST documents met in a folder
    written: list[Path] = field(default_factory=list)
    project: Path | None = None

    @property
    def failed(self) -> bool:
        return any(d.severity == Severity.ERROR for d in self.diagnostics)


def _target_name(name: str) -> str:
    lowered = name.lower()
    if lowered.endswith(CTXFST_SUFFIX):
        return name
    for suffix in (".markdown", ".md"):
        if lowered.endswith(suffix):
            return name[:-len(suffix)] + CTXFST_SUFFIX
    return name + CTXFST_SUFFIX


def find_notes(paths: list[Path], out: Path) -> list[tuple[Path, Path, bool]]:
    """(note, target, named on the command line) for every note under paths; drafts
    already under out are not notes. A path that does not exist raises FileNotFoundError."""
    found: list[tuple[Path, Path, bool]] = []
    out_resolved = out.resolve()
    for path in paths:
        if not path.exists():
            raise FileNotFoundError(f"{path}: no such file or directory")
        if path.is_dir():
            for file in walk(path, (".md", ".markdown")):
                resolved = file.resolve()
                if out_resolved != path.resolve() and out_resolved in resolved.parents:
                    continue
                if file.name.lower().endswith(CTXFST_SUFFIX) or file.name == "SKILL.md":
                    continue
                relative = file.relative_to(path)
                found.append((file, out / relative.parent / _target_name(file.name), False))
        else:
            found.append((path, out / _target_name(path.name), True))
    return found


def _read(path: Path, shown: str) -> tuple[str | None, Diagnostic | None]:
    """The note's text exactly (a BOM dropped, line endings kept), or why not."""
    from ..document.source import Source, decode_text

    data, problem = Source(shown, path).read_bytes()
    if problem is not None:
        return None, problem
    _, problem = decode_text(shown, data)  # binary, not UTF-8, empty: located
    if problem is not None:
        return None, problem
    return data.decode("utf-8-sig"), None


def _project_of(out: Path):
    from ..config import find_project

    probe = out.resolve()
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return find_project(probe)


def _project_kb(config, exclude: set[Path]):
    from ..kb import load_kb
    from ..validation import project_inputs

    inputs = [item for item in project_inputs(config)
              if Path(item.source.fs_path).resolve() not in exclude]
    return load_kb(config.root, inputs)


def load_catalog(config, targets: set[Path], catalog_paths: list[Path]
                 ) -> tuple[Catalog, set[str], Any]:
    """The entities drafts may link (the project's, then those of the catalog files), the
    chunk ids the project already uses, and the project's knowledge base as loaded (drafts
    being replaced left out; None outside a project)."""
    from ..document.kb import inputs_for
    from ..kb import load_kb, validate

    catalog = Catalog()
    taken: set[str] = set()
    project = None
    if config is not None:
        project = _project_kb(config, targets)
        validation = validate(project)
        for entity_id in sorted(validation.catalog):
            catalog.add(validation.catalog[entity_id].entity, in_kb=True)
        taken.update(validation.chunks)
    for path in catalog_paths:
        if not path.exists():
            raise FileNotFoundError(f"{path}: no such file or directory")
        kb = load_kb(path if path.is_dir() else path.parent, inputs_for([path], False))
        for doc in kb.documents:
            for _, entity in doc.entities:
                catalog.add(entity, in_kb=False)
    return catalog, taken, project


def convert(paths: list[Path], out: Path, options: Options, force: bool = False,
            catalog_paths: list[Path] | None = None, dry_run: bool = False) -> Conversion:
    result = Conversion()
    notes_found = find_notes(paths, out)
    config = _project_of(out)
    result.project = config.root if config is not None else None
    targets = {target.resolve() for _, target, _ in notes_found}
    catalog, taken, project = load_catalog(config, targets, catalog_paths or [])
    finder = catalog.finder()
    seen_targets: dict[Path, str] = {}
    drafts: list[Draft] = []
    notes: list[Note] = []
    for note_path, target, named in notes_found:
        shown = display_path(note_path)
        resolved = target.resolve()
        if resolved in seen_targets:
            result.diagnostics.append(diag(
                "CTX904", f"{seen_targets[resolved]} and this note would both be written to "
                f"{display_path(target)}", shown))
            continue
        seen_targets[resolved] = shown
        text, problem = _read(note_path, shown)
        if problem is not None:
            result.diagnostics.append(problem)
            continue
        try:
            note = read_note(shown, text)
        except ChunkError as error:
            found = error.args[0]
            if not named and all(d.code == "CTX901" for d in found):
                result.skipped.append(shown)  # a CtxFST document beside the notes
            else:
                result.diagnostics.extend(found)
            continue
        if not any(line.strip() for line in note.lines):
            result.diagnostics.append(diag("CTX005", "the note has no text to chunk", shown))
            continue
        stem = note_path.name.split(".")[0]
        drafts.append(draft_note(note, target, catalog, finder, options, stem))
        notes.append(note)
        if target.exists() and not force:
            result.diagnostics.append(diag(
                "CTX903", f"{display_path(target)} exists; --force replaces it", shown))
    assign_ids(drafts, notes, taken, options.category)
    for draft, note in zip(drafts, notes, strict=True):
        draft.text = render(draft, note)
        result.diagnostics.extend(draft.diagnostics)
    result.drafts = drafts
    if drafts:
        result.diagnostics.extend(_validate_drafts(drafts, config, project, out))
    result.diagnostics = ordered(result.diagnostics)
    if result.failed or dry_run:
        return result
    from ..artifacts.io import write_atomic

    for draft in drafts:
        draft.target.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(draft.target, draft.text.encode("utf-8"))
        result.written.append(draft.target)
    return result


def _validate_drafts(drafts: list[Draft], config, project, out: Path) -> list[Diagnostic]:
    """The drafts' errors when checked as part of the knowledge base they join (project,
    as load_catalog loaded it; or as one of their own, outside a project): a draft that
    would not validate is not written."""
    from ..document.kb import Input
    from ..document.source import Source
    from ..kb import load_kb, validate

    inputs = [Input(Source(display_path(d.target), d.target, d.text.encode("utf-8")), True)
              for d in drafts]
    kb = load_kb(out.resolve() if project is None else project.root, inputs)
    if project is not None:  # the project's files as loaded, and the drafts
        kb.documents = project.documents + kb.documents
        kb.skills, kb.edge_files = project.skills, project.edge_files
        kb.skills_dir = config.skills_dir
    shown = {display_path(d.target) for d in drafts}
    return [d for d in validate(kb).diagnostics
            if d.path in shown and d.severity == Severity.ERROR]

