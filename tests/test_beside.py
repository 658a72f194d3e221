"""Stages that run beside the others (pipeline/beside.py): the facts stage forks when
doit reaches it and the manifest waits for it. Real doit runs, in this process."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ctxfst.pipeline import beside
from ctxfst.pipeline.table import RUN_ORDER

from .conftest import REPO
from .test_build import artifact_bytes, assert_consistent, build, example, ran
from .test_facts import install_extractor


def _with_extractor(root: Path, spec: str) -> None:
    settings = root / "ctxfst.toml"
    settings.write_text(settings.read_text() + f'[facts]\nextractors = ["{spec}"]\n')


def test_facts_run_beside_the_chunk_stages_and_give_what_they_give_in_line(tmp_path, capsys,
                                                                          runs):
    """doit takes facts right after validate; it says it started, the stages after it run
    meanwhile, and its summary comes before the manifest, which waited for it. The
    artifacts are byte for byte those of facts run in line (`doit facts` alone does)."""
    assert RUN_ORDER.index("facts") == RUN_ORDER.index("validate") + 1
    root = example(tmp_path / "beside")
    code, out = build(root, capsys)
    assert code == 0, out
    lines = out.splitlines()
    started = lines.index("   facts: running beside the stages below")
    summary = next(i for i, line in enumerate(lines) if re.fullmatch(
        r"   facts: \d+ of \d+ sources extracted, .*, \d+\.\d\d s", line))
    assert started < lines.index(".  compile") < lines.index(".  embed") < summary \
        < lines.index(".  manifest")
    assert_consistent(root)
    beside_bytes = artifact_bytes(root)

    inline = example(tmp_path / "inline")
    assert build(inline, capsys, "validate")[0] == 0
    code, out = build(inline, capsys, "facts")  # no manifest in the run: nothing waits
    assert code == 0 and "running beside" not in out, out
    assert re.search(r"   facts: \d+ of \d+ sources extracted", out), out
    code, out = build(inline, capsys)
    assert code == 0 and "facts" not in ran(out), out
    assert artifact_bytes(inline) == beside_bytes
    assert not any(run.beside.children for run in runs)


def test_a_beside_stage_that_fails_stops_the_build_before_anything_is_published(
        tmp_path, capsys, monkeypatch, runs):
    """A facts stage that stops (an extractor that cannot load) or whose process dies
    (killed, out of memory) stops the build at the manifest: the last line says why,
    build/ is unchanged, and the next build runs facts again."""
    root = example(tmp_path / "kb")
    assert build(root, capsys)[0] == 0
    before = artifact_bytes(root)
    settings = root / "ctxfst.toml"
    plain = settings.read_text()

    _with_extractor(root, "no_such_module_here:make")
    code, out = build(root, capsys)
    assert code != 0
    assert re.fullmatch(r"build stopped: facts: extractor 'no_such_module_here:make' could not "
                        r"be loaded: .*, build/ unchanged", out.rstrip().splitlines()[-1]), out
    assert artifact_bytes(root) == before

    install_extractor(tmp_path, monkeypatch, "dies_here",
                      "os.kill(os.getpid(), signal.SIGKILL)", imports="import os, signal")
    settings.write_text(plain)
    _with_extractor(root, "dies_here:make")
    (root / "content/backend-frameworks.ctxfst.md").write_text(
        (root / "content/backend-frameworks.ctxfst.md").read_text() + "\nMore.\n")
    code, out = build(root, capsys)
    assert code != 0
    assert re.fullmatch(r"build stopped: facts: its process ended without an answer "
                        r"\(signal 9: .*\); run the build again, build/ unchanged",
                        out.rstrip().splitlines()[-1]), out
    assert artifact_bytes(root) == before

    settings.write_text(plain)
    code, out = build(root, capsys)
    assert code == 0 and "facts" in ran(out), out
    assert_consistent(root)
    assert not any(run.beside.children for run in runs)


def test_a_build_that_stops_meanwhile_ends_the_beside_stage_and_runs_it_next_time(
        tmp_path, capsys, monkeypatch, runs):
    """compile failing while facts runs beside: the build stops with compile's reason,
    the facts process is ended (no process is left behind), its result file is missing,
    and the next build runs facts again, to what a build that never stopped makes."""
    from ctxfst.pipeline import chunk_rows
    from ctxfst.pipeline.errors import BuildFailed

    marker = tmp_path / "extracted"
    install_extractor(tmp_path, monkeypatch, "slow_here", f"""
        open({str(marker)!r}, "a").write("x")
        time.sleep(0.2)
        return []
    """, imports="import time")
    root = example(tmp_path / "kb")
    _with_extractor(root, "slow_here:make")
    assert build(root, capsys)[0] == 0
    result = root / "build/.staging/stages/facts.json"
    assert result.is_file()
    before = artifact_bytes(root)
    edited = root / "content/backend-frameworks.ctxfst.md"
    edited.write_text(edited.read_text() + "\nMore.\n")
    marker.unlink()
    working = chunk_rows.compile_chunks

    def broken(*args, **kwargs):
        assert _wait_for(marker)  # facts is extracting beside
        raise BuildFailed("compile broke on purpose")

    monkeypatch.setattr(chunk_rows, "compile_chunks", broken)
    children_before = _children()
    code, out = build(root, capsys)
    assert code != 0
    assert out.rstrip().splitlines()[-1] == ("build stopped: compile: compile broke on "
                                             "purpose, build/ unchanged"), out
    assert not any(run.beside.children for run in runs)
    assert _children() == children_before
    assert not result.exists()
    assert artifact_bytes(root) == before

    monkeypatch.setattr(chunk_rows, "compile_chunks", working)
    code, out = build(root, capsys)
    assert code == 0 and {"facts", "compile", "manifest"} <= ran(out), out
    assert_consistent(root)
    twin = example(tmp_path / "twin")  # the same edit, with no build stopped between
    _with_extractor(twin, "slow_here:make")
    assert build(twin, capsys)[0] == 0
    twin_edited = twin / "content/backend-frameworks.ctxfst.md"
    twin_edited.write_text(twin_edited.read_text() + "\nMore.\n")
    assert build(twin, capsys)[0] == 0
    assert artifact_bytes(root) == artifact_bytes(twin)


def _wait_for(path: Path, seconds: float = 30.0) -> bool:
    import time

    deadline = time.monotonic() + seconds
    while not path.exists():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def _children() -> set[int]:
    """This process's live child processes (Linux)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == os.getpid() and fields[0] != "Z":
                found.add(int(entry.name))
    return found


def test_no_fork_beside_other_threads_and_in_line_under_doits_process_runner(
        tmp_path, capsys):
    """A fork copies one thread of many: with another thread alive facts runs in line.
    doit's `-n` runner runs actions in its worker processes, where the manifest could
    not wait for a child: facts runs in line there too, to the same artifacts."""
    import threading

    side = beside.Beside()
    side.plan({"manifest": type("Task", (), {"task_dep": []})()}, ["manifest"])
    assert side.may_fork(("manifest",))
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        assert not side.may_fork(("manifest",))
    finally:
        stop.set()
        other.join()

    root = example(tmp_path / "kb")
    shutil.copy(REPO / "dodo.py", root / "dodo.py")
    # (the lock is taken before doit's workers start: each taking it, they waited for
    # one another for ever)
    run = subprocess.run([str(Path(sys.executable).with_name("doit")), "-n", "2"], cwd=root,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and "running beside" not in run.stdout, \
        run.stdout + run.stderr
    twin = example(tmp_path / "twin")
    assert build(twin, capsys)[0] == 0
    assert artifact_bytes(root) == artifact_bytes(twin)


def _mock_kb(root: Path, extractor: str) -> Path:
    """A first build of 250 mock documents extracts in worker processes."""
    from ctxfst.mock import generate

    generate(root, 250, seed=3)
    (root / "ctxfst.toml").write_text('content_dir = "content"\nskills_dir = "skills"\n'
                                      'embedding_model = "hash-16"\n[facts]\n'
                                      f'extractors = ["{extractor}"]\n')
    return root


def _gone(pids: set[int], seconds: float = 10.0) -> bool:
    """Whether these processes have all ended (reaped, or zombies of an ended parent)."""
    import time

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        alive = set()
        for pid in pids:
            try:
                state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if state != "Z":
                alive.add(pid)
        if not alive:
            return True
        time.sleep(0.05)
    return False


def _lock_free(root: Path) -> bool:
    from ctxfst.config import find_project
    from ctxfst.locks import LockBusy, exclusive

    try:
        with exclusive(find_project(root).build_lock, 2.0, str):
            return True
    except LockBusy:
        return False


def test_a_stopped_build_ends_the_facts_workers_too(tmp_path, capsys, monkeypatch, runs):
    """The facts process of a first build extracts in worker processes: a build that
    stops meanwhile ends them with it (they would hold the build lock for ever), and the
    next build does not wait."""
    from ctxfst.pipeline import chunk_rows
    from ctxfst.pipeline.errors import BuildFailed

    pids = tmp_path / "pids"
    pids.mkdir()
    install_extractor(tmp_path, monkeypatch, "busy_here", f"""
        open(os.path.join({str(pids)!r}, str(os.getpid())), "w").close()
        time.sleep(30)
        return []
    """, imports="import os, time")
    root = _mock_kb(tmp_path / "kb", "busy_here:make")

    def broken(*args, **kwargs):
        assert _wait_for_files(pids, 2)  # two workers extracting
        raise BuildFailed("compile broke on purpose")

    monkeypatch.setattr(chunk_rows, "compile_chunks", broken)
    code, out = build(root, capsys)
    assert code != 0 and out.rstrip().endswith("compile broke on purpose, build/ unchanged")
    workers = {int(path.name) for path in pids.iterdir()}
    assert len(workers) >= 2 and os.getpid() not in workers
    assert _gone(workers), "facts workers left behind"
    assert _lock_free(root)
    assert not any(run.beside.children for run in runs)


def test_a_facts_process_killed_while_its_workers_run_stops_the_build(
        tmp_path, capsys, monkeypatch):
    """Its workers hold the answer pipe open: the manifest must not wait for them."""
    install_extractor(tmp_path, monkeypatch, "kills_parent_here", """
        os.kill(os.getppid(), signal.SIGKILL)  # (a worker's parent: the facts process)
        time.sleep(30)
        return []
    """, imports="import os, signal, time")
    root = _mock_kb(tmp_path / "kb", "kills_parent_here:make")
    code, out = build(root, capsys)
    assert code != 0
    assert re.fullmatch(r"build stopped: facts: its process ended without an answer "
                        r"\(signal 9: .*\); run the build again, build/ unchanged",
                        out.rstrip().splitlines()[-1]), out
    assert _lock_free(root)


def test_a_cache_locked_by_another_process_is_waited_for_not_discarded(tmp_path,
                                                                       monkeypatch):
    """The facts process and the stages beside it write one unit store: a connection
    that gives up waiting for the other's lock must leave the file alone (it is not
    damaged), working without it meanwhile."""
    import sqlite3

    from ctxfst.artifacts import cache

    path = tmp_path / "units.sqlite"
    first = sqlite3.connect(path)  # the other process, writing for a long time
    first.execute("PRAGMA journal_mode=WAL")
    first.execute("CREATE TABLE kept (x)")
    first.commit()
    first.execute("BEGIN EXCLUSIVE")
    first.execute("INSERT INTO kept VALUES (1)")
    inode = path.stat().st_ino
    monkeypatch.setattr(cache, "BUSY_SECONDS", 0.2)
    # (this connection must write its table, and cannot)
    second = cache.connect(path, "CREATE TABLE IF NOT EXISTS units (key TEXT PRIMARY KEY)")
    assert second.execute("PRAGMA database_list").fetchone()[2] == ""  # in memory
    first.commit()
    assert path.stat().st_ino == inode
    assert sqlite3.connect(path).execute("SELECT count(*) FROM kept").fetchone() == (1,)


def _wait_for_files(folder: Path, count: int, seconds: float = 60.0) -> bool:
    import time

    deadline = time.monotonic() + seconds
    while sum(1 for _ in folder.iterdir()) < count:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


@pytest.fixture(autouse=True)
def runs(monkeypatch):
    """Every BuildRun this test's builds make; the stages any left running beside are
    ended after it."""
    from ctxfst.pipeline import tasks
    from ctxfst.pipeline.run import BuildRun

    made: list[BuildRun] = []

    class Recorded(BuildRun):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            made.append(self)

    monkeypatch.setattr(tasks, "BuildRun", Recorded)
    yield made
    for run in made:
        run.beside.abandon_all()


@pytest.fixture(autouse=True)
def _threads_of_this_test_only(monkeypatch):
    """A build is a process of its own; this one is pytest's, where earlier tests left
    threads (LanceDB's event loop, tqdm's monitor) that would keep facts from forking.
    The fork guard counts the threads a test starts, not those."""
    import threading

    before = set(threading.enumerate()) - {threading.main_thread()}

    class Threads:
        @staticmethod
        def active_count() -> int:
            return len(set(threading.enumerate()) - before)

    monkeypatch.setattr(beside, "threading", Threads)


_BUILD_AND_SAY_PANDAS = """
import sys
from pathlib import Path
from ctxfst.pipeline.runner import run_build
code = run_build(Path(sys.argv[1]), [])
imported = "pandas" in sys.modules
import pyarrow as pa
frame = pa.table({"a": [1, 2]}).to_pandas()  # (asked for: pandas is imported)
print("said:", code, imported, type(frame).__name__)
"""


def test_a_local_build_does_not_import_pandas_for_pyarrow_to_look_at(tmp_path):
    """pyarrow imports pandas (0.2 s) the first time it makes an array from Python
    objects, to see whether they are pandas objects; a local build answers that probe
    "no" before the facts stage forks, so neither process pays for it, and a conversion
    to pandas asked for later still works."""
    pytest.importorskip("pandas")
    root = example(tmp_path / "kb")
    said = subprocess.run([sys.executable, "-c", _BUILD_AND_SAY_PANDAS, str(root)],
                          capture_output=True, text=True)
    assert said.stdout.splitlines()[-1] == "said: 0 False DataFrame", said.stdout + said.stderr
