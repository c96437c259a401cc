"""Durable cost admission and the typed runtime client against a real PostgreSQL."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from typing import Any

import pytest
from prometheus_client import REGISTRY, generate_latest

from fgentic_governance.api.memory import Posture
from fgentic_governance.memory import (
    Access,
    CostGate,
    MemoryStore,
    Operation,
    StoreRefusal,
)
from fgentic_governance.memory.metrics import ADMISSIONS, ADMITTED_UNITS, STORE_OPERATIONS
from fgentic_governance.reasons import Reason
from tests.support.memory_client import MemoryClient
from tests.support.store import ALICE, ROOM, enabled, scope_record

pytestmark = pytest.mark.integration


@pytest.fixture
def gate(runtime_pool: Any) -> CostGate:
    return CostGate(runtime_pool)


async def reason_of(coro: Any) -> Reason:
    with pytest.raises(StoreRefusal) as info:
        await coro
    return info.value.reason


async def test_explicit_operations_burst_three_then_rate_limited(
    store: MemoryStore, gate: CostGate, pool: Any
) -> None:
    access = await enabled(store)
    for _ in range(3):
        await gate.admit(access, {Operation.LOAD: 1}, explicit=True)
    assert await reason_of(gate.admit(access, {Operation.SAVE: 1}, explicit=True)) is (
        Reason.RATE_LIMITED)
    # Automatic work is bounded by the hourly ceiling, not the explicit bucket.
    await gate.admit(access, {Operation.SUMMARIZE: 1, Operation.EMBEDDING: 2})
    async with pool.acquire() as conn:
        # The refused explicit save consumed nothing: 3 loads + 1 summary + 2 embeddings.
        assert await conn.fetchval(
            "SELECT sum(units) FROM fgentic_memory.op_ledger WHERE scope_key = $1",
            access.scope_key) == 6
        # Ten seconds later one token (6 per minute) has been refilled, and only one.
        await conn.execute("UPDATE fgentic_memory.rate_bucket"
                           " SET refreshed_at = refreshed_at - interval '10 seconds'")
    await gate.admit(access, {Operation.LOAD: 1}, explicit=True)
    assert await reason_of(gate.admit(access, {Operation.LOAD: 1}, explicit=True)) is (
        Reason.RATE_LIMITED)


async def test_bucket_is_per_sender_and_agent(store: MemoryStore, gate: CostGate) -> None:
    first = await enabled(store)
    # Same sender and Agent from a second control room shares the bucket...
    second = await enabled(store, scope_record("team-a/alice-b", control_room="!b:example.org"))
    # ...another Agent does not.
    other = await enabled(store, scope_record("team-a/alice-o", agent_name="other",
                                              control_room="!o:example.org"))
    for access in (first, second, first):
        await gate.admit(access, {Operation.LOAD: 1}, explicit=True)
    assert await reason_of(gate.admit(second, {Operation.LOAD: 1}, explicit=True)) is (
        Reason.RATE_LIMITED)
    await gate.admit(other, {Operation.LOAD: 1}, explicit=True)


async def test_hourly_ceiling_is_a_sliding_window(store: MemoryStore, gate: CostGate,
                                                  pool: Any) -> None:
    access = await enabled(store, scope_record(hourly_operation_ceiling=5))
    assert await gate.admit(access, {Operation.SAVE: 1, Operation.EMBEDDING: 1}) == 3
    assert await gate.admit(access, {Operation.SAVE: 1, Operation.EMBEDDING: 1}) == 1
    # All items of one request are admitted together or not at all.
    assert await reason_of(gate.admit(access, {Operation.SAVE: 1, Operation.EMBEDDING: 1})) is (
        Reason.COST_CEILING_REACHED)
    assert await gate.admit(access, {Operation.PREFETCH: 1}) == 0
    assert await reason_of(gate.admit(access, {Operation.LOAD: 1})) is (
        Reason.COST_CEILING_REACHED)
    async with pool.acquire() as conn:
        # 59 minutes later the window still holds every unit...
        await conn.execute("UPDATE fgentic_memory.op_ledger SET at = at - interval '59 minutes'")
    assert await reason_of(gate.admit(access, {Operation.LOAD: 1})) is (
        Reason.COST_CEILING_REACHED)
    async with pool.acquire() as conn:
        # ...and once they are an hour old they no longer count.
        await conn.execute("UPDATE fgentic_memory.op_ledger SET at = at - interval '2 minutes'")
    assert await gate.admit(access, {Operation.LOAD: 1}) == 4


async def test_ceiling_holds_under_concurrency(store: MemoryStore, gate: CostGate,
                                               pool: Any) -> None:
    access = await enabled(store, scope_record(hourly_operation_ceiling=10))

    async def attempt() -> Reason:
        try:
            await gate.admit(access, {Operation.EMBEDDING: 1})
        except StoreRefusal as exc:
            return exc.reason
        return Reason.OK

    outcomes = await asyncio.gather(*(attempt() for _ in range(20)))
    assert outcomes.count(Reason.OK) == 10
    assert outcomes.count(Reason.COST_CEILING_REACHED) == 10
    async with pool.acquire() as conn:
        assert await conn.fetchval("SELECT sum(units) FROM fgentic_memory.op_ledger") == 10


async def test_admission_is_fenced_like_every_operation(store: MemoryStore,
                                                        gate: CostGate) -> None:
    record = scope_record()
    await store.ensure_scope(record)
    assert await reason_of(gate.admit(Access.for_scope(record, 0), {Operation.LOAD: 1})) is (
        Reason.SCOPE_DISABLED)
    access = Access.for_scope(record, await store.grant(record.scope_key))
    assert await reason_of(gate.admit(access.at(access.generation - 1),
                                      {Operation.LOAD: 1})) is Reason.STALE_GENERATION
    await store.set_posture(record.scope_key, Posture.CAPTURE_DISABLED)
    assert await reason_of(gate.admit(access, {Operation.SAVE: 1})) is Reason.CAPTURE_DISABLED
    await gate.admit(access, {Operation.LOAD: 1})
    assert await reason_of(gate.admit(access, {})) is Reason.INVALID_SPEC
    assert await reason_of(gate.admit(access, {Operation.LOAD: 61})) is Reason.INVALID_SPEC


class Embedder:
    """A fake embedding provider that records what it was asked to embed."""

    def __init__(self, fail_with: str | None = None) -> None:
        self.calls: list[str] = []
        self.fail_with = fail_with

    async def __call__(self, text: str) -> Sequence[float]:
        self.calls.append(text)
        if self.fail_with is not None:
            raise RuntimeError(f"provider said: could not embed {text!r} {self.fail_with}")
        values = [0.001] * 768
        values[len(text) % 768] = 1.0
        return values


async def test_client_admits_before_embedding(store: MemoryStore, gate: CostGate,
                                              runtime_pool: Any) -> None:
    access = await enabled(store, scope_record(hourly_operation_ceiling=4))
    embedder = Embedder()
    client = MemoryClient(MemoryStore(runtime_pool), gate, access, embedder=embedder)
    entry = await client.save("Alice prefers tea.")  # save + embedding = 2 units
    [hit] = await client.search("What does Alice drink?")  # load + embedding = 2 units
    assert hit.id == entry and hit.score is not None
    assert len(embedder.calls) == 2
    # Over the ceiling: refused before the (paid) embedding call is made.
    assert await reason_of(client.search("Anything else?")) is Reason.COST_CEILING_REACHED
    assert len(embedder.calls) == 2
    # The write policy runs before admission: a refused credential costs nothing.
    assert await reason_of(client.save("password=hunter22")) is Reason.CREDENTIAL_CONTENT
    assert await reason_of(client.search("x" * 513)) is Reason.FACT_TOO_LARGE
    assert len(embedder.calls) == 2
    # Forgetting is never rate limited or metered.
    assert (await client.forget(entry)).verified


async def test_client_carries_its_generation(store: MemoryStore, gate: CostGate,
                                             runtime_pool: Any) -> None:
    access = await enabled(store)
    runtime = MemoryStore(runtime_pool)
    old = MemoryClient(runtime, gate, access, embedder=Embedder())
    await old.save("Alice prefers tea.", explicit=False)
    receipt = await store.withdraw(access.scope_key)
    regrant = await store.grant(access.scope_key)
    assert await reason_of(old.save("Alice prefers coffee.", explicit=False)) is (
        Reason.STALE_GENERATION)
    assert await reason_of(old.list()) is Reason.STALE_GENERATION
    new = MemoryClient(runtime, gate, access.at(regrant), embedder=Embedder())
    assert new.generation == regrant > receipt.generation
    assert await new.list() == []


async def test_provider_failures_and_metrics_are_content_free(
    store: MemoryStore, gate: CostGate, runtime_pool: Any
) -> None:
    sentinel = f"sentinel-{uuid.uuid4().hex}"
    access = await enabled(store)
    client = MemoryClient(MemoryStore(runtime_pool), gate, access,
                          embedder=Embedder(fail_with=sentinel))
    with pytest.raises(StoreRefusal) as info:
        await client.search(f"where is {sentinel}", prefetch=True)
    assert info.value.reason is Reason.STORE_UNAVAILABLE
    assert sentinel not in repr(info.value) and info.value.__context__ is None

    exposition = generate_latest(REGISTRY).decode()
    assert sentinel not in exposition and ALICE not in exposition and ROOM not in exposition
    for counter, labels in ((STORE_OPERATIONS, {"operation", "reason"}),
                            (ADMISSIONS, {"operation", "reason"}),
                            (ADMITTED_UNITS, {"operation"})):
        for metric in counter.collect():
            for sample in metric.samples:
                assert set(sample.labels) == labels
                if "reason" in sample.labels:
                    assert sample.labels["reason"] in Reason.__members__
    operations = {s.labels["operation"] for m in ADMITTED_UNITS.collect() for s in m.samples}
    assert operations <= {op.value for op in Operation}

