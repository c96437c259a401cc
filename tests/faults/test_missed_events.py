"""Missed events (the Sieve pattern): changes made while the operator is down are acted on
after it comes back.

The operator keeps Kopf's diff base in memory (``controller/handlers/diffbase.py``), not in an
annotation, so after a restart it has no record of what it handled before: every object must be
reconciled again from its current state. Real kube-apiserver, real PostgreSQL, the real
operator process, SIGKILLed.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from fgentic_governance.controller.handlers.memoryscope import POKE
from fgentic_governance.memory import MemoryStore
from tests.support.faults import (
    Cluster,
    Operator,
    assert_fenced,
    enabled_scope,
    new_principal,
    record_of,
)
from tests.support.kube import phase
from tests.support.objects import consent_obj, scope_obj

pytestmark = pytest.mark.integration
KOPF_ANNOTATION_PREFIX = "kopf.zalando.org/"


def _poke(obj: dict[str, Any]) -> str | None:
    annotations: dict[str, str] = obj["metadata"].get("annotations") or {}
    return annotations.get(POKE)


async def test_changes_made_while_the_operator_is_down_are_reconciled(
    namespaced_operator: tuple[Operator, str], cluster: Cluster, store: MemoryStore
) -> None:
    op, ns = namespaced_operator
    op.start()
    withdrawn = scope_obj(ns, "withdrawn", new_principal())
    consent, g1 = await enabled_scope(cluster, store, withdrawn,
                                      withdrawn["spec"]["subject"]["mxid"], 2)
    steady = scope_obj(ns, "steady", new_principal())
    _, g_steady = await enabled_scope(cluster, store, steady,
                                      steady["spec"]["subject"]["mxid"], 1)
    # A consent its scope has already read does not poke it (30843a5): there may be no poke.
    poked = _poke(await asyncio.to_thread(cluster.get, "memoryscopes", ns, "steady"))
    # No diff base, no progress left on the object: nothing for the next process to trust.
    meta = (await asyncio.to_thread(cluster.get, "memoryscopes", ns, "withdrawn"))["metadata"]
    assert not [k for k in meta.get("annotations") or {} if k.startswith(KOPF_ANNOTATION_PREFIX)]
    op.kill()
    # While it is down: a withdrawal, and a new scope with its consent.
    cluster.withdraw(consent)
    fresh = scope_obj(ns, "fresh", new_principal())
    cluster.create("memoryscopes", fresh)
    cluster.create("consentrecords", consent_obj(ns, "fresh", fresh["spec"]["subject"]["mxid"]))
    await asyncio.sleep(2)  # Nothing acts on them meanwhile.
    state = await store.scope_state(record_of(withdrawn).scope_key)
    assert (state.enabled, state.entry_count) == (True, 2)
    op.start(resync=3600)  # No timer to rescue a missed change: the restart alone must.
    status = (await cluster.until("memoryscopes", ns, "withdrawn", lambda s: phase(
        "Disabled", "CONSENT_WITHDRAWN")(s) and s.get("lastErasure", {}).get(
        "result") == "Verified"))["status"]
    assert status["entryCount"] == 0 and status["consentGeneration"] > g1
    await assert_fenced(store, withdrawn, g1)
    status = (await cluster.until("memoryscopes", ns, "fresh", phase("Enabled", "OK")))["status"]
    state = await store.scope_state(record_of(fresh).scope_key)
    assert state.enabled and state.consent_generation == status["consentGeneration"]
    # The unchanged pair: reconciled from the index at start-up, not poked, not re-granted.
    obj = await asyncio.to_thread(cluster.get, "memoryscopes", ns, "steady")
    assert _poke(obj) == poked
    assert (obj["status"]["phase"], obj["status"]["consentGeneration"]) == ("Enabled", g_steady)


async def test_start_with_more_objects_than_a_worker_batch(
    namespaced_operator: tuple[Operator, str], cluster: Cluster
) -> None:
    """Regression: with a Kopf worker limit (32), an operator starting on more existing
    objects than the limit deadlocked in index pre-population and handled none of them."""
    op, ns = namespaced_operator
    names = [f"early-{i}" for i in range(40)]
    for name in names:
        cluster.create("memoryscopes", scope_obj(ns, name, new_principal()))
    op.start(resync=3600)
    for name in names:
        status = (await cluster.until("memoryscopes", ns, name,
                                      phase("Disabled", "CONSENT_MISSING")))["status"]
        assert status["observedGeneration"] == 1
