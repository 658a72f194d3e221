"""`ctxfst lint --fix`: the fixes safe to make mechanically, made in place with the rest
of each file kept as it was (yamledit), across the knowledge base at once.

- `aliases: []` added to an entity without aliases;
- an id normalised (lowercase ASCII, `-` between words), every reference to it in the
  knowledge base's documents renamed with it, its `<Chunk>` tag too;
- an item repeated in a list field removed (the first kept: order is the author's);
- a chunk declared for each `<Chunk>` tag the frontmatter lacks;
- the frontmatter's chunks sorted into the order of their passages in the body.

Anything needing judgement stays a finding: an id whose normal form is taken or is named
by a skill or an extra-edges file, an entity id without a type prefix, an edit the
editor cannot make cleanly.
"""

from __future__ import annotations

import difflib
import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..diagnostics import Diagnostic, diag
from ..document.ids import ID_PATTERN
from .documents import Editable, read_editable
from .yamledit import EditRefused, FrontmatterEditor, reorder_items

_ID = re.compile(ID_PATTERN)
_CHUNK_STYLE = re.compile(r"^[a-z0-9]+:[a-z0-9]+(-[a-z0-9]+)*$")
LIST_FIELDS = ("aliases", "tags", "entities", "state_refs", "dependencies", "preconditions",
               "postconditions", "related_skills", "related_nodes")


@dataclass
class Fixed:
    path: str
    what: str


@dataclass
class FixPlan:
    texts: dict[str, tuple[Editable, str, str]] = field(default_factory=dict)  # old, new
    fixed: list[Fixed] = field(default_factory=list)
    refused: list[Diagnostic] = field(default_factory=list)

    def diff(self) -> str:
        out: list[str] = []
        for path, (_, old, new) in sorted(self.texts.items()):
            out.extend(difflib.unified_diff(old.splitlines(keepends=True),
                                            new.splitlines(keepends=True),
                                            f"a/{path}", f"b/{path}"))
        return "".join(line if line.endswith("\n") else line + "\n" for line in out)


def normal_id(value: str, chunk: bool) -> str | None:
    """An id in its normal form: ASCII, lowercase, words joined by '-' (chunk ids: '_' and
    '.' too, as the lint's `category:topic-name` wants). None when nothing is left."""
    text = unicodedata.normalize("NFKD", value).encode("ascii", "ignore").decode()
    keep = r"[^a-z0-9]+" if chunk else r"[^a-z0-9_.]+"
    parts = [re.sub(keep, "-", part.lower()).strip("-") for part in text.strip().split(":")]
    return ":".join(parts) if all(parts) else None


def _strings(value: Any, path: tuple = ()) -> Iterable[tuple[tuple, str]]:
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _strings(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _strings(item, (*path, index))


def _records(front: dict, key: str) -> list[tuple[int, dict]]:
    items = front.get(key)
    return [(i, item) for i, item in enumerate(items) if isinstance(item, dict)] \
        if isinstance(items, list) else []


def plan_fixes(documents: list[Editable], other_texts: dict[str, str],
               scope: set[str] | None = None) -> FixPlan:
    """documents: every document of the knowledge base whose frontmatter loaded;
    other_texts: the skills' and extra-edge files' text by path (an id they name is not
    renamed); scope: the documents to fix (default: all). A renamed id is renamed in
    every document that names it."""
    plan = FixPlan()
    parsed = [item.doc for item in documents]
    renames = _renames([doc for doc in parsed if scope is None or doc.path in scope],
                       parsed, other_texts, plan)
    for item in documents:
        doc, front = item.doc, item.doc.frontmatter
        in_scope = scope is None or doc.path in scope
        if not in_scope and not _names_any(doc, renames):
            continue
        editor = FrontmatterEditor(item.raw, doc)
        done: list[str] = []
        try:
            _rename_references(editor, front, renames, done)
            _rename_tags(editor, doc, renames)
            if in_scope:
                for index, entity in _records(front, "entities"):
                    if isinstance(entity.get("id"), str) and "aliases" not in entity:
                        editor.insert_key(("entities", index), "aliases", "[]", [])
                        shown = renames.get(entity["id"], entity["id"])
                        done.append(f"added aliases: [] to entity '{shown}'")
                _drop_repeats(editor, front, renames, done)
                _declare_tagged_chunks(editor, doc, renames, done)
            new = editor.text() if editor.changed else item.raw
        except EditRefused as error:
            plan.refused.append(diag("CTX906", f"not fixed: {error}", doc.path))
            continue
        if in_scope:
            new = _sort_chunks(new, doc, done, plan)
        if new != item.raw:
            plan.texts[doc.path] = (item, item.raw, new)
            plan.fixed.extend(Fixed(doc.path, what) for what in done or ["renamed references"])
    return plan


def fix_paths(paths: list[Path], write: bool) -> tuple[str, list[Diagnostic]]:
    """`lint --fix` (write) or `lint --diff`: the fixes of the knowledge bases of paths,
    as lint would check them. The lines to print (what was fixed, or the diff) and the
    fixes refused."""
    from ..validation import plan_paths

    report: list[str] = []
    refused: list[Diagnostic] = []
    for plan in plan_paths(paths, Path.cwd()):
        found, others = read_editable(plan.inputs)
        documents = [item for item in found if isinstance(item.doc.frontmatter, dict)]
        scope = None if plan.only is None else {
            item.doc.path for item in documents if Path(item.doc.fs_path).resolve() in plan.only}
        fixes = plan_fixes(documents, others, scope)
        refused.extend(fixes.refused)
        if not write:
            report.append(fixes.diff())
            continue
        for _path, (item, _, new) in sorted(fixes.texts.items()):
            item.write(new)
        report.extend(f"{fixed.path}: fixed: {fixed.what}\n" for fixed in fixes.fixed)
    return "".join(report), refused


def _sort_chunks(text: str, doc, done: list[str], plan: FixPlan) -> str:
    """The frontmatter's chunks in the order their passages come in the body (those
    without a passage after them, as they were)."""
    from ..document.parse import parse_text

    fixed = parse_text(text.replace("\r\n", "\n").replace("\r", "\n"), doc.path,
                       doc.fs_path, typed=False)
    records = _records(fixed.frontmatter or {}, "chunks")
    if len(records) < 2 or len(records) != len(fixed.frontmatter["chunks"]):
        return text
    place = {chunk_id: body.line for chunk_id, body in fixed.bodies.items()}
    order = sorted(range(len(records)), key=lambda i: (
        place.get(records[i][1].get("id"), float("inf")), i))
    if order == list(range(len(records))):
        return text
    try:
        sorted_text = reorder_items(text, fixed, "chunks", order)
    except EditRefused as error:
        plan.refused.append(diag("CTX906", f"chunks not put in body order: {error}",
                                 doc.path))
        return text
    done.append("put the chunks in the order of their passages")
    return sorted_text


def _declared_ids(documents: list) -> dict[str, bool]:
    """id -> whether it is a chunk's."""
    ids: dict[str, bool] = {}
    for doc in documents:
        for key in ("entities", "chunks"):
            for _, record in _records(doc.frontmatter, key):
                if isinstance(record.get("id"), str):
                    ids[record["id"]] = key == "chunks"
    return ids


def _names_any(doc, renames: dict[str, str]) -> bool:
    return bool(renames) and any(
        (value[4:].strip() if value.startswith("NOT ") else value) in renames
        for _, value in _strings(doc.frontmatter)) or any(c in renames for c in doc.bodies)


def _renames(in_scope: list, documents: list, other_texts: dict[str, str],
             plan: FixPlan) -> dict[str, str]:
    ids = _declared_ids(documents)
    renames: dict[str, str] = {}
    targets: dict[str, list[str]] = {}
    for old, chunk in _declared_ids(in_scope).items():
        wrong = not _ID.match(old) or (chunk and not _CHUNK_STYLE.match(old))
        new = normal_id(old, chunk) if wrong else None
        if new and new != old and _ID.match(new):
            targets.setdefault(new, []).append(old)
    for new, olds in sorted(targets.items()):
        if len(olds) > 1 or new in ids:
            continue  # taken, or two ids would merge: a person decides
        old = olds[0]
        named_by = [path for path, text in sorted(other_texts.items())
                    if re.search(rf"(?<![\w:.-]){re.escape(old)}(?![\w:.-])", text)]
        if named_by:
            plan.refused.append(diag("CTX906", f"id '{old}' not renamed to '{new}': "
                                     f"{named_by[0]} names it; rename it by hand",
                                     named_by[0]))
            continue
        renames[old] = new
    return renames


def _rename_references(editor: FrontmatterEditor, front: dict, renames: dict[str, str],
                       done: list[str]) -> None:
    if not renames:
        return
    for path, value in list(_strings(front)):
        negated = value.startswith("NOT ")
        bare = value[4:].strip() if negated else value
        if bare in renames:
            editor.set_scalar(path, ("NOT " if negated else "") + renames[bare])
            if path[-1] == "id" and len(path) == 3:
                done.append(f"renamed '{bare}' to '{renames[bare]}'")


def _drop_repeats(editor: FrontmatterEditor, front: dict, renames: dict[str, str],
                  done: list[str]) -> None:
    for key in ("entities", "chunks"):
        for index, record in _records(front, key):
            for name in LIST_FIELDS:
                values = record.get(name)
                if not isinstance(values, list):
                    continue
                seen: set = set()
                repeats = []
                for position, item in enumerate(values):
                    marker = repr(item)
                    if marker in seen:
                        repeats.append(position)
                    seen.add(marker)
                for position in reversed(repeats):
                    editor.delete_item((key, index, name, position))
                if repeats:
                    shown = renames.get(record.get("id"), record.get("id"))
                    done.append(f"removed {len(repeats)} repeated item(s) from {name} of "
                                f"'{shown}'")


def _declare_tagged_chunks(editor: FrontmatterEditor, doc, renames: dict[str, str],
                           done: list[str]) -> None:
    declared = {record.get("id") for _, record in _records(doc.frontmatter, "chunks")}
    missing = []
    for chunk_id in doc.bodies:
        final = renames.get(chunk_id, chunk_id)
        if chunk_id not in declared and final not in declared and _ID.match(final):
            missing.append({"id": final})
    if missing:
        editor.append_items("chunks", missing)
        done.extend(f"declared chunk '{item['id']}' for its <Chunk> tag" for item in missing)


def _rename_tags(editor: FrontmatterEditor, doc, renames: dict[str, str]) -> None:
    """The body's chunk tags of renamed chunks, renamed."""
    for chunk_id, body in doc.bodies.items():
        new = renames.get(chunk_id)
        if new is None:
            continue
        index = body.line - 1
        pattern = re.compile(r"""\bid\s*=\s*(["'])(""" + re.escape(chunk_id) + r")\1",
                             re.IGNORECASE)
        found = pattern.search(editor.lines[index])
        if found is None:
            raise EditRefused(f"the <Chunk> tag of '{chunk_id}' is not on one line")
        editor.replace_text(index, found.start(2), found.end(2), new)
