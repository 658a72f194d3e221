"""The skills' rules over a knowledge base (the per-file ones run while parsing)."""

from __future__ import annotations

import os
from pathlib import Path

from ..diagnostics import Diagnostic, diag
from ..document.link import View
from ..document.model import diagnostic_at as _at
from ..document.model import strip_not
from ..document.tree import WORK_TREE, TreeFiles
from . import SKILL_FILE
from .index import skill_node_id
from .model import SPEC_FIELDS, ParsedSkill


def skill_names(skills: list[ParsedSkill]) -> set[str] | None:
    """The names related_skills may use; None when the knowledge base has no skills
    (nothing to resolve them against)."""
    if not skills:
        return None
    return {skill.record.name for skill in skills if skill.record is not None}


def skill_nodes(skills: list[ParsedSkill]) -> set[str]:
    """The entity-graph nodes of the skills (what extra edges may name besides entities)."""
    return set(skill_node_names(skills).values())


def skill_states(skills: list[ParsedSkill]) -> set[str]:
    """Every state the skills' pre- and postconditions name (NOT stripped): with those no
    document declares, the states of the skills' own (CTX404), which runtime edges may
    name (what a skill completed)."""
    return {strip_not(reference)[1] for skill in skills if skill.record is not None
            for field_name in ("preconditions", "postconditions")
            for reference in getattr(skill.record, field_name)}


def skill_node_names(skills: list[ParsedSkill]) -> dict[str, str]:
    """Each skill's bare name -> its entity-graph node."""
    return {skill.record.name: skill_node_id(skill.record.name) for skill in skills
            if skill.record is not None}


def check_skills(skills: list[ParsedSkill], view: View, strict_spec: bool,
                 skills_dir: Path | None, root: Path, files: TreeFiles = WORK_TREE
                 ) -> list[Diagnostic]:
    """The skills' rules (they are few: always checked whole) against the view, and
    skills_dir's folders when given (their folders and scripts as `files` shows them)."""
    out: list[Diagnostic] = []
    if skills_dir is not None:
        shown = os.path.relpath(skills_dir) if skills_dir.is_absolute() else str(skills_dir)
        out.extend(check_skill_dirs(skills_dir, root, Path(shown).as_posix(), files))
    valid = [skill for skill in skills if skill.record is not None]
    names: dict[str, str] = {}
    produced: set[str] = set()
    for skill in valid:
        record = skill.record
        if record.name in names:
            out.append(_at(skill, ("name",), "CTX403", f"skill name '{record.name}' is also "
                           f"used by {names[record.name]}"))
        else:
            names[record.name] = skill.path
        produced.update(record.split_conditions()["add"])
    for skill in skills:
        if strict_spec and skill.frontmatter is not None:
            for key in skill.frontmatter:
                if key not in SPEC_FIELDS:
                    out.append(_at(skill, (key,), "CTX413",
                                   f"top-level '{key}' is not allowed by the Agent Skills "
                                   "specification; `ctxfst skills migrate` moves it into "
                                   "metadata"))
    for skill in valid:
        _check_skill(skill, view, set(names), produced, out)
        _check_script_target(skill, out, files)
    return out


def _check_script_target(skill: ParsedSkill, out: list[Diagnostic], files: TreeFiles
                         ) -> None:
    """A script that names a file inside its folder by its words (CTX414, parsing) must
    also stay inside it once links are followed: the command executor refuses one that
    leaves, so validation says so first."""
    if skill.fs_path is None or skill.frontmatter is None:
        return
    metadata = skill.frontmatter.get("metadata")
    where, value = ("script",), skill.frontmatter.get("script")
    if value is None and isinstance(metadata, dict):
        where, value = ("metadata", "script"), metadata.get("script")
    if not isinstance(value, str) or not value or any(d.code == "CTX414"
                                                      for d in skill.diagnostics):
        return
    try:
        folder = files.resolve(Path(skill.fs_path)).parent
        target = files.resolve(folder / value)
    except (OSError, ValueError, RuntimeError):
        return  # (an unusable path is CTX414 already)
    if folder not in target.parents:
        out.append(_at(skill, where, "CTX414", f"script {value!r} resolves to {target}, "
                       "outside the skill's folder (through a link)"))


def _check_skill(skill, view: View, names: set[str], produced: set[str], out) -> None:
    record = skill.record
    label = f"skill '{record.name}'"
    view.start_document()
    for field_name in ("preconditions", "postconditions"):
        for position, reference in enumerate(getattr(record, field_name)):
            negated, ref_id = strip_not(reference)
            found = view.types.get(ref_id)
            path = (field_name, position)
            if found is not None and found not in ("state", "goal"):
                out.append(_at(skill, path, "CTX205",
                               f"{label}: {field_name} names '{ref_id}', a "
                               f"{found} entity; it must name a state or goal"))
            elif (found is None and field_name == "preconditions" and not negated
                  and ref_id not in produced):
                out.append(_at(skill, path, "CTX409",
                               f"{label}: precondition '{ref_id}' is produced by no skill "
                               "and declared by no document, so nothing can make it hold"))
            elif found is None:
                out.append(_at(skill, path, "CTX404",
                               f"{label}: {field_name} names '{ref_id}', which no document "
                               "declares (a state of the skill's own)"))
    for position, node in enumerate(record.related_nodes):
        if node not in view.types:
            out.append(_at(skill, ("related_nodes", position), "CTX406",
                           f"{label}: related node '{node}' is no entity of the knowledge "
                           f"base{view.suggest(node)}"))
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


def check_skill_dirs(skills_dir: Path, root: Path, shown: str,
                     files: TreeFiles = WORK_TREE) -> list[Diagnostic]:
    """Every folder of skills/ holds a SKILL.md; none links outside the knowledge base."""
    found: list[Diagnostic] = []
    root = root.resolve()
    for name, is_link in files.folders(skills_dir):
        if name.startswith("."):
            continue
        path = f"{shown}/{name}"
        if is_link:
            try:
                target = files.resolve(skills_dir / name)
            except (OSError, RuntimeError):
                continue  # (a loop: no folder, as the walk finds it)
            if target != root and root not in target.parents:
                found.append(diag("CTX411", f"skill folder '{name}' is a link to "
                                  f"{target}, outside the knowledge base; it is not read",
                                  path))
                continue
        if files.size(skills_dir / name / SKILL_FILE) is None:
            found.append(diag("CTX410", f"skill folder '{name}' has no {SKILL_FILE}",
                              path))
    return found
