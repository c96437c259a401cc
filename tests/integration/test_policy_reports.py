"""Audit results that last (issue 27): existing kagent Agents' findings as PolicyReports, one
per namespace, updated in place, content-free, written by the one webhook replica that holds
the audit Lease (two replicas run here; an expired holder's Lease is taken over)."""

from __future__ import annotations

import datetime as dt
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.support import processes
from tests.support.objects import example
from tests.support.polling import until

pytestmark = pytest.mark.integration
CRD = Path(__file__).parents[1] / "support" / "crds" / "policyreports.yaml"
SENTINEL = "SENTINEL-report-9c1"


def _agent(ns: str, name: str, headers: list[str]) -> dict[str, Any]:
    agent = example("Agent")
    agent["metadata"] = {"name": name, "namespace": ns}
    declarative = agent["spec"]["declarative"]
    declarative.pop("memory", None)
    declarative["systemMessage"] = SENTINEL
    declarative["tools"][0]["mcpServer"]["allowedHeaders"] = headers
    return agent


# The API answers 404 until the report is written; the log exists once the webhook started.
TRANSIENT = (ApiException, OSError)


def test_one_replica_writes_policy_reports_in_place(
        control_plane: Any, k8s_client: client.ApiClient, tmp_path: Path) -> None:
    control_plane.install_crds([CRD])
    ns = f"reports-{uuid.uuid4().hex[:6]}"
    home = f"fgentic-{uuid.uuid4().hex[:6]}"
    for name in (ns, home):
        control_plane.ensure_namespace(name)
    custom = client.CustomObjectsApi(k8s_client)
    coordination = client.CoordinationV1Api(k8s_client)
    # A holder that stopped renewing an hour ago: a live replica takes the Lease over.
    stale = dt.datetime.now(dt.UTC) - dt.timedelta(hours=1)
    coordination.create_namespaced_lease(home, client.V1Lease(
        metadata=client.V1ObjectMeta(name="audit"),
        spec=client.V1LeaseSpec(holder_identity="ghost", lease_duration_seconds=30,
                                acquire_time=stale, renew_time=stale)))
    # Agents that predate the policy (no webhook is registered for this namespace).
    agents = ("kagent.dev", "v1alpha2", ns, "agents")
    custom.create_namespaced_custom_object(*agents, _agent(ns, "leaky", ["Cookie"]))
    custom.create_namespaced_custom_object(*agents, _agent(ns, "fine", []))
    replicas = []
    try:
        for identity in ("replica-a", "replica-b"):
            work = tmp_path / identity
            work.mkdir()
            replicas.append(processes.spawn_webhook(
                control_plane.kubeconfig, work, audit_interval=1,
                extra=["--audit-lease", f"{home}/audit", "--identity", identity])[0])

        def report() -> dict[str, Any] | None:
            found: dict[str, Any] = custom.get_namespaced_custom_object(
                "wgpolicyk8s.io", "v1alpha2", ns, "policyreports", "fgentic-governance-audit")
            return found if found.get("summary", {}).get("fail") == 1 else None

        written = until(report, "the PolicyReport", 40, interval=0.3, tolerate=TRANSIENT)
        assert written["summary"] == {"pass": 1, "fail": 1, "warn": 0, "error": 0, "skip": 0}
        failed = [r for r in written["results"] if r["result"] == "fail"]
        assert [(r["rule"], r["resources"][0]["name"]) for r in failed] == [
            ("FORBIDDEN_HEADER", "leaky")]
        assert failed[0]["message"].startswith("FORBIDDEN_HEADER at spec.declarative.tools[0]")
        assert failed[0]["resources"][0]["uid"]
        assert SENTINEL not in str(written)
        holder = coordination.read_namespaced_lease("audit", home).spec.holder_identity
        assert holder in ("replica-a", "replica-b")
        # Unchanged findings are not rewritten; fixed ones are, in place.
        version = written["metadata"]["resourceVersion"]
        time.sleep(3)
        assert report()["metadata"]["resourceVersion"] == version  # type: ignore[index]
        custom.patch_namespaced_custom_object(*agents, "leaky", {"spec": {"declarative": {
            "tools": [{**_agent(ns, "x", [])["spec"]["declarative"]["tools"][0]}]}}})

        def clean() -> dict[str, Any] | None:
            found: dict[str, Any] = custom.get_namespaced_custom_object(
                "wgpolicyk8s.io", "v1alpha2", ns, "policyreports", "fgentic-governance-audit")
            return found if found["summary"]["fail"] == 0 else None

        fixed = until(clean, "the fixed report", 40, interval=0.3, tolerate=TRANSIENT)
        assert fixed["summary"]["pass"] == 2 and fixed["metadata"]["uid"] == written[
            "metadata"]["uid"]
        # One writer: a single PolicyViolation event, not one per replica.
        events = client.CoreV1Api(k8s_client).list_namespaced_event(
            ns, field_selector="involvedObject.name=leaky").items
        violations = [e for e in events if e.reason == "PolicyViolation"]
        assert len(violations) == 1 and violations[0].involved_object.uid
        assert SENTINEL not in violations[0].message
    finally:
        for proc in replicas:
            processes.stop(proc)


def test_a_policyreport_crd_installed_after_start_is_noticed_and_its_removal_too(
        control_plane: Any, k8s_client: client.ApiClient, tmp_path: Path) -> None:
    """Issue 37 item 5: the webhook started without the CRD; the CRD installed later (then
    removed and installed again) is noticed within a few audit intervals, without a restart."""
    interval = 1
    control_plane.kubectl("delete", "--ignore-not-found", "--wait", "-f", str(CRD))
    ns = f"late-crd-{uuid.uuid4().hex[:6]}"
    control_plane.ensure_namespace(ns)
    custom = client.CustomObjectsApi(k8s_client)
    custom.create_namespaced_custom_object("kagent.dev", "v1alpha2", ns, "agents",
                                           _agent(ns, "leaky", ["Cookie"]))
    log = tmp_path / "webhook.log"
    webhook = processes.spawn_webhook(control_plane.kubeconfig, tmp_path,
                                      audit_interval=interval)[0]

    def report() -> dict[str, Any]:
        found: dict[str, Any] = custom.get_namespaced_custom_object(
            "wgpolicyk8s.io", "v1alpha2", ns, "policyreports", "fgentic-governance-audit")
        return found

    # Far more than one interval, far less than forever: the audit interval is 1 s.
    bound = 20 * interval
    try:
        until(lambda: "no PolicyReport CRD" in log.read_text(), "the audit to find no CRD",
              bound, interval=0.3, tolerate=TRANSIENT)
        control_plane.install_crds([CRD])
        assert until(report, "the PolicyReport after the CRD was installed", bound,
                     interval=0.3, tolerate=TRANSIENT)["summary"]["fail"] == 1
        # Removed: said once in the log, and nothing fails meanwhile.
        control_plane.kubectl("delete", "--wait", "-f", str(CRD))
        until(lambda: log.read_text().count("no PolicyReport CRD") == 2,
              "the audit to notice the CRD's removal", bound, interval=0.3, tolerate=TRANSIENT)
        control_plane.install_crds([CRD])
        assert until(report, "the PolicyReport after the CRD came back", bound,
                     interval=0.3, tolerate=TRANSIENT)["summary"]["fail"] == 1
        assert webhook.poll() is None
    finally:
        processes.stop(webhook)
        control_plane.install_crds([CRD])  # As the other test of this file expects it.
