"""One way to spread independent work over the cores: forked workers.

A forked child inherits the parent's memory (modules, the typed knowledge base, the
catalogs), so only an index goes to it and only its result comes back; nothing a
worker needs is pickled. Results come in the order of the items, whatever finishes
first, so the output is the same as a serial run's.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any

PARALLEL_THRESHOLD = 200  # fewer items than this: forking costs more than it saves


class WorkerDied(RuntimeError):
    """A worker process ended without an answer (killed, out of memory, crashed)."""


_job: tuple[Callable[[Any], Any], Sequence[Any]] | None = None  # what the children run


def _run_one(index: int) -> Any:
    function, items = _job  # type: ignore[misc]
    return function(items[index])


def usable_cores() -> int:
    """The cores this process may run on (its affinity where the system says)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") \
        else os.cpu_count() or 1


def worker_count() -> int:
    """How many workers forked_map() forks when it does: the usable cores, up to 8."""
    return min(usable_cores(), 8)


def forked_map(function: Callable[[Any], Any], items: Sequence[Any],
               threshold: int = PARALLEL_THRESHOLD, chunksize: int | None = None
               ) -> list[Any]:
    """[function(item) for item in items], in forked workers when there are enough
    items and cores (Linux). function must not rely on changes it makes to the parent's
    state: they stay in the child. chunksize: items handed to a worker at a time (by
    default a quarter of each worker's share, at least 16)."""
    return list(forked_imap(function, items, threshold, chunksize))


def forked_imap(function: Callable[[Any], Any], items: Sequence[Any],
                threshold: int = PARALLEL_THRESHOLD, chunksize: int | None = None
                ) -> Iterator[Any]:
    """forked_map() as the results come, in order: the caller works on the first ones
    while the workers make the rest (the workers are forked at the first one asked for,
    and stopped, the items not started dropped, when the caller stops early)."""
    global _job
    workers = worker_count()
    if len(items) < threshold or workers < 2 or sys.platform != "linux" or _job is not None:
        yield from map(function, items)
        return
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    _job = (function, items)
    # (a dead worker breaks this pool, where multiprocessing.Pool would wait for ever)
    pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork"))
    try:
        yield from pool.map(_run_one, range(len(items)),
                            chunksize=chunksize or max(16, len(items) // (workers * 4)))
    except BrokenProcessPool:
        raise WorkerDied("a worker process ended without an answer (out of memory, or "
                         "killed); run the build again, or with fewer documents") from None
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        _job = None
