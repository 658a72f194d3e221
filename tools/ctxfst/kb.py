"""The knowledge base: documents, skills and extra-edge files, loaded and checked together.

It sits above document/ and skills/: skills build on documents (skills/ imports
document/, never the reverse), and this is the one place that knows a knowledge base
holds both.
"""

from __future__ import annotations

from collections import ChainMap
from dataclasses import dataclass, field
from pathlib import Path

from .diagnostics import Diagnostic, ordered
from .document.edges import EdgeFile, ExtraEdge
from .document.kb import DocumentSet, Input, Mapper, parse_inputs
from .document.link import View
from .document.rules import (
    Validation,
    check_document,
    check_extra_edges,
    link_documents,
    validation_of,
)
from .document.tree import WORK_TREE, TreeFiles
from .skills import SKILL_FILE
from .skills.model import ParsedSkill
from .skills.parse import parse_skill
from .skills.rules import check_skills, skill_names, skill_node_names, skill_nodes, skill_states

PARSERS = {SKILL_FILE: parse_skill}  # the files that are no documents, by name


@dataclass
class KnowledgeBase(DocumentSet):
    skills: list[ParsedSkill] = field(default_factory=list)
    skills_dir: Path | None = None  # checked folder by folder when set (project mode)
    files: TreeFiles = WORK_TREE  # where passages and skill folders are read

    def all_files(self) -> list:
        return [*self.documents, *self.skills, *self.edge_files]


def load_kb(root: Path, inputs: list[Input], cache=None, mapper: Mapper | None = None
            ) -> KnowledgeBase:
    """Parse and type every input. With a ParseCache, unchanged documents are not
    parsed again. mapper: what runs the parses (document.kb.parse_inputs)."""
    kb = KnowledgeBase(root=root)
    for parsed in parse_inputs(inputs, cache, PARSERS, mapper):
        if isinstance(parsed, ParsedSkill):
            kb.skills.append(parsed)
        elif isinstance(parsed, EdgeFile):
            kb.edge_files.append(parsed)
        else:
            kb.documents.append(parsed)
    return kb


def validate(kb: KnowledgeBase, strict_spec: bool = False) -> Validation:
    """Every rule over a whole knowledge base: the link step over the documents'
    summaries, then each document against the view it gives, then skills and edges."""
    linked = link_documents(kb.documents)
    out: list[Diagnostic] = kb.parse_diagnostics() + linked.diagnostics
    names = skill_names(kb.skills)
    for doc in kb.documents:
        out.extend(check_document(doc, linked.view, names, kb.root, kb.files))
    wide, edges = check_kb_wide(kb, linked.view, strict_spec)
    out.extend(wide)
    return validation_of(kb.documents, linked, ordered(out), edges)


def check_kb_wide(kb: KnowledgeBase, view: View, strict_spec: bool = False
                  ) -> tuple[list[Diagnostic], list[ExtraEdge]]:
    """The rules over what a knowledge base holds besides its documents (skills, their
    folders, extra-edge files), against the view; and the valid extra edges."""
    out = check_skills(kb.skills, view, strict_spec, kb.skills_dir, kb.root, kb.files)
    # (the view answers for each end, not by listing every entity id: at 10,000
    # documents that is a pass over every declaration)
    nodes = ChainMap(view.types, dict.fromkeys(skill_nodes(kb.skills)),
                     dict.fromkeys(skill_states(kb.skills)))  # (the graph adds those named)
    edges = check_extra_edges(kb.edge_files, nodes, out, skill_node_names(kb.skills))
    return out, edges
