"""PostgreSQL stopped mid-flow, then started again on the same data dir and port.

Each test has its own PostgreSQL (the session one is untouched). While the store is down no
MemoryScope may report Enabled: it reports STORE_UNAVAILABLE. When the store returns, the
operator converges on the right state without losing or recreating anything.
"""

from __future__ import annotations

import asyncio

import pytest

from fgentic_devenv.postgres import LocalPostgres
from fgentic_governance.memory import Access, MemoryStore
from tests.support.faults import (
    Cluster,
    Operator,
    assert_fenced,
    condition_status,
    enabled_condition,
    enabled_scope,
    record_of,
)
from tests.support.kube import phase
from tests.support.objects import scope_obj

pytestmark = pytest.mark.integration


def _unavailable(status: dict[str, object]) -> bool:
    return (status.get("reasonCode") == "STORE_UNAVAILABLE" and status.get("phase") != "Enabled"
            and enabled_condition(dict(status)) == "False"
            and condition_status(dict(status), "StoreReady") == "False")


async def test_outage_fails_closed_and_recovers_the_grant(
    own_store_operator: tuple[Operator, str, str], cluster: Cluster, own_store: MemoryStore,
    own_postgres: LocalPostgres,
) -> None:
    _, ns, alice = own_store_operator
    scope = scope_obj(ns, "granted", alice)
    key = record_of(scope).scope_key
    _, g1 = await enabled_scope(cluster, own_store, scope, alice, 2)
    own_postgres.stop_server()
    status = (await cluster.until("memoryscopes", ns, "granted", _unavailable))["status"]
    assert status["phase"] == "Failed"  # Not "Disabled": the store may still say enabled.
    own_postgres.start_server()
    status = (await cluster.until("memoryscopes", ns, "granted", phase("Enabled", "OK")))[
        "status"]
    assert condition_status(status, "StoreReady") == "True"
    # Nothing lost, nothing re-granted: the same generation, the same two facts.
    assert status["consentGeneration"] == g1
    assert (await cluster.until("memoryscopes", ns, "granted",
                                lambda s: s.get("entryCount") == 2))["status"]["phase"] == "Enabled"
    state = await own_store.scope_state(key)
    assert (state.enabled, state.consent_generation, state.entry_count) == (True, g1, 2)
    await own_store.save(Access.for_scope(record_of(scope), g1), "after the outage")
    assert await own_store.entry_count(key) == 3


async def test_withdrawal_during_outage_completes_when_the_store_returns(
    own_store_operator: tuple[Operator, str, str], cluster: Cluster, own_store: MemoryStore,
    own_postgres: LocalPostgres,
) -> None:
    _, ns, alice = own_store_operator
    scope = scope_obj(ns, "withdrawn", alice)
    key = record_of(scope).scope_key
    consent, g1 = await enabled_scope(cluster, own_store, scope, alice, 3)
    own_postgres.stop_server()
    cluster.withdraw(consent)
    await cluster.until("memoryscopes", ns, "withdrawn", _unavailable)
    own_postgres.start_server()
    status = (await cluster.until(
        "memoryscopes", ns, "withdrawn",
        lambda s: phase("Disabled", "CONSENT_WITHDRAWN")(s)
        and s.get("lastErasure", {}).get("result") == "Verified"))["status"]
    assert status["entryCount"] == 0 and status["consentGeneration"] > g1
    state = await own_store.scope_state(key)
    assert not state.enabled and state.entry_count == 0
    receipt = (await cluster.until(
        "consentrecords", ns, consent["metadata"]["name"],
        lambda s: s.get("receipt", {}).get("generation", 0) > g1))["status"]["receipt"]
    assert (receipt["result"], receipt["reasonCode"]) == ("Applied", "CONSENT_WITHDRAWN")
    await asyncio.sleep(3)  # More resync rounds re-enable and recreate nothing.
    await assert_fenced(own_store, scope, g1)


async def test_offboarding_during_outage_completes_when_the_store_returns(
    own_store_operator: tuple[Operator, str, str], cluster: Cluster, own_store: MemoryStore,
    own_postgres: LocalPostgres,
) -> None:
    _, ns, alice = own_store_operator
    scope = scope_obj(ns, "offboarded", alice)
    _, g1 = await enabled_scope(cluster, own_store, scope, alice, 2)
    own_postgres.stop_server()
    name = cluster.offboard(alice)
    await cluster.until_offboarded(name, phase("Failed", "STORE_UNAVAILABLE"))
    await cluster.until("memoryscopes", ns, "offboarded", _unavailable)
    own_postgres.start_server()
    status = await cluster.until_offboarded(name, phase("ReadyForDeactivation", "OK"))
    assert (status["scopesFound"], status["scopesErased"], status["scopesFailed"]) == (1, 1, 0)
    await cluster.until("memoryscopes", ns, "offboarded",
                        phase("Disabled", "OFFBOARDING_IN_PROGRESS"))
    await assert_fenced(own_store, scope, g1)
