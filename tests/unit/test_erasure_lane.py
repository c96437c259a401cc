"""The erasure lane's own event loop (controller.lanes, issue 39): an offboarding's store work
goes on while the operator's loop is busy, instead of waiting a turn of it per round trip."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest

from fgentic_governance.controller import lanes

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
