"""Stages that run beside the others: a stage of the table marked `beside` (facts) runs
in a forked process from the moment doit reaches it, while the parent goes on with the
stages that follow; the first stage that reads its outputs (the manifest) waits for it
before doit looks at that stage's inputs. On two cores an edit's facts stage then costs
no wall time of its own: it overlaps compile, profiles and embed.

doit still decides whether the stage runs, and records it as it does any stage. Its
result file (a target) is removed before the fork and written by the child only once
every output is, so a stage that fails, is killed or is abandoned (an earlier failure
stops the build) has a missing target, and the next build runs it again.

Only this process's sequential doit runner forks (doit's `-n` runs actions in worker
processes, where a later stage could not wait for the child), and only when a stage
that waits for it is part of the run; otherwise the stage runs in line as before.
"""

from __future__ import annotations

import io
import json
import os
import signal
import sys
import time
import traceback
from dataclasses import dataclass
from typing import Callable

from ..artifacts.io import digests_written, remember_written


@dataclass
class _Child:
    pid: int
    answer: int  # the read end of the pipe the child answers on


@dataclass(frozen=True)
class Failure:
    """A stage that failed beside the others: stopped (BuildFailed, a dead worker: the
    message is the reason) or broke (an unexpected exception: the message is its
    traceback)."""

    stopped: bool
    message: str


_running: dict[str, _Child] = {}
_in_child: list[bool] = [False]
_failed: dict[str, Failure] = {}
_plan: dict[str, object] = {"pid": None, "stages": frozenset()}


def plan(tasks: dict, selected: list[str]) -> None:
    """What this doit run will consider (the selected tasks and all they depend on), as
    its reporter learns it before the first task."""
    _running.clear()
    _failed.clear()
    wanted: set[str] = set()
    todo = [name for name in selected if name in tasks]
    while todo:
        name = todo.pop()
        if name not in wanted:
            wanted.add(name)
            todo.extend(dep for dep in tasks[name].task_dep if dep in tasks)
    _plan.update(pid=os.getpid(), stages=frozenset(wanted))


def may_fork(waiters: tuple[str, ...]) -> bool:
    """Whether a beside stage may fork now: in the process that planned the run, with a
    stage that waits for it in the run."""
    return (hasattr(os, "fork") and _plan["pid"] == os.getpid()
            and any(name in _plan["stages"] for name in waiters))  # type: ignore[operator]


def start(name: str, run: Callable[[], None], stopped: tuple[type, ...]) -> None:
    """Fork; the child runs run() and answers whether it succeeded. Exceptions of the
    types in `stopped` are reasons to stop the build (their message is said); any other
    is a fault (its traceback is said)."""
    sys.stdout.flush()
    sys.stderr.flush()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into doit, never runs the parent's atexit
        os.close(read_end)
        _in_child[0] = True
        code = 1
        # What it says is said by the parent when it waits for it: after the lines of
        # the stages that ran meanwhile, not among them.
        said = sys.stdout, sys.stderr = io.StringIO(), io.StringIO()
        known = digests_written()
        try:
            run()
            # what it wrote, so that the parent need not hash those files again
            answer = {"ok": True, "written": {path: entry for path, entry in
                                              digests_written().items()
                                              if known.get(path) != entry}}
            code = 0
        except stopped as error:
            answer = {"ok": False, "stopped": True, "message": str(error)}
        except BaseException:  # noqa: BLE001 (said to the parent, which fails the build)
            answer = {"ok": False, "stopped": False, "message": traceback.format_exc()}
        try:
            answer.update(stdout=said[0].getvalue(), stderr=said[1].getvalue())
            data = json.dumps(answer).encode("utf-8")
            while data:
                data = data[os.write(write_end, data):]
        finally:
            os._exit(code)
    os.close(write_end)
    _running[name] = _Child(pid, read_end)


def forked() -> bool:
    """Whether this process is a stage forked beside the others (what it frees, its
    parent keeps)."""
    return _in_child[0]


def running(name: str) -> bool:
    return name in _running


def join(name: str) -> Failure | None:
    """Wait for a stage started beside the others; its failure, or None."""
    child = _running.pop(name, None)
    if child is None:
        return _failed.get(name)
    chunks = []
    while True:
        chunk = os.read(child.answer, 65536)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(child.answer)
    _, status = os.waitpid(child.pid, 0)
    try:
        answer = json.loads(b"".join(chunks))
    except ValueError:
        answer = None
    if isinstance(answer, dict):
        for key, stream in (("stdout", sys.stdout), ("stderr", sys.stderr)):
            if isinstance(answer.get(key), str) and answer[key]:
                stream.write(answer[key])
                stream.flush()
    if isinstance(answer, dict) and answer.get("ok") is True and status == 0:
        remember_written(answer.get("written") or {})
        return None
    if isinstance(answer, dict) and isinstance(answer.get("message"), str):
        failure = Failure(bool(answer.get("stopped")), answer["message"])
    else:
        how = (f"signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status)
               else f"exit status {os.waitstatus_to_exitcode(status)}")
        failure = Failure(True, f"its process ended without an answer ({how}: out of "
                                "memory, or killed); run the build again")
    _failed[name] = failure
    return failure


def abandon_all(grace: float = 5.0) -> None:
    """Stop the stages still running beside (the build stopped before a stage waited for
    them): their result files stay missing, so the next build runs them again."""
    for name, child in list(_running.items()):
        try:
            os.kill(child.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + grace
        while True:
            done, _ = os.waitpid(child.pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() >= deadline:
                os.kill(child.pid, signal.SIGKILL)
                os.waitpid(child.pid, 0)
                break
            time.sleep(0.01)
        os.close(child.answer)
        del _running[name]
