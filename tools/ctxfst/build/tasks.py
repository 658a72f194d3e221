"""doit tasks for a ctxfst project: one task per build stage, each with many file
dependencies (doit's cost grows with the number of tasks, not of files).

dodo.py re-exports everything here. Importing this module must stay cheap: a no-op
`doit` only stats files; nothing is parsed and no model is imported.
"""

from __future__ import annotations

import atexit
import shutil
import sys
import time
from pathlib import Path

from doit.exceptions import TaskFailed
from doit.reporter import ConsoleReporter
from doit.tools import config_changed

from ..collector import collector_paused
from ..config import ConfigError, find_project
from ..diagnostics import escape
from ..files import project_files, scan_project
from .doit_state import IdentityChecker

class StageStopped(TaskFailed):
    """A stage that found its inputs unusable: said once, as the build's last line."""


class BuildReporter(ConsoleReporter):
    """doit's console output with a build's own ending: a summary line, or on a failure
    the reason as the last line (after the diagnostics), not doit's "Python Task failed:
    <function ...> returned False"."""

    def initialize(self, tasks, selected_tasks):
        super().initialize(tasks, selected_tasks)
        self.started = time.perf_counter()
        self.ran: list[str] = []
        self.fresh: list[str] = []

    def execute_task(self, task):
        super().execute_task(task)
        self.ran.append(task.name)

    def skip_uptodate(self, task):
        super().skip_uptodate(task)
        self.fresh.append(task.name)

    def _write_failure(self, result, write_exception=True):
        if not isinstance(result["exception"], StageStopped):
            super()._write_failure(result, write_exception)

    def complete_run(self):
        super().complete_run()
        stopped = [r for r in self.failures if isinstance(r["exception"], StageStopped)]
        if stopped:
            self.write(f"build stopped: {stopped[0]['exception'].message}\n")
        elif not self.failures and not self.runtime_errors and (self.ran or self.fresh):
            published = "published to build/" if "manifest" in self.ran else "build/ up to date"
            self.write(f"build: {len(self.ran)} of {len(self.ran) + len(self.fresh)} stages "
                       f"ran, {published}, {time.perf_counter() - self.started:.2f} s\n")


DOIT_CONFIG = {
    "default_tasks": ["validate", "compile", "skills", "profiles", "embed", "graph", "facts",
                      "manifest"],
    "dep_file": ".ctxfst/doit.db",
    "check_file_uptodate": IdentityChecker,
    "reporter": BuildReporter,
    "backend": "sqlite3",
    "verbosity": 2,
}


def project_here():
    """The project in the working directory, ready to build (or exit 2 with a message,
    before anything is written or deleted)."""
    try:
        config = find_project(Path.cwd())
        if config is not None:
            check_build_folder(config)
    except ConfigError as error:
        print(escape(error.render()), file=sys.stderr)
        sys.exit(2)
    if config is None:
        print("ctxfst: error: no ctxfst project here (no ctxfst.toml or [tool.ctxfst] in "
              "pyproject.toml)", file=sys.stderr)
        sys.exit(2)
    (config.root / ".ctxfst").mkdir(exist_ok=True)
    from .pipeline import JOURNAL, recover

    # A kill may have left a publication half done: finish it (under the build lock) before
    # doit looks at the targets. Otherwise importing dodo.py takes no lock, so `doit list`
    # never waits; the first stage that runs takes it (hold_build_lock).
    if (config.build_dir / JOURNAL).exists():
        with build_lock(config):
            recover(config)
    return config


def check_build_folder(config) -> None:
    """Staged artifacts are written into build/.staging/ and its stages/ folder, which
    ctxfst makes: a link there (from a stranger's checkout) could lead anywhere."""
    from .pipeline import RESULTS, staging

    for path in (staging(config), staging(config) / RESULTS):
        if path.is_symlink():
            raise ConfigError(f"{path.relative_to(config.root)} is a link to {path.resolve()}; "
                              "ctxfst makes this folder itself: remove the link", path,
                              code="CTX804")


_HELD: list = []


def hold_build_lock(config) -> None:
    """Take the build lock until this process ends (the kernel releases it then, even on
    a kill); nothing when this process (or its parent build) holds it already."""
    from ..locks import is_held

    if is_held(build_lock_path(config)):
        return
    lock = build_lock(config)
    lock.__enter__()
    if not _HELD:
        atexit.register(_release_held)
    _HELD.append(lock)


def _release_held() -> None:
    """Let go of the held locks while the interpreter is whole (their generators, frozen
    by gc.freeze(), would otherwise be finalized after module teardown)."""
    while _HELD:
        _HELD.pop().__exit__(None, None, None)


def build_lock(config):
    """One build of a project at a time: a second one waits (they share the staging
    folder, the publication journal and the facts ledger)."""
    from ..locks import exclusive

    def waiting(holder: str) -> None:
        print(f"ctxfst: another build of this project is running ({escape(holder)}); "
              "waiting for it", file=sys.stderr, flush=True)

    return exclusive(build_lock_path(config), None, str, waiting, reentrant=True)


def build_lock_path(config) -> Path:
    return config.root / ".ctxfst" / "build.lock"


def namespace(CONFIG) -> dict:
    """doit's view of a project: DOIT_CONFIG and one task_* function per stage."""

    def _paths(*names: str) -> list[str]:
        from .pipeline import staged

        return [str(staged(CONFIG, name)) for name in names]


    def _run(stage: str):
        def action():
            from .pipeline import STAGE_FUNCTIONS, BuildFailed, describe

            hold_build_lock(CONFIG)
            try:
                with collector_paused():  # stages hold the KB's many acyclic objects
                    STAGE_FUNCTIONS[stage](CONFIG)
            except BuildFailed as error:
                unchanged = "" if stage == "manifest" else ", build/ unchanged"
                return StageStopped(f"{stage}: {escape(error)}{unchanged}")  # KB paths
            print(f"   {escape(describe(CONFIG, stage))}", flush=True)
            return True

        action.__name__ = f"ctxfst_{stage}"
        return action


    def _task(stage: str, doc: str, file_dep: list[str], outputs: list[str],
              state: str = "") -> dict:
        from .. import __version__
        from .pipeline import STAGE_SETTINGS, result_path

        keys = STAGE_SETTINGS[stage]
        # Re-run when the settings this stage reads change, or the toolchain does.
        fingerprint = {"toolchain": __version__,
                       "settings": CONFIG.build.digest(*keys) if keys else "", "state": state}
        return {
            "doc": doc,
            "actions": [_run(stage)],
            "file_dep": file_dep,
            "targets": outputs + [str(result_path(CONFIG, stage))],
            "uptodate": [config_changed(fingerprint)],
            "clean": True,
            "verbosity": 2,
        }


    def task_validate():
        """Validate content/ and skills/ (stops the build on errors, build/ untouched)."""
        scan = scan_project(CONFIG)
        sources = [str(path) for path in scan.files]
        if CONFIG.config_file is not None:
            sources.append(str(CONFIG.config_file))
        # A deleted input changes the list itself; file_dep alone would not notice. What
        # the walk refused is in it too, so that the stage runs and reports it.
        refused = [f"{d.code} {d.path}" for d in scan.problems]
        passages = sorted(_passage_files() - set(sources))
        # (doit re-runs a task whose file_dep list changed: a passage gone is seen)
        return _task("validate", task_validate.__doc__, sources + passages,
                     _paths("validation.json"), state="\n".join(sources + refused))

    def _passage_files() -> set[str]:
        """content_path files the last build read that the walk does not list (outside
        content/, or not Markdown)."""
        from ..files import inside, plain_relative
        from .cache import recorded_passages

        found = set()
        for relative in recorded_passages(CONFIG.unit_store):
            path = CONFIG.root / relative
            if plain_relative(relative) and inside(CONFIG.root, path) and path.is_file():
                found.add(str(path))
        return found


    def task_compile():
        """Compile chunks and the entity catalog: chunks.json, chunks.parquet."""
        return _task("compile", task_compile.__doc__, _paths("validation.json"),
                     _paths("chunks.json", "chunks.parquet", "catalog.json", "extra-edges.json"))


    def task_skills():
        """Compile skills/*/SKILL.md into the skill index: skill-index.json, skills.parquet."""
        skill_files = [str(p) for p in project_files(CONFIG)
                       if p.name == "SKILL.md"]
        return _task("skills", task_skills.__doc__, skill_files + _paths("validation.json"),
                     _paths("skill-index.json", "skills.parquet"))

    def task_profiles():
        """Build entity profiles: entity-profiles.json, entities.parquet."""
        return _task("profiles", task_profiles.__doc__, _paths("chunks.parquet", "catalog.json"),
                     _paths("entity-profiles.json", "entities.parquet"))


    def task_embed():
        """Embed chunks and entity profiles (cached by model and text)."""
        return _task("embed", task_embed.__doc__,
                     _paths("chunks.parquet", "entity-profiles.json"),
                     _paths("chunk_vectors.parquet", "entity_vectors.parquet"))


    def task_graph():
        """Build the entity graph: SIMILAR, REQUIRES/LEADS_TO and extra edges."""
        return _task("graph", task_graph.__doc__,
                     _paths("entity-profiles.json", "entity_vectors.parquet", "extra-edges.json",
                            "skill-index.json"),
                     _paths("entity-graph.json", "edges.parquet"))


    def task_facts():
        """Extract semantic facts with evidence; invalidate what sources stopped saying."""
        from .pipeline import ARTIFACTS

        names = [name for name, (stage, _) in ARTIFACTS.items() if stage == "facts"]
        state = ""
        if CONFIG.build.facts_extractors:  # a plugin's new version re-runs the stage
            from ..facts.extractors import ExtractionError, extract_version, load_extractors

            try:
                state = extract_version(load_extractors(CONFIG.build.facts_extractors))
            except ExtractionError as error:
                state = str(error)  # the stage itself reports it
        # validation.json changes exactly when a source does; the ledger is read, not tracked.
        return _task("facts", task_facts.__doc__, _paths("validation.json"), _paths(*names),
                     state=state)


    def _remove_staging() -> None:
        from .pipeline import JOURNAL, staging

        (CONFIG.build_dir / JOURNAL).unlink(missing_ok=True)  # first: it names staged files
        shutil.rmtree(staging(CONFIG), ignore_errors=True)


    def task_manifest():
        """Write manifest.json and run_results.json, then publish the artifacts to build/."""
        from .pipeline import ARTIFACTS, STAGES, result_path

        names = [*ARTIFACTS, "validation.json"]
        task = _task("manifest", task_manifest.__doc__,
                     _paths(*names) + [str(result_path(CONFIG, s)) for s in STAGES[:-1]],
                     [str(CONFIG.build_dir / name) for name in
                      (*ARTIFACTS, "manifest.json", "run_results.json")] + _paths("manifest.json"))
        task["clean"] = [_clean_all]
        return task


    def _clean_all() -> None:
        """doit clean: remove every artifact the build made (not the embedding cache)."""
        from .pipeline import ARTIFACTS

        for name in (*ARTIFACTS, "manifest.json", "run_results.json"):
            (CONFIG.build_dir / name).unlink(missing_ok=True)
        _remove_staging()

    from .doit_state import drop_damaged_state

    drop_damaged_state(CONFIG.root / DOIT_CONFIG["dep_file"], DOIT_CONFIG["default_tasks"])
    return {"DOIT_CONFIG": DOIT_CONFIG, "task_validate": task_validate,
            "task_compile": task_compile, "task_skills": task_skills,
            "task_profiles": task_profiles,
            "task_embed": task_embed, "task_graph": task_graph, "task_facts": task_facts,
            "task_manifest": task_manifest}


def dodo_namespace() -> dict:
    """For dodo.py: `globals().update(dodo_namespace())`."""
    return namespace(project_here())
