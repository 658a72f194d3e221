"""ctxfst from Python: build a project, validate files, and ask its published build.

    import ctxfst

    ctxfst.build("my-kb")                      # doit's build, in this process
    kb = ctxfst.open("my-kb")                  # the project's published build
    kb.query("edge frameworks", mode="hybrid")
    kb.ask("default", "exists", namespace="doc", key="topic", value="backend")

Answers are the JSON documents the command line prints with `--format json` (the schemas
in schemas/), as plain dicts. Every failure is a ctxfst.Error whose message says what to
do, as the command line's would.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .config import Config
    from .validation import Report
    from .workspace import Workspace

PathLike = str | os.PathLike[str]


class Error(Exception):
    """Anything ctxfst could not do: no project, a build that is missing, damaged or
    older than its sources, bad arguments. The message says why and what to do."""


def build(root: PathLike = ".", *, quiet: bool = True) -> None:
    """Build the project at root (incrementally, as `doit` does) and publish it to its
    build folder. Error when the knowledge base has errors (they are printed, located)
    or the build cannot run."""
    from .config import ConfigError
    from .pipeline.runner import run_build

    try:
        code = run_build(Path(root), [], quiet=quiet)
    except ConfigError as error:
        raise Error(error.render()) from None
    if code != 0:
        raise Error(f"{root}: the build stopped (exit {code}); its output says why")


def validate(paths: list[PathLike] | None = None, *, cwd: PathLike | None = None,
             lint: bool = False) -> Report:
    """Check files or folders (none: the project at cwd) as `ctxfst validate` does; with
    lint, as `ctxfst lint` does. The report's diagnostics are located (path, line,
    column, code); report.exit_code() is the command's exit code."""
    from .config import ConfigError
    from .rule_selection import RuleSettingError
    from .validation import UsageError, check_paths

    try:
        return check_paths([Path(path) for path in paths or ()],
                           Path(cwd) if cwd is not None else None, lint)
    except ConfigError as error:
        raise Error(error.render()) from None
    except (UsageError, RuleSettingError) as error:
        raise Error(str(error)) from None


def open(root: PathLike = ".", *, build_dir: PathLike | None = None,
         allow_stale: bool = False) -> Project:
    """The project at or above root, and its published build (or the build folder
    build_dir). Questions are refused while the build is older than the sources, unless
    allow_stale."""
    return Project(root, build_dir=build_dir, allow_stale=allow_stale)


class Project:
    """A project's published build, opened once for many questions: the index, the
    embedding model and the facts are loaded on first use and kept."""

    def __init__(self, root: PathLike = ".", *, build_dir: PathLike | None = None,
                 allow_stale: bool = False) -> None:
        from .config import ConfigError
        from .retrieval.search import RetrievalError
        from .workspace import Workspace

        try:
            self.workspace: Workspace = Workspace.open(
                Path(root).resolve(), Path(build_dir).resolve() if build_dir else None)
        except ConfigError as error:
            raise Error(error.render()) from None
        except RetrievalError as error:
            raise Error(str(error)) from None
        self.allow_stale = allow_stale
        self._facts: Any = None

    @property
    def config(self) -> Config | None:
        """The project's settings (None for a build folder outside any project)."""
        return self.workspace.config

    @property
    def build_dir(self) -> Path:
        return self.workspace.build_dir

    def stale_reason(self) -> str | None:
        """Why the build does not reflect the sources, or None when it does."""
        return self.workspace.stale_reason()

    def _check_fresh(self) -> None:
        reason = None if self.allow_stale else self.stale_reason()
        if reason:
            raise Error(f"{reason} (or open with allow_stale=True)")

    def query(self, text: str, *, mode: str = "graph", top_k: int = 5, hops: int = 2,
              bridge_model: str = "use-multilingual") -> dict[str, Any]:
        """The chunks that answer text, best first, as `ctxfst query --format json`
        prints them (mode: vector, lexical, graph, hybrid or keyword-graph)."""
        from .artifacts.reader import ArtifactError
        from .retrieval import MODES
        from .retrieval.search import RetrievalError
        from .workspace import QueryRequest

        if mode not in MODES:
            raise Error(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
        for name, value in (("top_k", top_k), ("hops", hops)):
            if type(value) is not int or value < (1 if name == "top_k" else 0):
                raise Error(f"{name} must be a whole number of at least "
                            f"{1 if name == 'top_k' else 0}, not {value!r}")
        self._check_fresh()
        try:
            graph = self.workspace.skill_graph(None) if mode == "keyword-graph" else None
            result, _ = self.workspace.query(
                QueryRequest(text, mode, top_k, hops, bridge_model), graph)
        except (RetrievalError, ArtifactError) as error:
            raise Error(str(error)) from None
        return result.as_json()

    def ask(self, tenant: str, op: str, *, entity_type: str | None = None,
            namespace: str | None = None, key: str | None = None, value: str | None = None,
            min_confidence: float = 0.0, limit: int = 20) -> dict[str, Any]:
        """A facts question (op: exists, count, list or value), answered as
        `ctxfst facts ask --format json` answers it: "no" only where the facts are
        complete, "unknown" where they are not."""
        from .config import BuildSettings
        from .facts.extractors import reader_version
        from .facts.query import FactsError, Store, ask, check_tenant

        try:
            check_tenant(tenant)  # before any file is read: fail closed
            if self._facts is None:
                config = self.config if self.workspace.is_project_build and \
                    not self.allow_stale else None
                self._facts = Store.load(self.build_dir, config)
            settings = self.config.build if self.config else BuildSettings()
            version = reader_version(settings.facts_extractors, self._facts.extract_version)
            return ask(self._facts, settings, tenant, op, entity_type, namespace, key, value,
                       min_confidence, limit, version)
        except FactsError as error:
            raise Error(str(error)) from None
