"""Freed heap returned once a burst of reconciles has drained (issue 39, controller/heap.py):
the work queue reports each drain and keeps the one count of its runs, a drain after a burst
trims once, the scope queue is wired to it, and the trim really returns freed pages on this C
library."""

from __future__ import annotations

import asyncio
import gc
import json
from types import SimpleNamespace

import pytest

from fgentic_governance.controller import heap
from fgentic_governance.controller.handlers import memoryscope
from fgentic_governance.controller.handlers.memoryscope import Latest, reconcile_scope
from fgentic_governance.controller.lanes import SCOPES
from fgentic_governance.controller.workqueue import WorkQueue
from tests.support.objects import scope_obj
from tests.support.polling import until_async

NS = "heap"


async def test_a_queue_reports_a_drain_once_and_counts_every_run() -> None:
    queue, release, drains = WorkQueue("t"), asyncio.Event(), list[int]()

    async def work(key: str) -> None:
        await release.wait()

    queue.start(3, work, float, drained=lambda: drains.append(queue.runs))
    try:
        for i in range(10):
            queue.add(f"k{i}")
        await until_async(lambda: len(queue) == 7, "three running, seven queued", 5)
        queue.add("k0")  # running: dirty, so it runs again before the queue drains
        release.set()
        await until_async(lambda: drains, "the first drain", 5)
        queue.add("k1")
        await until_async(lambda: len(drains) == 2, "the second drain", 5)
        assert drains == [11, 12]  # the runs so far, at each drain
    finally:
        queue.stop()
    assert queue.runs == 12  # a count that only grows, kept over a stop


def test_a_drain_trims_only_after_a_burst(monkeypatch: pytest.MonkeyPatch) -> None:
    trims: list[int] = []
    monkeypatch.setattr(heap, "trim", lambda: trims.append(1) or True)
    queue = SimpleNamespace(runs=7)  # runs before: not this burst's
    after = heap.AfterBursts(queue)
    queue.runs += heap.BURST_RUNS - 1
    after.drained()
    assert trims == []
    queue.runs += 1  # the burst's last run
    after.drained()
    assert trims == [1]
    queue.runs += 1  # at rest: a drain per run, no trim
    after.drained()
    assert trims == [1]
    queue.runs += heap.BURST_RUNS - 1  # the next burst, counted from the last trim
    after.drained()
    assert trims == [1, 1]


async def test_the_scope_queue_trims_once_its_burst_drained(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    trims: list[int] = []
    monkeypatch.setattr(heap, "BURST_RUNS", 5)
    monkeypatch.setattr(heap, "trim", lambda: trims.append(1) or True)

    async def reconcile(key: str, latest: Latest) -> None:
        await asyncio.sleep(0)

    monkeypatch.setattr(memoryscope, "_reconcile", reconcile)
    spec = json.dumps(scope_obj(NS, "s", "@alice:fgentic.local")["spec"])
    index = {f"{NS}/s{i}": [Latest(f"uid-{i}", 1, False, spec, "{}", {})] for i in range(5)}
    try:
        for i in range(5):
            await reconcile_scope(namespace=NS, name=f"s{i}", scope_latest=index,
                                  consents_by_scope={}, offboarding_principals={}, retry=0)
        await until_async(lambda: trims, "the burst's trim", 15)
        assert trims == [1] and SCOPES.held() == 0
    finally:
        SCOPES.stop()
        memoryscope._INDEX.clear()
        memoryscope._WRITTEN.clear()
        memoryscope._READ.clear()


def test_the_trim_returns_freed_heap_to_the_system() -> None:
    """Blocks of 3,000 bytes come from malloc's heap; one kept in 500 keeps the heap from
    shrinking by itself, as the objects left after a burst do."""
    blocks = [bytes(3000) for _ in range(40_000)]  # ~115 MiB
    kept = blocks[::500]
    del blocks
    gc.collect()
    before = heap.resident_mib()
    assert heap.trim(), "no malloc_trim in this C library"
    after = heap.resident_mib()
    assert before - after > 60, (before, after)
    assert len(kept) == 80
