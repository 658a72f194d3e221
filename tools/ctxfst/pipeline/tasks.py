"""doit tasks for a ctxfst project: one task per build stage, each with many file
dependencies (doit's cost grows with the number of tasks, not of files).

dodo.py re-exports everything here. Importing this module must stay cheap: a no-op
`doit` only stats files; nothing is parsed and no model is imported.
"""

from __future__ import annotations

import atexit
import importlib
import os
import shutil
import stat
import sys
import time
from pathlib import Path

from doit.exceptions import TaskFailed
from doit.reporter import ConsoleReporter
from doit.tools import config_changed

from ..artifacts.layout import JOURNAL, RESULTS, result_path, staged, staging
from ..collector import collector_paused, return_free_memory
from ..config import ConfigError, find_project
from ..diagnostics import escape
from ..parallel import WorkerDied
from . import stages
from .doit_state import IdentityChecker, racy_state, settled_state, states_match
from .errors import BuildFailed
from .run import BuildRun
from .stages import describe, run_stage
from .table import (
    BY_NAME,
    PUBLISHED_FILES,
    RUN_ORDER,
    STAGE_TABLE,
    published_files_for,
    waiters,
    waits_for,
)


class StageStopped(TaskFailed):
    """A stage that found its inputs unusable: said once, as the build's last line."""


class BuildReporter(ConsoleReporter):
    """doit's console output with a build's own ending: a summary line, or on a failure
    the reason as the last line (after the diagnostics), not doit's "Python Task failed:
    <function ...> returned False"."""

    build_run: BuildRun | None = None  # bound by namespace(): the build doit runs

    @property
    def quiet(self) -> bool:
        return self.build_run is not None and self.build_run.quiet

    def initialize(self, tasks, selected_tasks):
        super().initialize(tasks, selected_tasks)
        if self.build_run is not None:
            # Before any task, in doit's own process: the worker processes of doit's
            # `-n` runner inherit it (each taking it for itself, they waited for one
            # another for ever).
            hold_build_lock(self.build_run)
            self.build_run.begin()
            self.build_run.beside.plan(tasks, selected_tasks)
        self.started = time.perf_counter()
        self.ran: list[str] = []
        self.fresh: list[str] = []

    def execute_task(self, task):
        if not self.quiet:
            super().execute_task(task)
        self.ran.append(task.name)

    def skip_uptodate(self, task):
        if not self.quiet:
            super().skip_uptodate(task)
        self.fresh.append(task.name)

    def _write_failure(self, result, write_exception=True):
        if not isinstance(result["exception"], StageStopped):
            super()._write_failure(result, write_exception)

    def complete_run(self):
        if self.build_run is not None:
            # (children are left only when the build stopped before a stage waited)
            self.build_run.beside.abandon_all()
            self.build_run.end()
        super().complete_run()
        stopped = [r for r in self.failures if isinstance(r["exception"], StageStopped)]
        if stopped:
            self.write(f"build stopped: {stopped[0]['exception'].message}\n")
        elif not self.failures and not self.runtime_errors and (self.ran or self.fresh) \
                and not self.quiet:
            published = "published to build/" if "manifest" in self.ran else "build/ up to date"
            self.write(f"build: {len(self.ran)} of {len(self.ran) + len(self.fresh)} stages "
                       f"ran, {published}, {time.perf_counter() - self.started:.2f} s\n")


DOIT_CONFIG = {
    "default_tasks": list(RUN_ORDER),
    "dep_file": ".ctxfst/doit.db",  # (namespace() makes it absolute, from the Config)
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
    config.tool_dir.mkdir(exist_ok=True)
    # A kill may have left a publication half done: finish it (under the build lock) before
    # doit looks at the targets. Otherwise importing dodo.py takes no lock, so `doit list`
    # never waits; a run takes it before its first task (BuildReporter.initialize).
    if os.path.lexists(config.build_dir / JOURNAL):
        from .publish import recover

        with build_lock(config):
            recover(config)
    return config


def check_build_folder(config) -> None:
    """Staged artifacts are written into build/.staging/ and its stages/ folder, which
    ctxfst makes: a link there (from a stranger's checkout) could lead anywhere."""
    for path in (staging(config), staging(config) / RESULTS):
        if path.is_symlink():
            raise ConfigError(f"{path.relative_to(config.root)} is a link to {path.resolve()}; "
                              "ctxfst makes this folder itself: remove the link", path,
                              code="CTX804")


def hold_build_lock(run: BuildRun) -> None:
    """Take the build lock until this process ends (the kernel releases it then, even on
    a kill); nothing when this process (or its parent build) holds it already."""
    from ..locks import is_held

    if is_held(build_lock_path(run.config)):
        return
    lock = build_lock(run.config)
    lock.__enter__()
    if not run.held_locks:
        atexit.register(_release_held, run.held_locks)
    run.held_locks.append(lock)


def _release_held(locks: list) -> None:
    """Let go of the held locks while the interpreter is whole (their generators, frozen
    by gc.freeze(), would otherwise be finalized after module teardown)."""
    while locks:
        locks.pop().__exit__(None, None, None)


def build_lock(config):
    """One build of a project at a time: a second one waits (they share the staging
    folder, the publication journal and the facts ledger)."""
    from ..locks import exclusive

    def waiting(holder: str) -> None:
        print(f"ctxfst: another build of this project is running ({escape(holder)}); "
              "waiting for it", file=sys.stderr, flush=True)

    return exclusive(build_lock_path(config), None, str, waiting, reentrant=True)


def build_lock_path(config) -> Path:
    return config.build_lock


def namespace(CONFIG, quiet: bool = False) -> dict:
    """doit's view of a project: DOIT_CONFIG and one task_* function per stage of the
    stage table (ctxfst/pipeline/table.py), all sharing one BuildRun. quiet: findings
    and failures only."""
    run = BuildRun(CONFIG, quiet)
    # doit's state by absolute path: the same file whichever folder doit was started in
    wanted = [stage for stage in STAGE_TABLE if stage.enabled(CONFIG)]
    reporter = type("BuildReporter", (BuildReporter,), {"build_run": run})
    tasks: dict = {"DOIT_CONFIG": {**DOIT_CONFIG, "dep_file": str(CONFIG.doit_state),
                                   "reporter": reporter,
                                   "default_tasks": [name for name in RUN_ORDER if any(
                                       stage.name == name for stage in wanted)]}}
    for stage in wanted:
        tasks[f"task_{stage.name}"] = _task_maker(run, stage)
    from .doit_state import drop_damaged_state

    drop_damaged_state(CONFIG.doit_state, DOIT_CONFIG["default_tasks"])
    return tasks


def _task_maker(run: BuildRun, stage):
    """The task_* function doit calls (only when the task is needed) for one stage."""
    config = run.config

    def make_task() -> dict:
        from ..version import __version__

        file_dep = [str(staged(config, name)) for name in stage.reads_for(config)]
        # Re-run when the settings this stage reads change, or the toolchain does.
        fingerprint = {"toolchain": __version__,
                       "settings": config.build.digest(*stage.settings) if stage.settings
                       else ""}
        uptodate = [config_changed(fingerprint)]
        if stage.sources:
            files, state = getattr(stages, stage.sources)(run)
            file_dep = files + file_dep
            uptodate.append(_sources_unchanged(run, stage, state))
        if waits_for(stage):  # first, before doit looks at the files they write
            uptodate.insert(0, _joined(run, waits_for(stage)))
        targets = [str(staged(config, name)) for name in stage.outputs_for(config)]
        targets.append(str(result_path(config, stage.name)))
        targets += [str(config.build_dir / name) for name in stage.writes]
        task = {"doc": stage.doc, "actions": [_action(run, stage)],
                "file_dep": file_dep, "task_dep": list(stage.after), "targets": targets,
                "uptodate": uptodate, "clean": True, "verbosity": 2}
        if stage.final:
            published = published_files_for(config)
            task["targets"] += [str(config.build_dir / name) for name in published]
            task["clean"] = [lambda: _clean_all(config)]
            uptodate.append(_published_whole(config, published))
        if stage.writes:
            uptodate.append(_published_plainly(
                [str(config.build_dir / name) for name in stage.writes]))
        return task

    make_task.__name__ = f"task_{stage.name}"
    make_task.__doc__ = stage.doc
    return make_task


def _published_plainly(paths: list[str]):
    """doit's up-to-date check of files a stage writes into build/ itself (the report):
    each must be a regular file, or the stage runs again and writes it anew. doit alone
    would take a link, or a folder, for the file."""
    def uptodate():
        for path in paths:
            try:
                if not stat.S_ISREG(os.lstat(path).st_mode):
                    return False
            except OSError:
                return False
        return None  # (doit decides from the rest)

    return uptodate


def _published_whole(config, names: tuple[str, ...]):
    """doit's up-to-date check of the published build: build/current is ctxfst's link to
    a folder holding each name as a regular file, and each fixed name in build/ is the
    link through it that publishing makes; else the last stage runs again and publishes
    anew. doit alone would take a stranger's link for the file."""
    from ..artifacts.layout import fixed_name_target
    from ..artifacts.reader import published_folder

    def uptodate():
        try:
            folder = published_folder(config.build_dir)
            if folder == config.build_dir:
                return False  # nothing published, or not as ctxfst publishes
            for name in names:
                if not stat.S_ISREG(os.lstat(folder / name).st_mode) \
                        or os.readlink(config.build_dir / name) != fixed_name_target(name):
                    return False
        except (OSError, ValueError):
            return False
        return None  # (doit decides from the rest)

    return uptodate


def _sources_unchanged(run: BuildRun, stage, state: str):
    """doit's up-to-date check of a stage's sources state (Stage.sources, states_match).
    When the state marked files changed a moment before doit looked, it is made again
    once the stage has run (by then they have usually settled: settled_state)."""
    def saved() -> dict:
        if not racy_state(state):
            return {"sources": state}
        return {"sources": settled_state(state, getattr(stages, stage.sources)(run)[1])}

    def uptodate(task, values) -> bool:
        task.value_savers.append(saved)
        return states_match(values.get("sources"), state)

    return uptodate


def _progress(run: BuildRun, text: str) -> None:
    if not run.quiet:
        print(f"   {escape(text)}", flush=True)


def _joined(run: BuildRun, names: tuple[str, ...]):
    """doit's up-to-date check of a stage that reads what beside stages write: wait for
    them first (and say what they did); a failed one makes this stage run, to stop."""
    def uptodate():
        failed = False
        for name in names:
            if run.beside.running(name):
                failure = run.beside.join(name)
                if failure is None:
                    _progress(run, describe(run.config, BY_NAME[name]))
                failed |= failure is not None
        return False if failed else None  # (None: doit decides from the rest)

    return uptodate


# What stops a stage with its message and no traceback: its inputs unusable, a worker
# lost, or the system refusing a read or write (a full disk, a file gone meanwhile).
STOPPING = (BuildFailed, WorkerDied, OSError)


def _action(run: BuildRun, stage):
    config = run.config

    def work() -> None:
        with collector_paused():  # stages hold the KB's many acyclic objects
            run_stage(run, stage)
        return_free_memory()  # (for the stages after it, and a process forked for one)

    def action():
        hold_build_lock(run)  # (taken already, unless doit runs with another reporter)
        for name in waits_for(stage):
            failure = run.beside.join(name)
            if failure is not None and failure.stopped:
                return StageStopped(f"{name}: {escape(failure.message)}, build/ unchanged")
            if failure is not None:
                return TaskFailed(f"{name} failed:\n{failure.message}")
        for module in stage.imports:
            importlib.import_module(module)
        if stage.imports and config.engine == "local":  # (Ray's converts pandas objects)
            from ..artifacts.arrays import skip_pandas_probe

            skip_pandas_probe()
        if stage.beside and run.beside.may_fork(waiters(stage)):
            try:
                with collector_paused():
                    stages.before_beside(run, stage)
            except STOPPING as error:
                return StageStopped(f"{stage.name}: {escape(error)}, build/ unchanged")
            # Until it has finished, its result file (a target) is missing: a build that
            # stops before then runs it again next time.
            result_path(config, stage.name).unlink(missing_ok=True)
            run.beside.start(stage.name, work, STOPPING)
            _progress(run, f"{stage.name}: running beside the stages below")
            return True
        try:
            work()
        except STOPPING as error:
            unchanged = "" if stage.final or stage.writes else ", build/ unchanged"
            return StageStopped(f"{stage.name}: {escape(error)}{unchanged}")  # KB paths
        _progress(run, describe(config, stage))
        return True

    action.__name__ = f"ctxfst_{stage.name}"
    return action


def _clean_all(config) -> None:
    """doit clean: remove every artifact the build made (not the caches or the facts
    ledger), and the staging folder."""
    from .publish import remove_published

    (config.build_dir / JOURNAL).unlink(missing_ok=True)  # first: it names staged files
    remove_published(config.build_dir)
    for name in PUBLISHED_FILES + tuple(name for stage in STAGE_TABLE for name in stage.writes):
        (config.build_dir / name).unlink(missing_ok=True)  # (a build of an older ctxfst)
    shutil.rmtree(staging(config), ignore_errors=True)


def dodo_namespace() -> dict:
    """For dodo.py: `globals().update(dodo_namespace())`."""
    return namespace(project_here())
