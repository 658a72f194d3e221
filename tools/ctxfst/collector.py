"""Pausing Python's cyclic garbage collector around passes that build large, acyclic,
long-lived data (a parsed knowledge base, facts): the collector would rescan those
objects again and again and free nothing (64% of a warm `ctxfst validate` at 10,000
documents)."""

from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Iterator


@contextmanager
def collector_paused() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
