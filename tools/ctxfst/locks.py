"""Kernel file locks (flock): released by the kernel when the holder dies, so a killed
process never leaves a lock behind. The lock file records its holder for messages."""

from __future__ import annotations

import contextlib
import datetime as _dt
import fcntl
import os
import time
from pathlib import Path
from typing import Callable, Iterator


class LockBusy(Exception):
    """The lock stayed taken for the whole timeout; the message names the holder."""


@contextlib.contextmanager
def exclusive(path: Path, timeout: float | None, busy: Callable[[str], str],
              waiting: Callable[[str], None] | None = None) -> Iterator[None]:
    """flock path exclusively, waiting up to timeout seconds (None: as long as it takes).

    busy(holder) words the LockBusy message; waiting(holder) is told once when we wait.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(path, "a+")
    deadline = None if timeout is None else time.monotonic() + timeout
    told = False
    try:
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                handle.seek(0)
                holder = handle.read().strip() or "another process"
                if deadline is not None and time.monotonic() >= deadline:
                    raise LockBusy(busy(holder)) from None
                if waiting is not None and not told:
                    waiting(holder)
                    told = True
                time.sleep(0.01 if deadline is not None else 0.1)
        handle.seek(0)
        handle.truncate()
        since = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
        handle.write(f"pid {os.getpid()} since {since}")
        handle.flush()
        yield
    finally:
        handle.close()
