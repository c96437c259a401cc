"""RBAC as the pods run it, and the webhook's memory measured in its pod.

The flows of the earlier modules ran every component under its own service account; here the
API server is asked, as each account, for every permission its code uses (a ClusterRole that
lacks one fails), the logs must show no refusal, and a webhook that does lose a verb says so
with a bounded code while it refuses (fail closed) instead of swallowing the error."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from tests.support.cluster import PYTHON, Release, converge, kubectl_result, ready

GOV = "governance.fgentic.dev"
# What each component's code calls (handlers, kube.py, controller/retrieval_apply.py; the webhook's
# informers, live lookups and audit; controlapi/cluster_directory.py).
NEEDS: dict[str, list[tuple[str, str]]] = {
    "operator": [
        *[(verb, f"{plural}.{GOV}") for plural in
          ("memoryscopes", "consentrecords", "retrievalbindings", "principaloffboardings",
           "memoryposturefloors")
          for verb in ("get", "list", "watch", "patch")],
        *[("patch", f"{plural}.{GOV}/status") for plural in
          ("memoryscopes", "consentrecords", "retrievalbindings", "principaloffboardings",
           "memoryposturefloors")],
        ("list", "agents.kagent.dev"), ("watch", "agents.kagent.dev"),
        ("get", "remotemcpservers.kagent.dev"),
        *[(verb, kind) for kind in ("networkpolicies.networking.k8s.io",
                                    "agentgatewaypolicies.agentgateway.dev",
                                    "agentgatewaybackends.agentgateway.dev",
                                    "httproutes.gateway.networking.k8s.io", "configmaps")
          for verb in ("get", "list", "create", "patch", "delete")],
        ("list", "customresourcedefinitions.apiextensions.k8s.io"),
        ("list", "namespaces"), ("watch", "namespaces"), ("create", "events"),
    ],
    "webhook": [
        ("list", f"memoryscopes.{GOV}"), ("watch", f"memoryscopes.{GOV}"),
        ("get", f"memoryscopes.{GOV}"),
        ("list", f"retrievalbindings.{GOV}"), ("watch", f"retrievalbindings.{GOV}"),
        ("list", f"principaloffboardings.{GOV}"),
        ("list", "agents.kagent.dev"), ("create", "events"),
    ],
    "control-api": [
        ("get", f"memoryscopes.{GOV}"), ("list", f"memoryscopes.{GOV}"),
        ("get", f"consentrecords.{GOV}"), ("list", f"consentrecords.{GOV}"),
        ("patch", f"consentrecords.{GOV}"), ("patch", f"memoryscopes.{GOV}/status"),
    ],
    "memory-api": [("create", "tokenreviews.authentication.k8s.io"),
                   ("list", "agents.kagent.dev")],
}
REFUSALS = ("403", "Forbidden", "forbidden", "API_STATUS_")
# A log line's own time stamp is not a status: "02:23:12,403 INFO ..." once read as a refusal.
STAMP = re.compile(r"^\[?\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d[,.]\d+\]?\s*")


@pytest.mark.parametrize("component", sorted(NEEDS))
def test_each_service_account_holds_every_permission_its_code_uses(
        release: Release, component: str) -> None:
    account = f"system:serviceaccount:{release.namespace}:{release.name}-{component}"
    missing = []
    for verb, target in NEEDS[component]:
        resource, _, subresource = target.partition("/")
        args = ["auth", "can-i", verb, resource, "--as", account]
        if subresource:
            args += ["--subresource", subresource]
        if kubectl_result(release.cluster, *args).stdout.strip() != "yes":
            missing.append(f"{verb} {target}")
    assert not missing, f"{component} lacks {missing}"


@pytest.mark.parametrize("component", ["operator", "webhook", "control-api", "memory-api"])
def test_no_component_was_refused_by_the_api_server(release: Release, component: str) -> None:
    logs = release.logs(component)
    assert logs.strip(), f"no log from {component}"
    # The memory API's own answers (" action=... status=403") are refusals it gave, not ones
    # it received; a refused TokenReview or Agent list is logged as API_STATUS_<code>.
    lines = [STAMP.sub("", line) for line in logs.splitlines()]
    refused = [line for line in lines if any(r in line for r in REFUSALS)
               and " action=" not in line]
    assert not refused, refused[:5]


def test_a_webhook_without_its_verb_refuses_consent_and_says_why(release: Release) -> None:
    cluster = release.cluster
    role = f"{release.name}-webhook"
    original = json.loads(cluster.kubectl("get", "clusterrole", role, "-o", "json"))
    trimmed = [dict(rule, resources=[r for r in rule["resources"]
                                     if r != "principaloffboardings"])
               for rule in original["rules"]]
    cluster.kubectl("patch", "clusterrole", role, "--type=merge", "-p",
                    json.dumps({"rules": trimmed}))
    consent = {"apiVersion": f"{GOV}/v1alpha1", "kind": "ConsentRecord",
               "metadata": {"name": "rbac-probe", "namespace": "fgentic-demo"},
               "spec": {"scopeRef": {"name": "alice-docs-agent"},
                        "subject": {"mxid": "@alice:fgentic.local",
                                    "originKind": "native-local"},
                        "purpose": "personal-preferences", "policyVersion": "2026-11",
                        "decision": "granted"}}
    try:
        refused = converge(lambda: (r := kubectl_result(
            cluster, "create", "--dry-run=server", "-f", "-", input=json.dumps(consent)))
            .returncode != 0 and r, "the consent refused without the verb", timeout=30)
        assert "POLICY_STATE_UNAVAILABLE" in refused.stderr
        converge(lambda: "API_STATUS_403" in release.logs("webhook"),
                 "the refusal logged with its bounded code", timeout=30)
    finally:
        cluster.kubectl("patch", "clusterrole", role, "--type=merge", "-p",
                        json.dumps({"rules": original["rules"]}))
    converge(lambda: kubectl_result(cluster, "create", "--dry-run=server", "-f", "-",
                                    input=json.dumps(consent)).returncode == 0,
             "consent admitted again with the verb restored", timeout=30)


MEASURE = """
import json
status = dict(line.split(":", 1) for line in open("/proc/1/status").read().splitlines()
              if ":" in line)
kib = lambda key: int(status[key].split()[0])
cgroup = {}
for name in ("memory.usage_in_bytes", "memory.max_usage_in_bytes"):
    try:
        cgroup[name] = int(open("/sys/fs/cgroup/memory/" + name).read())
    except OSError:
        pass
print(json.dumps({"rss_mib": kib("VmRSS") / 1024, "peak_rss_mib": kib("VmHWM") / 1024,
                  **{k: v / 2**20 for k, v in cgroup.items()}}))
"""


def _limit_mib(pod: dict[str, Any]) -> float:
    limit = pod["spec"]["containers"][0]["resources"]["limits"]["memory"]
    assert limit.endswith("Mi"), limit
    return float(limit[:-2])


def test_every_component_stays_well_inside_its_memory_limit_under_reviews(
        release: Release, capsys: pytest.CaptureFixture[str]) -> None:
    """Measured in the pods after a burst of reviews, a 900 KB Agent among them; the chart's
    requests and limits are set from these figures (README, "Install": sizing)."""
    cluster = release.cluster
    cluster.kubectl("create", "namespace", "fgentic-load")
    for i in range(60):
        agent = {"apiVersion": "kagent.dev/v1alpha2", "kind": "Agent",
                 "metadata": {"name": f"load-{i}", "namespace": "fgentic-load"},
                 "spec": {"type": "Declarative", "description": "load",
                          "declarative": {"modelConfig": "m", "systemMessage":
                                          "x" * (900_000 if i == 0 else 200)}}}
        result = kubectl_result(cluster, "create", "-f", "-", input=json.dumps(agent))
        assert result.returncode == 0, result.stderr[-500:]
    figures = []
    for component in ("webhook", "operator", "control-api", "memory-api"):
        for pod in [p for p in release.pods(component) if ready(p)]:
            out = release.kubectl("exec", "-n", release.namespace, pod["metadata"]["name"],
                                  "--", PYTHON, "-c", MEASURE)
            figure = {"component": component, **json.loads(out), "limit_mib": _limit_mib(pod)}
            figures.append(figure)
            assert pod["status"]["containerStatuses"][0]["restartCount"] == 0, figure
    with capsys.disabled():
        print("\nresident memory in the pods after 60 Agent reviews:")
        for f in figures:
            print(f"  {f['component']:12} rss {f['rss_mib']:.0f} MiB, peak "
                  f"{f['peak_rss_mib']:.0f} MiB, limit {f['limit_mib']:.0f} MiB")
    assert len([f for f in figures if f["component"] == "webhook"]) == 2
    for figure in figures:
        # Headroom: the peak resident set stays within 75 % of the limit.
        assert figure["peak_rss_mib"] <= 0.75 * figure["limit_mib"], figure
    cluster.kubectl("delete", "namespace", "fgentic-load", "--wait=false")
