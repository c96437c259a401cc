"""The erasure lane's own event loop (controller.lanes, issue 39): an offboarding's store work
goes on while the operator's loop is busy, instead of waiting a turn of it per round trip."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest
from prometheus_client import REGISTRY

from fgentic_governance.controller import lanes
from fgentic_governance.controller.workqueue import WorkQueue
from tests.support.polling import until_async

BOUND = 10.0  # seconds: every wait below is bounded


@pytest.fixture
def lane() -> Iterator[None]:
    lanes.open_lanes()
    yield
    lanes.close_lanes()


async def test_work_on_the_erasure_lane_runs_while_the_callers_loop_is_blocked(
        lane: None) -> None:
    steps: list[int] = []
    done = threading.Event()

    async def erasure() -> str:
        for step in range(20):  # many awaits, as an offboarding's round trips
            await asyncio.sleep(0)
            steps.append(step)
        done.set()
        return "erased"

    result = asyncio.ensure_future(lanes.on_erasure_lane(erasure()))
    await asyncio.sleep(0)  # handed over to the lane
    # This loop is now blocked (a burst's handlers hogging it): the lane finishes regardless.
    assert done.wait(BOUND), "the erasure lane made no progress while the caller's loop was busy"
    assert steps == list(range(20))
    assert await asyncio.wait_for(result, BOUND) == "erased"


async def test_an_error_on_the_erasure_lane_reaches_the_caller(lane: None) -> None:
    async def refused() -> None:
        raise LookupError("refused")

    with pytest.raises(LookupError):
        await asyncio.wait_for(lanes.on_erasure_lane(refused()), BOUND)


async def test_closing_the_lanes_stops_the_erasure_loop(lane: None) -> None:
    loop = lanes.erasure_loop()
    assert loop.is_running() and loop is not asyncio.get_running_loop()
    lanes.close_lanes()
    assert not loop.is_running()


def _timeouts() -> float:
    return REGISTRY.get_sample_value("fgentic_erasure_first_timeouts_total") or 0.0


async def _hold_erasure(holding: threading.Event, release: threading.Event) -> None:
    """An offboarding's run on the erasure loop's thread, until ``release``."""
    with lanes.ERASURE_FIRST.erasing():
        holding.set()
        await asyncio.get_running_loop().run_in_executor(None, release.wait, BOUND)


async def test_no_reconcile_starts_while_an_offboarding_runs(lane: None) -> None:
    """The erasure lane goes first: while an offboarding runs on its thread, the scope queue
    starts no run (the key stays queued) and no ConsentRecord reconcile takes a slot; both
    start once it ends, without waiting out the bound."""
    holding, release = threading.Event(), threading.Event()
    erasure = asyncio.ensure_future(lanes.on_erasure_lane(_hold_erasure(holding, release)))
    assert await asyncio.to_thread(holding.wait, BOUND)
    ran: list[str] = []

    async def work(key: str) -> None:
        ran.append(key)

    async def consent() -> None:
        async with lanes.reconcile_slot(1.0):
            ran.append("consent")

    queue = WorkQueue("erasure-first")
    queue.start(1, work, float, turn=lanes.ERASURE_FIRST.turn)
    try:
        queue.add("ns/scope")
        slot = asyncio.ensure_future(consent())
        before = _timeouts()
        for _ in range(20):  # many turns of this loop: nothing starts
            await asyncio.sleep(0.01)
        assert ran == [] and queue.pending("ns/scope")
        release.set()
        await asyncio.wait_for(erasure, BOUND)
        await asyncio.wait_for(slot, BOUND)
        await until_async(lambda: sorted(ran), "both runs after the offboarding",
                          holds=lambda seen: seen == ["consent", "ns/scope"])
        assert _timeouts() == before
    finally:
        queue.stop()
        release.set()


async def test_a_reconcile_waits_for_offboardings_no_longer_than_the_bound(
        lane: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lanes, "ERASURE_FIRST_SECONDS", 0.05)
    holding, release = threading.Event(), threading.Event()
    erasure = asyncio.ensure_future(lanes.on_erasure_lane(_hold_erasure(holding, release)))
    try:
        assert await asyncio.to_thread(holding.wait, BOUND)
        before = _timeouts()
        await asyncio.wait_for(lanes.ERASURE_FIRST.turn(), BOUND)
        assert lanes.ERASURE_FIRST.running == 1 and _timeouts() == before + 1
    finally:
        release.set()
        await asyncio.wait_for(erasure, BOUND)
    assert lanes.ERASURE_FIRST.running == 0
    await asyncio.wait_for(lanes.ERASURE_FIRST.turn(), BOUND)  # none running: at once
    assert _timeouts() == before + 1
