"""A build's memory. Pausing Python's cyclic garbage collector around passes that build
large, acyclic, long-lived data (a parsed knowledge base, facts): the collector would
rescan those objects again and again and free nothing (64% of a warm `ctxfst validate`
at 10,000 documents). For one-shot processes (a build, validate, the hook): a long-lived
server should not freeze what each request leaves. And giving back what a stage freed."""

from __future__ import annotations

import functools
import gc
import sys
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_paused() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        # What the pass left alive lives on (a build shares it between its stages): the
        # collector need never scan it again, between stages or at exit (0.9 s of a
        # 10,000-document edit). Objects frozen are still freed by reference counting;
        # only cycles among them would outlive the process, which ends soon after.
        gc.freeze()
        if enabled:
            gc.enable()


@functools.cache
def _malloc_trim():
    """glibc's malloc_trim (musl and macOS have none, Windows no CDLL(None)), or None."""
    import ctypes

    try:
        trim = ctypes.CDLL(None).malloc_trim if sys.platform.startswith("linux") else None
    except (OSError, AttributeError):
        return None
    if trim is not None:
        trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


def return_free_memory() -> None:
    """Give the C heap's free pages back to the system. glibc keeps them: 130 MB after a
    10,000-document validate, 200 MB after its compile, which the facts process forked
    from the build would hold as well. Some milliseconds; nothing where malloc_trim is
    missing (another C library). Arrow's own allocator (mimalloc) keeps what Arrow
    freed as well (70 MB after a first build's facts sort at 10,000 documents): given
    back too, where Arrow is loaded."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
    arrow = sys.modules.get("pyarrow")
    if arrow is not None:
        arrow.default_memory_pool().release_unused()
