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
that waits for it is part of the run; otherwise the stage runs in line as before. The
child leads a process group of its own with the workers it forks: a build that stops
ends them all (they hold the build lock), and the parent waits for the child itself,
never for the end of a pipe a worker may hold open.
"""

from __future__ import annotations

import atexit
import io
import json
import os
import select
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass

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


class Beside:
    """The stages a build runs beside the others: its forked children, what it planned
    to run, and what failed. One per build run (pipeline/run.py); a forked child gets
    its own copy, emptied."""

    def __init__(self) -> None:
        self.children: dict[str, _Child] = {}
        self.failed: dict[str, Failure] = {}
        self.in_child = False  # this process is a stage forked beside the others
        self.planned_in: int | None = None  # the pid of the process that planned the run
        self.planned: frozenset[str] = frozenset()
        self._exit_hook = False

    def plan(self, tasks: dict, selected: list[str]) -> None:
        """What this doit run will consider (the selected tasks and all they depend on),
        as its reporter learns it before the first task."""
        self.abandon_all()  # (none is left from an earlier run: its reporter ended them)
        self.failed.clear()
        wanted: set[str] = set()
        todo = [name for name in selected if name in tasks]
        while todo:
            name = todo.pop()
            if name not in wanted:
                wanted.add(name)
                todo.extend(dep for dep in tasks[name].task_dep if dep in tasks)
        self.planned_in, self.planned = os.getpid(), frozenset(wanted)

    def may_fork(self, waiters: tuple[str, ...]) -> bool:
        """Whether a beside stage may fork now: in the process that planned the run, with
        no other thread (doit's `-P thread` runner: a fork copies one thread of many),
        and with a stage that waits for it in the run."""
        return (hasattr(os, "fork") and self.planned_in == os.getpid()
                and threading.active_count() == 1
                and any(name in self.planned for name in waiters))

    def start(self, name: str, run: Callable[[], None], stopped: tuple[type, ...]) -> None:
        """Fork; the child runs run() and answers whether it succeeded. Exceptions of the
        types in `stopped` are reasons to stop the build (their message is said); any
        other is a fault (its traceback is said). The child leads a process group of its
        own, so that it and the workers it forks are ended together (abandon_all, join)."""
        sys.stdout.flush()
        sys.stderr.flush()
        read_end, write_end = os.pipe()
        if not self._exit_hook:
            atexit.register(self.abandon_all)  # (a build that ends without waiting for it)
            self._exit_hook = True
        # No Ctrl-C between the fork and the child's own group: it would unwind the child
        # into doit. (The parent gets it once the child is known, and ends the child.)
        masked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        pid = os.fork()
        if pid == 0:  # the child: never returns into doit, never runs the parent's atexit
            try:
                os.setpgid(0, 0)
                signal.pthread_sigmask(signal.SIG_SETMASK, masked)
                os.close(read_end)
                self.in_child = True
                self.children.clear()  # (the parent's other children are not its own)
            except BaseException:  # noqa: BLE001
                os._exit(1)
            _answer(write_end, run, stopped)
        try:
            try:
                os.setpgid(pid, pid)  # (both sides set it: whichever runs first)
            except OSError:
                pass  # it has set it, or exited already
            os.close(write_end)
            os.set_blocking(read_end, False)
            self.children[name] = _Child(pid, read_end)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, masked)

    def running(self, name: str) -> bool:
        return name in self.children

    def join(self, name: str) -> Failure | None:
        """Wait for a stage started beside the others; its failure, or None.
        (Interrupted, the child stays known, and abandon_all ends it.)"""
        child = self.children.get(name)
        if child is None:
            return self.failed.get(name)
        data, status = _finish(child, _exited)
        del self.children[name]
        try:
            answer = json.loads(data)
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
        self.failed[name] = failure
        return failure

    def abandon_all(self, grace: float = 5.0) -> None:
        """End the stages still running beside (the build stopped before a stage waited
        for them), with the workers they forked: their result files stay missing, so the
        next build runs them again."""
        for name, child in list(self.children.items()):
            _signal_group(child.pid, signal.SIGTERM)
            deadline = time.monotonic() + grace
            _finish(child, lambda pid: _exited(pid) or time.monotonic() >= deadline)  # noqa: B023 (called in this iteration)
            del self.children[name]


def _answer(write_end: int, run: Callable[[], None], stopped: tuple[type, ...]) -> None:
    """In the child: run, then say on the pipe whether it succeeded (and what it wrote,
    and said), and exit. What it says is said by the parent when it waits for it: after
    the lines of the stages that ran meanwhile, not among them."""
    code = 1
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


def _finish(child: _Child, done: Callable[[int], bool]) -> tuple[bytes, int]:
    """Read the child's answer until done(pid) says it may stop waiting; then end what
    is left of its process group (workers it left behind, or the child itself) while it
    is still unreaped, so its pid cannot name another group yet; then reap it. Its answer
    and its wait status."""
    chunks: list[bytes] = []
    open_pipe = True
    while not done(child.pid):
        ready, _, _ = select.select([child.answer] if open_pipe else [], [], [], 0.005)
        if ready:
            open_pipe = _drain(child.answer, chunks)
    _signal_group(child.pid, signal.SIGKILL)
    _, status = os.waitpid(child.pid, 0)
    if open_pipe:
        _drain(child.answer, chunks)  # (every writer is gone: what is left, then EOF)
    os.close(child.answer)
    return b"".join(chunks), status


def _exited(pid: int) -> bool:
    """Whether the child has ended (it is not reaped: its pid stays its own)."""
    return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None


def _drain(handle: int, chunks: list[bytes]) -> bool:
    """Read what the pipe holds now; False at its end."""
    while True:
        try:
            chunk = os.read(handle, 65536)
        except BlockingIOError:
            return True
        if not chunk:
            return False
        chunks.append(chunk)


def _signal_group(pid: int, number: int) -> None:
    try:
        os.killpg(pid, number)
    except (ProcessLookupError, PermissionError):
        pass
