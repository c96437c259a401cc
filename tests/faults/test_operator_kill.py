"""SIGKILL the real operator at each step of consent withdrawal and of offboarding, restart it,
and check that the flow completes, the erasure verifies, and nothing is lost or recreated.

The operator kills itself at a named fault point (``FGENTIC_FAULT_KILL_AT``, see
``fgentic_governance.faults``); the mid-delete crash inside the store is produced from outside
(a row lock holds the DELETE, then the process is killed). Real kube-apiserver, real PostgreSQL.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import asyncpg
import pytest

from fgentic_governance.faults import STEPS
from fgentic_governance.memory import Access, MemoryStore, StoreRefusal
from tests.support.faults import (
    Cluster,
    Operator,
    assert_fenced,
    assert_status_content_free,
    enabled_condition,
    enabled_scope,
    new_principal,
    record_of,
)
from tests.support.kube import phase
from tests.support.objects import consent_obj, scope_obj
from tests.support.polling import until_async

pytestmark = pytest.mark.integration
WITHDRAW_STEPS = sorted(s for s in STEPS if s.startswith("withdraw."))
OFFBOARD_STEPS = sorted(s for s in STEPS if s.startswith("offboard."))
# (scopes disabled, scopes erased) in the store at the moment of the kill, of three.
OFFBOARD_CRASH_STATE = {
    "offboard.after_enumerate": (0, 0),
    "offboard.after_disable": (1, 0),
    "offboard.after_disable_all": (3, 0),
    "offboard.after_erase": (3, 1),
    "offboard.before_record": (3, 3),
}


def test_every_step_is_covered() -> None:
    assert set(WITHDRAW_STEPS) | set(OFFBOARD_CRASH_STATE) | {"grant.after_store"} == STEPS


async def _withdrawn_and_verified(cluster: Cluster, store: MemoryStore, op: Operator,
                                  scope: dict[str, Any], consent: dict[str, Any], *,
                                  g1: int) -> None:
    """After the restart: status, store and consent receipt agree that the erasure is done,
    and it stays done."""
    ns, name = scope["metadata"]["namespace"], scope["metadata"]["name"]
    key = record_of(scope).scope_key
    withdrawn = phase("Disabled", "CONSENT_WITHDRAWN")
    obj = await cluster.until("memoryscopes", ns, name, lambda s: withdrawn(s) and s.get(
        "lastErasure", {}).get("result") == "Verified")
    status = obj["status"]
    assert enabled_condition(status) == "False"
    assert status["entryCount"] == 0 and status["consentGeneration"] > g1
    state = await store.scope_state(key)
    assert not state.enabled and state.entry_count == 0
    assert state.consent_generation == status["consentGeneration"]
    # The withdrawal is recorded on the ConsentRecord that caused it.
    receipt = (await cluster.until(
        "consentrecords", ns, consent["metadata"]["name"],
        lambda s: s.get("receipt", {}).get("generation", 0) > g1))["status"]["receipt"]
    assert receipt["result"] == "Applied" and receipt["reasonCode"] == "CONSENT_WITHDRAWN"
    assert receipt["generation"] > g1
    # A few more resync rounds (1 s each) of the restarted operator re-enable nothing.
    await asyncio.sleep(3)
    assert op.proc is not None and op.proc.poll() is None, "restarted operator died"
    again = (await asyncio.to_thread(cluster.get, "memoryscopes", ns, name))["status"]
    assert (again["phase"], again["reasonCode"]) == ("Disabled", "CONSENT_WITHDRAWN")
    await assert_fenced(store, scope, g1)
    assert_status_content_free(again, scope["spec"]["subject"]["mxid"])


@pytest.mark.parametrize("step", WITHDRAW_STEPS)
async def test_kill_during_withdrawal_then_restart(
    step: str, namespaced_operator: tuple[Operator, str], cluster: Cluster, store: MemoryStore
) -> None:
    op, ns = namespaced_operator
    op.start(kill_at=step)
    scope = scope_obj(ns, "withdrawn", new_principal())
    key = record_of(scope).scope_key
    consent, g1 = await enabled_scope(cluster, store, scope, scope["spec"]["subject"]["mxid"], 3)
    cluster.withdraw(consent)
    op.wait_killed()
    # Where exactly the process died, read from the store's durable record.
    state = await store.scope_state(key)
    if step == "withdraw.before_fence":
        assert (state.enabled, state.consent_generation, state.entry_count) == (True, g1, 3)
    else:  # Fenced; deleted after the fence; verified after the delete; nothing recorded.
        left = 3 if step == "withdraw.after_fence" else 0
        assert not state.enabled and state.consent_generation > g1
        assert state.entry_count == left
        if left:
            await assert_fenced_only(store, scope, g1)  # Fenced although not yet erased.
        status = (await asyncio.to_thread(cluster.get, "memoryscopes", ns, "withdrawn"))["status"]
        assert status["phase"] == "Enabled"  # The status write died with the process.
    op.start()
    await _withdrawn_and_verified(cluster, store, op, scope, consent, g1=g1)


async def test_kill_after_grant_then_restart(
    namespaced_operator: tuple[Operator, str], cluster: Cluster, store: MemoryStore
) -> None:
    """The store enabled the scope, then the operator died before status and receipt: the
    restart records the grant (status and receipt) without granting a second time."""
    op, ns = namespaced_operator
    op.start(kill_at="grant.after_store")
    scope = scope_obj(ns, "granted", new_principal())
    key = record_of(scope).scope_key
    cluster.create("memoryscopes", scope)
    consent = cluster.create("consentrecords", consent_obj(
        ns, "granted", scope["spec"]["subject"]["mxid"]))
    op.wait_killed()
    state = await store.scope_state(key)
    assert state.enabled and state.entry_count == 0
    granted_at = state.consent_generation
    status = (await asyncio.to_thread(cluster.get, "memoryscopes", ns, "granted")).get(
        "status", {})
    assert status.get("phase") != "Enabled"  # The status write died with the process.
    name = consent["metadata"]["name"]
    assert "receipt" not in (await asyncio.to_thread(
        cluster.get, "consentrecords", ns, name)).get("status", {})
    op.start()
    status = (await cluster.until("memoryscopes", ns, "granted", phase("Enabled", "OK")))[
        "status"]
    assert status["consentGeneration"] == granted_at  # Recorded, not granted again.
    receipt = (await cluster.until("consentrecords", ns, name,
                                   lambda s: "receipt" in s))["status"]["receipt"]
    assert (receipt["result"], receipt["reasonCode"], receipt["generation"]) == (
        "Applied", "OK", granted_at)
    await asyncio.sleep(3)  # More resync rounds grant nothing more.
    state = await store.scope_state(key)
    assert (state.enabled, state.consent_generation) == (True, granted_at)
    await store.save(Access.for_scope(record_of(scope), granted_at), "after the restart")
    assert await store.entry_count(key) == 1


async def test_kill_mid_delete_then_restart(
    namespaced_operator: tuple[Operator, str], cluster: Cluster, store: MemoryStore,
    pg_dsn: str,
) -> None:
    """The crash inside the store's erasure: fence committed, DELETE not. A row lock held by
    the test parks the operator's DELETE; the process is then SIGKILLed and its backend
    terminated (the DELETE rolls back), so the rows are still there, behind the fence."""
    op, ns = namespaced_operator
    op.start()
    scope = scope_obj(ns, "mid-delete", new_principal())
    key = record_of(scope).scope_key
    consent, g1 = await enabled_scope(cluster, store, scope, scope["spec"]["subject"]["mxid"], 3)
    blocker = await asyncpg.connect(pg_dsn)
    try:
        tx = blocker.transaction()
        await tx.start()
        await blocker.fetch("SELECT 1 FROM fgentic_memory.memory WHERE scope_key = $1"
                            " FOR UPDATE", key)
        cluster.withdraw(consent)
        backend = await _waiting_delete(blocker)
        op.kill()
        assert await blocker.fetchval("SELECT pg_terminate_backend($1, 30000)", backend)
        await tx.rollback()
    finally:
        await blocker.close()
    state = await store.scope_state(key)
    assert not state.enabled and state.consent_generation > g1 and state.entry_count == 3
    await assert_fenced_only(store, scope, g1)  # Fenced although not yet erased.
    op.start()
    await _withdrawn_and_verified(cluster, store, op, scope, consent, g1=g1)


async def _waiting_delete(conn: asyncpg.Connection, timeout: float = 60) -> int:
    """The pid of the backend whose erasure DELETE waits on our row lock."""

    async def waiting() -> int | None:
        await conn.execute("SELECT pg_stat_clear_snapshot()")  # We are inside a transaction.
        pid: int | None = await conn.fetchval(
            "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
            " AND query LIKE 'DELETE FROM fgentic_memory.memory%' AND datname = current_database()")
        return pid

    return int(await until_async(waiting, "the operator's erasure DELETE at the row lock",
                                 timeout))


async def assert_fenced_only(store: MemoryStore, scope: dict[str, Any], g1: int) -> None:
    """Before the erasure finished, a save at the old generation is already refused."""
    with pytest.raises(StoreRefusal):
        await store.save(Access.for_scope(record_of(scope), g1), "late save")


# -- offboarding ---------------------------------------------------------------------------


async def _store_only_scope(store: MemoryStore, mxid: str, facts: int) -> dict[str, Any]:
    """A scope the store knows but no CR names (its CR was lost)."""
    scope = scope_obj(f"gone-{uuid.uuid4().hex[:6]}", "orphan", mxid, agent="old-agent")
    record = record_of(scope)
    await store.ensure_scope(record)
    generation = await store.grant(record.scope_key)
    for i in range(facts):
        await store.save(Access.for_scope(record, generation), f"orphan fact {i}")
    return scope


@pytest.mark.parametrize("erasure_process", [False, True], ids=["lane-thread",
                                                                 "erasure-process"])
@pytest.mark.parametrize("step", OFFBOARD_STEPS)
async def test_kill_during_offboarding_then_restart(
    step: str, erasure_process: bool, clusterwide_operator: tuple[Operator, str, str],
    cluster: Cluster, store: MemoryStore,
) -> None:
    """In the erasure process (--erasure-process) the armed point kills the operator first
    (faults.kill_with): the same crash, the same state."""
    op, ns, alice = clusterwide_operator
    if erasure_process:
        op.args.append("--erasure-process")
    # No scope timer before the crash: only the offboarding flow touches the store, so the
    # crash state is exactly the fault point's.
    op.start(kill_at=step, resync=3600)
    bob = new_principal()
    scopes = [scope_obj(ns, "alice-a", alice, "agent-a"), scope_obj(ns, "alice-b", alice,
                                                                    "agent-b")]
    generations = [(await enabled_scope(cluster, store, s, alice, 2))[1] for s in scopes]
    bob_scope = scope_obj(ns, "bob-a", bob, "agent-a")
    await enabled_scope(cluster, store, bob_scope, bob, 2)
    orphan = await _store_only_scope(store, alice, 2)
    scopes.append(orphan)
    generations.append((await store.scope_state(record_of(orphan).scope_key)).consent_generation)
    order = sorted(range(3), key=lambda i: record_of(scopes[i]).scope_key)  # The flow's order.

    name = cluster.offboard(alice)
    op.wait_killed()
    states = [await store.scope_state(record_of(scopes[i]).scope_key) for i in order]
    disabled, erased = OFFBOARD_CRASH_STATE[step]
    assert [not s.enabled for s in states] == [i < disabled for i in range(3)], step
    assert [s.entry_count == 0 for s in states] == [i < erased for i in range(3)], step
    assert cluster.offboarding_status(name).get("phase") != "ReadyForDeactivation"

    op.start()
    status = await cluster.until_offboarded(name, phase("ReadyForDeactivation", "OK"))
    assert (status["scopesFound"], status["scopesErased"], status["scopesFailed"]) == (3, 3, 0)
    assert sorted(f"{r['namespace']}/{r['scope']}" for r in status["results"]) == sorted(
        record_of(s).scope_key for s in scopes)
    assert all(r["result"] == "Verified" and r["reasonCode"] == "OK" for r in status["results"])
    assert alice not in str(status)
    for scope in scopes[:2]:  # The CRs follow, and stay disabled while the offboarding stands.
        await cluster.until("memoryscopes", ns, scope["metadata"]["name"],
                            phase("Disabled", "OFFBOARDING_IN_PROGRESS"))
    await asyncio.sleep(3)  # More resync rounds re-enable and recreate nothing.
    assert op.proc is not None and op.proc.poll() is None, "restarted operator died"
    for scope, generation in zip(scopes, generations, strict=True):
        state = await store.scope_state(record_of(scope).scope_key)
        assert not state.enabled and state.entry_count == 0
        await assert_fenced(store, scope, generation)
    bob_state = await store.scope_state(record_of(bob_scope).scope_key)
    assert bob_state.enabled and bob_state.entry_count == 2  # Another principal: untouched.
