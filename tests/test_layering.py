"""Which packages may import which, checked on the source (imports inside functions too).

skills/ builds on document/ (a skill is a document with more frontmatter), ctxfst.kb
on both; artifacts/ (reading and writing build files) knows no stage.
"""

from __future__ import annotations

import ast

import pytest

from .conftest import REPO

PACKAGE = REPO / "tools" / "ctxfst"


def imports(source: str, package: list[str]) -> set[str]:
    """Every module a source imports, as absolute names, wherever the import statement
    is; `from x import y` counts as importing x and x.y (y may be a module)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return found


def imports_of(folder: str) -> dict[str, set[str]]:
    """For each module of a package under tools/ctxfst/, what it imports."""
    files = sorted((PACKAGE / folder).rglob("*.py"))
    assert files, folder
    return {str(path.relative_to(REPO)): imports(
        path.read_text(encoding="utf-8"),
        list(path.relative_to(PACKAGE.parent).parts[:-1])) for path in files}


def offending(folder: str, banned: tuple[str, ...]) -> dict[str, list[str]]:
    return {path: sorted(name for name in names
                         if any(name == b or name.startswith(b + ".") for b in banned))
            for path, names in imports_of(folder).items()
            if any(name == b or name.startswith(b + ".") for b in banned for name in names)}


def test_the_checker_sees_relative_and_function_level_imports():
    source = ("from .model import Entity\n"
              "def late():\n"
              "    from ..skills import parse\n"
              "    import ctxfst.skills.model\n"
              "    from .. import kb\n")
    found = imports(source, ["ctxfst", "document"])
    assert {"ctxfst.document.model", "ctxfst.skills", "ctxfst.skills.parse",
            "ctxfst.skills.model", "ctxfst.kb"} <= found


@pytest.mark.parametrize("folder, banned", [
    # document/ knows no skills, nor the knowledge-base layer above both.
    ("document", ("ctxfst.skills", "ctxfst.kb", "ctxfst.validation")),
    ("skills", ("ctxfst.kb", "ctxfst.validation")),
    ("artifacts", ("ctxfst.pipeline", "ctxfst.document", "ctxfst.skills", "ctxfst.compile",
                   "ctxfst.facts", "ctxfst.retrieval", "ctxfst.runtime")),
])
def test_layers_import_only_below_them(folder, banned):
    assert offending(folder, banned) == {}

