"""Kopf's index pre-population barrier (controller/prepopulation.py, issue 39 restart): however
many objects wait for the operator to be indexed, one waiter sits on the set's condition, so a
toggle made or dropped wakes one task, not every object's worker. Counts, never timings."""

from __future__ import annotations

import asyncio

from kopf._cogs.aiokits import aiotoggles

from fgentic_governance.controller import prepopulation

WORKERS = 50


async def _settle() -> None:
    for _ in range(5):  # let every task reach its wait
        await asyncio.sleep(0)


def test_the_hook_point_exists_and_is_installed_once() -> None:
    prepopulation.share_barrier_waits()
    wrapped = aiotoggles.ToggleSet.wait_for
    prepopulation.share_barrier_waits()
    assert prepopulation.installed()
    assert aiotoggles.ToggleSet.wait_for is wrapped


async def test_one_waiter_on_the_condition_for_every_waiting_worker() -> None:
    prepopulation.share_barrier_waits()
    indexed = aiotoggles.ToggleSet(all)
    toggles = [await indexed.make_toggle(name=str(i)) for i in range(WORKERS)]
    done: list[int] = []

    async def worker(i: int) -> None:
        await indexed.drop_toggle(toggles[i])
        await indexed.wait_for(True)
        done.append(i)

    tasks = [asyncio.create_task(worker(i)) for i in range(WORKERS - 1)]
    await _settle()
    # Kopf's own wait_for leaves WORKERS - 1 waiters here, each woken by every drop.
    assert len(indexed._condition._waiters) == 1
    assert done == []
    await indexed.drop_toggle(toggles[-1])
    await asyncio.wait_for(asyncio.gather(*tasks), 10)
    assert sorted(done) == list(range(WORKERS - 1))


async def test_a_cancelled_waiter_leaves_the_others_waiting() -> None:
    prepopulation.share_barrier_waits()
    indexed = aiotoggles.ToggleSet(all)
    blocker = await indexed.make_toggle(name="blocker")
    first = asyncio.create_task(indexed.wait_for(True))
    second = asyncio.create_task(indexed.wait_for(True))
    await _settle()
    first.cancel()
    await _settle()
    assert first.cancelled()
    assert not second.done()
    await indexed.drop_toggle(blocker)
    await asyncio.wait_for(second, 10)
    # Already in the state: returns at once, and waiting for the other state still works.
    await asyncio.wait_for(indexed.wait_for(True), 10)
    await indexed.make_toggle(name="again")
    await asyncio.wait_for(indexed.wait_for(False), 10)
