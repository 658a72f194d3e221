"""forked_imap: results in order, each as it comes, while the workers make the rest; the
parse of many documents types the first ones while the workers parse the others."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

import ctxfst.parallel as parallel
from ctxfst.parallel import forked_imap, forked_map, worker_count

pytestmark = pytest.mark.skipif(worker_count() < 2 or not hasattr(os, "fork"),
                                reason="forked_imap runs in this process on one core")

WAIT_SECONDS = 30  # (a worker waits this long at most for what the caller does)


def _waited_for(marker: Path) -> bool:
    """Whether marker appeared, waiting for it (polled; once one wait is given up, the
    others are too, so that a failing test fails soon)."""
    gave_up = marker.with_name(marker.name + ".gave-up")
    deadline = time.monotonic() + WAIT_SECONDS
    while time.monotonic() < deadline and not gave_up.exists():
        if marker.exists():
            return True
        time.sleep(0.01)
    gave_up.touch()
    return False


def test_forked_imap_gives_each_result_as_it_comes_in_order(tmp_path):
    """The last items wait until the caller has been given the first result: with the
    results only given once all were made, they would wait in vain."""
    marker = tmp_path / "first-result-given"
    items = list(range(400))

    def work(item: int) -> tuple[int, bool]:
        return item, (_waited_for(marker) if item >= 300 else True)

    results = []
    for result in forked_imap(work, items, chunksize=50):
        if not results:
            marker.touch()
        results.append(result)
    assert [item for item, _ in results] == items
    assert all(saw for _, saw in results)


def test_a_caller_that_stops_early_stops_the_workers(tmp_path):
    """The items not started are dropped, and the next map forks workers again."""
    started = tmp_path / "started"
    started.mkdir()

    def work(item: int) -> int:
        (started / str(item)).touch()
        time.sleep(0.005)
        return item

    results = forked_imap(work, list(range(2000)), chunksize=20)
    assert next(results) == 0
    results.close()
    assert parallel._job is None
    assert len(list(started.iterdir())) < 2000
    assert set(forked_map(lambda _: os.getpid(), [None] * 300)) - {os.getpid()}


def test_parsing_many_documents_types_the_first_while_the_rest_are_parsed(
        tmp_path, monkeypatch):
    """parse_inputs types each document the workers send back as it comes (the typing
    is the caller's, beside the workers): the last documents are parsed only once the
    first has been typed here. The documents are those of a serial parse."""
    import ctxfst.document.kb as document_kb
    from ctxfst.artifacts.cache import ParseCache
    from ctxfst.document.kb import inputs_for, parse_inputs
    from ctxfst.mock import generate

    generate(tmp_path / "kb", 400, seed=3)
    inputs = inputs_for([tmp_path / "kb" / "content"])
    assert len(inputs) >= 400
    last = {item.source.path for item in inputs[-50:]}
    marker = tmp_path / "first-typed"
    parent = os.getpid()
    real_parse, real_type = document_kb._parse_to_row, document_kb.type_document

    def parse(job, parsers):
        waited = job[0].source.path in last and _waited_for(marker)
        return real_parse(job, parsers) if waited or job[0].source.path not in last \
            else None

    def typed(doc):
        if os.getpid() == parent:
            marker.touch()
        return real_type(doc)

    monkeypatch.setattr(document_kb, "_parse_to_row", parse)
    monkeypatch.setattr(document_kb, "type_document", typed)
    cache = ParseCache(tmp_path / "parse.sqlite")
    try:
        streamed = parse_inputs(inputs, cache)
    finally:
        cache.close()
    monkeypatch.setattr(document_kb, "_parse_to_row", real_parse)
    serial = parse_inputs(inputs, mapper=lambda function, items: list(map(function, items)))
    assert [doc.path for doc in streamed] == [doc.path for doc in serial]
    assert [doc.entities for doc in streamed] == [doc.entities for doc in serial]
