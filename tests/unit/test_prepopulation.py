"""Kopf's index pre-population at start-up (controller/prepopulation.py, issue 39 restart):
however many objects wait for the operator to be indexed, one waiter sits on the set's
condition; through Kopf's own event processing, an ungated kind's handler runs while other
objects are still to be indexed, a gated kind's does not, and ``lifted`` (what the scope queue
waits for) returns only once the barrier is down; an ungated kind's listings are handed to Kopf
one at a time and no faster than they are indexed. Order and counts, never timings."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator
from typing import Any

import kopf
import pytest
from kopf._cogs.aiokits import aiotoggles
from kopf._cogs.clients import watching
from kopf._cogs.structs import ephemera
from kopf._core.actions import lifecycles
from kopf._core.engines import indexing
from kopf._core.intents import registries
from kopf._core.reactor import inventory, processing

from fgentic_governance.controller import prepopulation

GROUP = "governance.fgentic.dev"
UNGATED = kopf.Resource(GROUP, "v1alpha1", "memoryscopes", namespaced=True)
GATED = kopf.Resource(GROUP, "v1alpha1", "retrievalbindings", namespaced=True)
WORKERS = 50


@pytest.fixture(autouse=True)
def hooks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prepopulation, "_START", prepopulation._Start())  # fresh counts
    prepopulation.install(ungated=[(GROUP, "memoryscopes")])


def _raw(name: str, kind: Any = None) -> dict[str, Any]:
    return {"type": kind, "object": {
        "apiVersion": f"{GROUP}/v1alpha1", "kind": "Any",
        "metadata": {"name": name, "namespace": "team", "uid": name, "resourceVersion": "1"},
        "spec": {}}}


class Operator:
    """Kopf's registry with one index and one event handler per kind, and its barrier."""

    def __init__(self) -> None:
        self.registry = registries.OperatorRegistry()
        self.handled: list[str] = []
        for resource in (UNGATED, GATED):
            kopf.index(GROUP, "v1alpha1", resource.plural, registry=self.registry,
                       id=f"by-name-{resource.plural}")(self._index)
            kopf.on.event(GROUP, "v1alpha1", resource.plural, registry=self.registry,
                          id=f"seen-{resource.plural}")(self._handle)
        self.indexers = indexing.OperatorIndexers()
        self.indexers.ensure(self.registry._indexing.get_all_handlers())
        self.barrier = aiotoggles.ToggleSet(all)

    @staticmethod
    async def _index(name: str, **_: Any) -> dict[str, int]:
        return {name: 1}

    async def _handle(self, name: str, **_: Any) -> None:
        self.handled.append(name)

    async def index(self, raw_event: dict[str, Any]) -> None:
        """Kopf's indexing of one event, as a worker calls it."""
        await indexing.index_resource(
            indexers=self.indexers, registry=self.registry, settings=kopf.OperatorSettings(),
            resource=UNGATED, raw_event=raw_event,
            memory=inventory.ResourceMemory().indexing_memory,
            logger=logging.getLogger(__name__), memo=ephemera.Memo(),
            body=kopf.Body(raw_event["object"]))

    async def process(self, resource: kopf.Resource, name: str) -> asyncio.Task[Any]:
        """One listed object's worker, as Kopf's watcher starts it: its toggle made first."""
        toggle = await self.barrier.make_toggle(name=name)
        return asyncio.create_task(processing.process_resource_event(
            lifecycle=lifecycles.all_at_once, indexers=self.indexers, registry=self.registry,
            settings=kopf.OperatorSettings(), memories=inventory.ResourceMemories(),
            memobase=ephemera.Memo(), resource=resource, raw_event=_raw(name),
            event_queue=asyncio.Queue(), resource_indexed=toggle,
            operator_indexed=self.barrier))


async def _settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


def test_the_hook_points_exist_and_are_installed_once() -> None:
    wrapped = (aiotoggles.ToggleSet.wait_for, indexing.index_resource)
    prepopulation.install(ungated=[(GROUP, "memoryscopes")])
    assert prepopulation.installed()
    assert (aiotoggles.ToggleSet.wait_for, indexing.index_resource) == wrapped


async def test_an_ungated_kind_runs_its_handler_before_the_barrier_lifts() -> None:
    operator = Operator()
    blocker = await operator.barrier.make_toggle(name="an object still to be indexed")
    gated = await operator.process(GATED, "binding")
    ungated = await operator.process(UNGATED, "scope")
    await asyncio.wait_for(ungated, 10)  # done: indexed, handled, not waiting
    await _settle()
    assert operator.handled == ["scope"]  # the binding still waits at the barrier
    assert not gated.done()
    lifted = asyncio.create_task(prepopulation.lifted())
    await _settle()
    assert not lifted.done()  # the scope queue does not run before every object is indexed
    await operator.barrier.drop_toggle(blocker)
    await asyncio.wait_for(asyncio.gather(gated, lifted), 10)
    assert operator.handled == ["scope", "binding"]


async def test_lifted_returns_at_once_when_no_worker_skipped_the_barrier() -> None:
    await asyncio.wait_for(prepopulation.lifted(), 10)


async def test_an_ungated_kinds_listing_is_paced_by_its_indexing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    listing = 3 * prepopulation.PACE
    inner_closed: list[bool] = []

    async def stream() -> AsyncGenerator[Any, None]:
        try:
            for i in range(listing):
                yield _raw(f"s{i}")
            yield watching.Bookmark.LISTED
            yield _raw("later", "ADDED")
        finally:
            inner_closed.append(True)

    monkeypatch.setattr(prepopulation, "PACE_STALL", 600.0)
    operator = Operator()
    handed: list[Any] = []

    async def consume() -> None:
        async for raw_event in prepopulation.paced(UNGATED, stream()):
            handed.append(raw_event)

    consumer = asyncio.create_task(consume())
    await _settle()
    # Nothing indexed yet: Kopf gets at most PACE objects ahead (and the one that passed it).
    assert len(handed) == prepopulation.PACE + 1
    for raw_event in handed[:10]:  # ten of them indexed, through Kopf's indexing
        await operator.index(raw_event)
    await _settle()
    assert len(handed) == prepopulation.PACE + 11
    # Indexing that stalls (a throttled worker) leaves the rest of the listing unpaced.
    monkeypatch.setattr(prepopulation, "PACE_STALL", 0.01)
    await operator.index(handed[10])  # (wakes the wait, which now stalls at once)
    await asyncio.wait_for(consumer, 10)
    assert len(handed) == listing + 2
    assert inner_closed == [True]


async def test_a_gated_kinds_stream_is_kopfs_own() -> None:
    """Only an ungated kind's stream is paced: any other kind gets the very stream Kopf made,
    with no generator of ours in between, event by event."""
    async def events() -> AsyncGenerator[Any, None]:
        yield _raw("binding")

    made = [events(), events()]
    gated, ungated = prepopulation.paced(GATED, made[0]), prepopulation.paced(UNGATED, made[1])
    assert gated is made[0]
    assert ungated is not made[1]
    assert [e async for e in gated] == [_raw("binding")]
    assert [e async for e in ungated] == [_raw("binding")]


async def test_one_waiter_on_the_condition_for_every_waiting_worker() -> None:
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


async def test_the_last_cancelled_caller_leaves_no_wait_behind() -> None:
    """Kopf waits 5 s at exit for every task still pending: a shared wait that nobody awaits
    any more (every caller cancelled, the operator stopping) is cancelled with the last one."""
    paused = aiotoggles.ToggleSet(any)
    callers = [asyncio.create_task(paused.wait_for(True)) for _ in range(2)]
    await _settle()
    waits = paused.__dict__["_fgentic_waits"]
    callers[0].cancel()
    await _settle()
    assert not waits[True].done()  # one caller still waits
    callers[1].cancel()
    await _settle()
    assert waits[True].cancelled()
    assert not [t for t in asyncio.all_tasks() if "ToggleSet.wait_for" in repr(t)]
    # A new caller starts a new wait, which still ends when the state comes.
    again = asyncio.create_task(paused.wait_for(True))
    await _settle()
    await paused.make_toggle(True, name="on")
    await asyncio.wait_for(again, 10)
