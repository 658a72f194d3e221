"""Which packages may import which, checked on the source (imports inside functions too).

skills/ builds on document/ (a skill is a document with more frontmatter), ctxfst.kb
on both; artifacts/ (reading and writing build files) knows no stage.
"""

from __future__ import annotations

import ast
from pathlib import Path

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


def module_name(path: Path) -> str:
    """ctxfst.pipeline.stages for tools/ctxfst/pipeline/stages.py (a package's
    __init__.py is the package)."""
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def module_graph() -> dict[str, set[str]]:
    """Each module of the package -> the package's modules it imports (anywhere in it:
    an import inside a function is an edge too; `from x import y` is an edge to x, and
    to x.y when that is a module)."""
    paths = sorted(PACKAGE.rglob("*.py"))
    modules = {module_name(path): path for path in paths}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        found = imports(path.read_text(encoding="utf-8"), package)
        graph[name] = {other for other in found if other in modules and other != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The graph's import cycles: its strongly connected components of more than one
    module (Tarjan's algorithm, iterative), each sorted, largest first."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            advanced = False
            for other in edges:
                if other not in index:
                    index[other] = low[other] = counter
                    counter += 1
                    stack.append(other)
                    on_stack.add(other)
                    work.append((other, iter(sorted(graph.get(other, ())))))
                    advanced = True
                    break
                if other in on_stack:
                    low[node] = min(low[node], index[other])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found, key=lambda c: (-len(c), c))


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


# The ground floor: what everything else stands on. It imports nothing above it.
GROUND = ("ctxfst.version", "ctxfst.diagnostics", "ctxfst.files", "ctxfst.parallel",
          "ctxfst.collector", "ctxfst.rule_selection", "ctxfst.remote", "ctxfst.locks",
          "ctxfst.artifacts")


def on_the_ground_floor(module: str) -> bool:
    return any(module == floor or module.startswith(floor + ".") for floor in GROUND)


def test_the_ground_floor_imports_only_the_ground_floor():
    graph = module_graph()
    assert {module: sorted(other for other in imported if not on_the_ground_floor(other))
            for module, imported in graph.items() if on_the_ground_floor(module)
            and not all(on_the_ground_floor(other) for other in imported)} == {}


def test_the_cycle_finder_finds_cycles_and_only_cycles():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a", "e"}, "e": set(),
             "f": {"g"}, "g": {"f"}}
    assert cycles(graph) == [["a", "b", "c"], ["f", "g"]]


def test_no_module_of_the_package_is_in_an_import_cycle():
    """Imports inside functions count: a lazy import back up is still a loop."""
    assert cycles(module_graph()) == []


def test_every_stage_of_the_table_names_functions_of_the_stages_module():
    from ctxfst.pipeline import stages
    from ctxfst.pipeline.table import STAGE_TABLE

    for stage in STAGE_TABLE:
        assert callable(getattr(stages, stage.run, None)), stage.name
        assert not stage.sources or callable(getattr(stages, stage.sources, None)), stage.name


MUTATORS = {"append", "extend", "insert", "pop", "popitem", "remove", "clear", "update",
            "setdefault", "add", "discard", "sort", "reverse", "__setitem__", "__delitem__"}


def module_state(path: Path) -> list[str]:
    """A module's global mutable state: module-level names bound to a list, dict, set or
    counter that anything in the module changes (or that are not constants by name)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    mutable = {}
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, ast.AnnAssign) and node.value else []
        value = getattr(node, "value", None)
        is_container = isinstance(value, (ast.List, ast.Dict, ast.Set, ast.ListComp,
                                          ast.DictComp, ast.SetComp)) or (
            isinstance(value, ast.Call) and getattr(value.func, "attr",
                                                    getattr(value.func, "id", "")) in
            {"list", "dict", "set", "count", "defaultdict", "OrderedDict", "Counter"})
        for target in targets:
            if isinstance(target, ast.Name) and is_container:
                mutable[target.id] = target.id.isupper()
    changed = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and isinstance(node.func.value, ast.Name) and node.func.attr in MUTATORS:
            changed.add(node.func.value.id)
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.Delete)):
            for target in getattr(node, "targets", None) or [node.target]:
                if isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name):
                    changed.add(target.value.id)
        elif isinstance(node, ast.Global):
            changed.update(node.names)
    return sorted(name for name, constant in mutable.items()
                  if (name in changed or not constant) and not name.startswith("__"))


def test_the_state_finder_finds_module_state():
    path = PACKAGE.parent.parent / "tests" / "fixtures" / "module_state.py"
    assert module_state(path) == ["QUIET", "_cache", "_runs"]


@pytest.mark.parametrize("path", sorted((PACKAGE / "pipeline").glob("*.py")),
                         ids=lambda path: path.name)
def test_the_pipeline_keeps_no_build_state_in_module_globals(path):
    """A build's state lives in its BuildRun (pipeline/run.py), made once per build."""
    assert module_state(path) == []


# The package's module state outside pipeline/: what one process shares whatever it
# builds or answers. Nothing else: a cache of a project belongs to whoever holds the
# project (a BuildRun, a Workspace's WalkMemory).
PROCESS_STATE = {
    "artifacts/cache.py": ["_expected_objects"],  # each schema's parsed objects
    # files this process wrote, by identity; the removers it started (until they end)
    "artifacts/io.py": ["_digests", "_removers", "_written"],
    "compile/embed.py": ["_EMBEDDERS"],  # models loaded once a process
    "document/yamlpos.py": ["_plain_cache"],  # a pure function's answers
    "locks.py": ["_HELD"],  # the locks this process holds
}


def test_only_process_wide_caches_are_module_state():
    found = {path.relative_to(PACKAGE).as_posix(): module_state(path)
             for path in sorted(PACKAGE.rglob("*.py"))}
    assert {path: names for path, names in found.items() if names} == PROCESS_STATE
