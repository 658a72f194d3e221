"""Kernel file locks (flock): released by the kernel when the holder dies, so a killed
process never leaves a lock behind. The lock file records its holder for messages."""

from __future__ import annotations

import contextlib
import datetime as _dt
import fcntl
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from .artifacts.io import open_no_follow


class LockBusy(Exception):
    """The lock stayed taken for the whole timeout; the message names the holder."""


_HOLDER_LIMIT = 200  # characters of a lock file's holder text shown in messages
_HELD: set[str] = set()  # locks this process holds: taking one again is a no-op
INHERITED = "CTXFST_LOCKS_HELD"  # os.pathsep-separated locks a parent process holds


def is_held(path: Path) -> bool:
    """Whether this process, or the parent that started it, holds the lock at path."""
    key = str(path.resolve())
    return key in _HELD or key in os.environ.get(INHERITED, "").split(os.pathsep)


@contextlib.contextmanager
def exclusive(path: Path, timeout: float | None, busy: Callable[[str], str],
              waiting: Callable[[str], None] | None = None,
              reentrant: bool = False) -> Iterator[None]:
    """flock path exclusively, waiting up to timeout seconds (None: as long as it takes).

    busy(holder) words the LockBusy message; waiting(holder) is told once when we wait.
    reentrant: a lock this process (or the parent that started it) holds is not taken
    again (a second flock of the same file would wait for ourselves forever).
    """
    key = str(path.resolve())
    if reentrant and is_held(path):
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    # Not through a planted link: we truncate and write the lock file.
    handle = os.fdopen(open_no_follow(path, os.O_RDWR | os.O_CREAT), "r+",
                       encoding="utf-8", errors="replace")
    deadline = None if timeout is None else time.monotonic() + timeout
    told = False
    try:
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                handle.seek(0)
                holder = handle.read(_HOLDER_LIMIT).strip() or "another process"
                if deadline is not None and time.monotonic() >= deadline:
                    raise LockBusy(busy(holder)) from None
                if waiting is not None and not told:
                    waiting(holder)
                    told = True
                time.sleep(0.01 if deadline is not None else 0.1)
        handle.seek(0)
        handle.truncate()
        since = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
        handle.write(f"pid {os.getpid()} since {since}")
        handle.flush()
        if not reentrant:
            yield
            return
        _HELD.add(key)
        inherited = os.environ.get(INHERITED)
        os.environ[INHERITED] = os.pathsep.join(filter(None, [inherited, key]))
        try:
            yield
        finally:
            _HELD.discard(key)
            if inherited is None:
                os.environ.pop(INHERITED, None)
            else:
                os.environ[INHERITED] = inherited
    finally:
        handle.close()
