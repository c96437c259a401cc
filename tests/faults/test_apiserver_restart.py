"""kube-apiserver restarted under a running operator (same port, same etcd).

A control plane of this test alone is used; the session one is untouched. After the restart
the operator's watches must resume: objects created (or changed) afterwards are reconciled.
"""

from __future__ import annotations

import pytest

from fgentic_devenv.controlplane import LocalControlPlane
from fgentic_governance.memory import MemoryStore
from tests.support.faults import (
    Cluster,
    Operator,
    assert_fenced,
    enabled_scope,
    new_namespace,
    new_principal,
    record_of,
)
from tests.support.kube import phase
from tests.support.objects import scope_obj

pytestmark = pytest.mark.integration


async def test_operator_resumes_its_watches_after_an_apiserver_restart(
    own_control_plane: LocalControlPlane, own_cluster: Cluster, own_plane_operator: Operator,
    store: MemoryStore,
) -> None:
    ns = new_namespace("fault-apiserver")
    own_control_plane.ensure_namespace(ns)
    alice, bob = new_principal(), new_principal()
    before = scope_obj(ns, "before", alice)
    consent, g1 = await enabled_scope(own_cluster, store, before, alice, 2)

    operator = own_plane_operator
    own_control_plane.restart_apiserver()
    assert operator.proc is not None and operator.proc.poll() is None

    # A change to an object from before the restart is seen ...
    own_cluster.withdraw(consent)
    status = (await own_cluster.until(
        "memoryscopes", ns, "before",
        lambda s: phase("Disabled", "CONSENT_WITHDRAWN")(s)
        and s.get("lastErasure", {}).get("result") == "Verified"))["status"]
    assert status["consentGeneration"] > g1
    await assert_fenced(store, before, g1)
    # ... and so are objects created after it: a new scope and grant reach Enabled ...
    after = scope_obj(ns, "after", bob)
    _, generation = await enabled_scope(own_cluster, store, after, bob, 1)
    assert (await store.scope_state(record_of(after).scope_key)).enabled
    # ... and a new offboarding (cluster-scoped) completes and verifies.
    name = own_cluster.offboard(bob)
    status = await own_cluster.until_offboarded(name, phase("ReadyForDeactivation", "OK"))
    assert (status["scopesFound"], status["scopesErased"], status["scopesFailed"]) == (1, 1, 0)
    await assert_fenced(store, after, generation)
    assert operator.proc.poll() is None, "the operator exited"
