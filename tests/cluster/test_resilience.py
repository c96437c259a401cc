"""Fail closed for real: no webhook, no Agent write; an operator pod killed in the middle of an
erasure, and the next pod finishing it."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

import asyncpg

from fgentic_governance.kube.lease import LEASE_SECONDS
from tests.support.cluster import (
    Release,
    access,
    converge,
    entry_count,
    kubectl_result,
    phase_is,
    ready,
    save_facts,
    scope_and_consent,
    scope_status,
)
from tests.support.store import RUNTIME_SETTINGS, defeat_bounds, open_insert

NS = "fgentic-resilience"
AGENT = {"apiVersion": "kagent.dev/v1alpha2", "kind": "Agent",
         "metadata": {"name": "plain-agent", "namespace": NS},
         "spec": {"type": "Declarative", "description": "no memory, no headers",
                  "declarative": {"modelConfig": "default-model-config",
                                  "systemMessage": "You help."}}}


def _ready_count(release: Release, component: str) -> int:
    return len([p for p in release.pods(component) if ready(p)])


def test_with_the_webhook_scaled_to_zero_agent_writes_are_refused(release: Release) -> None:
    cluster = release.cluster
    cluster.kubectl("create", "namespace", NS)
    deployment = f"deployment/{release.name}-webhook"
    cluster.kubectl("scale", "-n", release.namespace, deployment, "--replicas=0")
    converge(lambda: not release.pods("webhook"), "no webhook pod")
    try:
        refused = kubectl_result(cluster, "apply", "-f", "-", input=json.dumps(AGENT))
        assert refused.returncode != 0
        assert "failed calling webhook" in refused.stderr, refused.stderr
        assert "not found" in kubectl_result(
            cluster, "get", "agent", "-n", NS, "plain-agent").stderr
    finally:
        cluster.kubectl("scale", "-n", release.namespace, deployment, "--replicas=2")
        converge(lambda: _ready_count(release, "webhook") == 2, "the webhook back")
    # The same Agent is admitted once a webhook answers again.
    converge(lambda: kubectl_result(cluster,
        "apply", "-f", "-", input=json.dumps(AGENT)).returncode == 0, "the Agent admitted")


class StuckRuntime:
    """A runtime transaction that holds the scope row and has lifted its own bounds (what
    keeps an erasure fence waiting), on its own thread until released."""

    def __init__(self, dsn: str, grant: Any) -> None:
        self._dsn, self._grant = dsn, grant
        self.holding = threading.Event()
        self.release = threading.Event()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)

    def __enter__(self) -> StuckRuntime:
        self._thread.start()
        assert self.holding.wait(30), self.error
        return self

    def __exit__(self, *_: object) -> None:
        self.release.set()
        self._thread.join(30)

    async def _run(self) -> None:
        conn = await asyncpg.connect(self._dsn, server_settings=RUNTIME_SETTINGS)
        try:
            tx = await open_insert(conn, self._grant)
            await defeat_bounds(conn)
            self.holding.set()
            while not self.release.is_set():
                await asyncio.sleep(0.2)
            await tx.rollback()
        except BaseException as exc:
            self.error = exc
            self.holding.set()
        finally:
            await conn.close()


def test_an_operator_pod_killed_mid_erasure_is_replaced_and_the_erasure_completes(
        release: Release, host_dsn: str) -> None:
    cluster = release.cluster
    cluster.kubectl("apply", "-f", "-", input="\n---\n".join(
        json.dumps(o) for o in scope_and_consent(NS, "carol-plain", "carol", "plain-agent")))
    status = converge(lambda: phase_is(cluster, "carol-plain", "Enabled", ns=NS),
                      "carol Enabled")
    grant = access(cluster, "carol-plain", status["consentGeneration"], NS)
    save_facts(host_dsn, grant, ["carol's first fact", "carol's second fact"])
    old = release.pods("operator")[0]["metadata"]["name"]
    with StuckRuntime(host_dsn, grant):
        cluster.kubectl("patch", "consentrecord", "-n", NS, "carol-plain-grant-1",
                        "--type=merge", "-p", '{"spec": {"decision": "withdrawn"}}')
        # The fence cannot get the row: the scope is held, the erasure not done yet.
        converge(lambda: phase_is(cluster, "carol-plain", "Failed", "STORE_LOCK_TIMEOUT",
                                  ns=NS), "the erasure stuck on the runtime's lock")
        assert entry_count(host_dsn, f"{NS}/carol-plain") == 2
        cluster.kubectl("delete", "pod", "-n", release.namespace, old, "--grace-period=0",
                        "--force")
    # The runtime let go; the old pod is gone. The Deployment's new pod finishes the erasure.
    converge(lambda: [p for p in release.pods("operator")
                      if p["metadata"]["name"] != old and ready(p)], "a new operator pod")
    done = converge(lambda: phase_is(cluster, "carol-plain", "Disabled", "CONSENT_WITHDRAWN",
                                     ns=NS), "the erasure finished by the new pod", timeout=180)
    assert done["lastErasure"]["result"] == "Verified"
    assert entry_count(host_dsn, f"{NS}/carol-plain") == 0
    assert scope_status(cluster, "carol-plain", NS)["entryCount"] == 0


def test_deleting_a_namespace_is_never_blocked_while_the_operator_runs(release: Release) -> None:
    cluster = release.cluster
    cluster.kubectl("create", "namespace", "fgentic-short-lived")
    objects = scope_and_consent("fgentic-short-lived", "dave-plain", "dave", "plain-agent")
    cluster.kubectl("apply", "-f", "-", input="\n---\n".join(json.dumps(o) for o in objects))
    converge(lambda: phase_is(cluster, "dave-plain", "Enabled", ns="fgentic-short-lived"),
             "dave Enabled")
    cluster.kubectl("delete", "namespace", "fgentic-short-lived", "--wait=true",
                    "--timeout=120s", timeout=150)
    assert "not found" in kubectl_result(cluster, "get", "namespace",
                                         "fgentic-short-lived").stderr


def _lease_holder(release: Release) -> str:
    lease = release.json("get", "lease", "-n", release.namespace, f"{release.name}-operator")
    return str(lease["spec"].get("holderIdentity") or "")


def test_two_operator_replicas_elect_one_leader_and_hand_over(release: Release) -> None:
    """Issue 27: with operator.replicas 2 one Pod holds the Lease and the other waits, Ready;
    deleting the leader Pod (a drain) passes the Lease to a live replica, which reconciles."""
    cluster = release.cluster
    deployment = f"deployment/{release.name}-operator"
    cluster.kubectl("scale", "-n", release.namespace, deployment, "--replicas=2")
    try:
        converge(lambda: _ready_count(release, "operator") == 2, "two operator pods Ready")
        names = {p["metadata"]["name"] for p in release.pods("operator")}
        leader = converge(lambda: next((n for n in names
                                        if _lease_holder(release).startswith(n + "_")), None),
                          "one of them holding the Lease")
        (standby,) = names - {leader}
        logs = cluster.kubectl("logs", "-n", release.namespace, standby)
        assert "operator standby" in logs and "operator leading" not in logs
        cluster.kubectl("delete", "pod", "-n", release.namespace, leader, "--wait=true",
                        timeout=90)
        # Released at SIGTERM (test_operator_leader.py times that), or, when the old Pod is
        # killed first, expired after 30 s. The standby or the Deployment's replacement Pod,
        # whichever asks first, then leads: a live replica, never the deleted one.
        def new_leader() -> str | None:
            live = {p["metadata"]["name"] for p in release.pods("operator")} - {leader}
            holder = _lease_holder(release)
            return next((n for n in live if holder.startswith(n + "_")), None)

        assert converge(new_leader, "another replica leading",
                        timeout=LEASE_SECONDS + 30, interval=0.5) != leader
        cluster.kubectl("apply", "-f", "-", input="\n---\n".join(json.dumps(o) for o in
                        scope_and_consent(NS, "erin-plain", "erin", "plain-agent")))
        converge(lambda: phase_is(cluster, "erin-plain", "Enabled", ns=NS),
                 "erin Enabled by the new leader")
    finally:
        cluster.kubectl("scale", "-n", release.namespace, deployment, "--replicas=1")
        converge(lambda: _ready_count(release, "operator") == 1
                 and len(release.pods("operator")) == 1, "one operator pod again")
