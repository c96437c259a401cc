"""helm install on a real node, then the memory flows through the API server and the chart's
Services: what a platform engineer gets. Tests run in file order and build on each other (the
examples are applied once, then consent, withdrawal and offboarding act on them)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from fgentic_devenv.paths import repo_root
from tests.support.cluster import (
    Release,
    access,
    client_pod,
    converge,
    entry_count,
    kubectl_apply,
    phase_is,
    ready,
    run_pod,
    save_facts,
    scope_and_consent,
    scope_status,
)

EXAMPLES = repo_root() / "examples"
NS = "fgentic-demo"
SCOPE = "alice-docs-agent"
BOT = "@fgentic:fgentic.local"


# -- the install ---------------------------------------------------------------------------------


def test_helm_test_passes_on_the_installed_release(release: Release) -> None:
    """`helm test`: the chart's smoke Pod reaches every component's health and metrics port
    through its Service (the operator's readiness and metrics included) and finds the
    product's metric families."""
    converge(lambda: all(ready(p) for c in ("operator", "webhook", "memory-api")
                         for p in release.pods(c)) or None, "components ready")
    try:
        out = release.helm("test", release.name, "--namespace", release.namespace, "--logs",
                           "--timeout", "6m", timeout=420)
    except RuntimeError as failed:  # say which check failed (the Pod stays when it fails)
        logs = release.kubectl("logs", "-n", release.namespace, f"{release.name}-smoke",
                               timeout=30)
        raise AssertionError(f"{failed}\nsmoke Pod:\n{logs}") from None
    assert "Phase:          Succeeded" in out or "Phase: Succeeded" in out, out
    assert "FAIL " not in out and out.count("ok   ") >= 5, out


@pytest.mark.parametrize(("component", "replicas"),
                         [("operator", 1), ("webhook", 2), ("control-api", 2),
                          ("memory-api", 2)])
def test_every_component_runs_ready_non_root_on_a_read_only_root(
        release: Release, component: str, replicas: int) -> None:
    def all_ready() -> list[dict[str, Any]] | None:
        found = [p for p in release.pods(component) if ready(p)]
        return found if len(found) == replicas else None

    pods = converge(all_ready, f"{replicas} ready {component} pods")
    for pod in pods:
        for status in pod["status"]["containerStatuses"]:
            # The operator crash-looped (no in-cluster configuration); the webhook was
            # OOM-killed under its limit. Neither may restart now.
            assert status["restartCount"] == 0, (component, status.get("lastState"))
        container = pod["spec"]["containers"][0]
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        assert pod["spec"]["securityContext"]["runAsUser"] == 65532


def test_examples_are_admitted_and_the_denied_example_is_refused(
        release: Release, demo_namespace: str) -> None:
    assert demo_namespace == NS  # the examples' namespace (00-namespace.yaml), made for us
    cluster = release.cluster
    for name in ("10-agent.yaml", "20-memoryscope.yaml", "30-retrievalbinding.yaml"):
        result = kubectl_apply(cluster, EXAMPLES / name)
        assert result.returncode == 0, (name, result.stderr)
    denied = kubectl_apply(cluster, EXAMPLES / "denied" / "agent-propagates-authorization.yaml")
    assert denied.returncode != 0
    assert "FORBIDDEN_HEADER" in denied.stderr
    # Without consent the scope is off, gated by the store the operator reaches in-cluster.
    status = converge(lambda: phase_is(cluster, SCOPE, "Disabled", "CONSENT_MISSING", ns=NS),
                      "the scope gated and Disabled")
    assert status["storeSchemaVersion"] >= 1


def test_consent_is_admitted_and_enables_the_scope_against_postgres(
        release: Release, host_dsn: str) -> None:
    cluster = release.cluster
    # The webhook lists PrincipalOffboardings for every consent: with the verb missing from
    # its ClusterRole this was refused POLICY_STATE_UNAVAILABLE and consent never granted.
    result = kubectl_apply(cluster, EXAMPLES / "21-consent.yaml")
    assert result.returncode == 0, result.stderr
    status = converge(lambda: phase_is(cluster, SCOPE, "Enabled", "OK", ns=NS), "the scope Enabled")
    generation = status["consentGeneration"]
    assert generation >= 1
    save_facts(host_dsn, access(cluster, SCOPE, generation, NS), ["likes green tea", "cycles"])
    converge(lambda: scope_status(cluster, SCOPE, NS).get("entryCount") == 2, "entryCount 2",
             timeout=90)


def test_the_control_api_answers_the_bridge_through_its_service(
        release: Release, image: tuple[Path, str], control_token: str) -> None:
    cluster = release.cluster
    ip = cluster.kubectl("get", "svc", "-n", release.namespace, f"{release.name}-control-api",
                         "-o", "jsonpath={.spec.clusterIP}").strip()
    cluster.kubectl("create", "namespace", "matrix")
    script = f"""
import json, time, urllib.error, urllib.request
body = {{"subject": "@alice:fgentic.local",
        "agent": {{"namespace": "{NS}", "name": "docs-agent"}},
        "room": {{"roomId": "!alice-control:fgentic.local", "observedAt": int(time.time()),
                 "roomVersion": "12", "joinRule": "invite", "historyVisibility": "joined",
                 "encrypted": False,
                 "members": [{{"userId": "@alice:fgentic.local", "membership": "join"}},
                             {{"userId": "{BOT}", "membership": "join"}},
                             {{"userId": "@agent-{NS}-docs-agent:fgentic.local",
                              "membership": "join"}}],
                 "serverAcl": {{"allow": ["fgentic.local"], "deny": [],
                               "allowIpLiterals": False}}}}}}
request = urllib.request.Request("http://{ip}:8443/v1/memory/status",
    data=json.dumps(body).encode(), method="POST",
    headers={{"Authorization": "Bearer {control_token}", "Content-Type": "application/json"}})
# The NetworkPolicy enforcer admits a new pod's address a few seconds after it starts.
for attempt in range(30):
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            print(json.dumps(json.load(response)))
        break
    except urllib.error.URLError:
        time.sleep(1)
"""
    pod = client_pod("matrix", "bridge-status", image[1], script,
                     labels={"app.kubernetes.io/name": "matrix-a2a-bridge"})
    phase, log = run_pod(cluster, pod)
    assert phase == "Succeeded", log
    answer = json.loads(log.strip().splitlines()[-1])
    assert answer["reason"] == "OK"
    assert answer["status"]["enabled"] is True and answer["status"]["entryCount"] == 2


def test_withdrawal_erases_and_verifies(release: Release, host_dsn: str) -> None:
    cluster = release.cluster
    before = scope_status(cluster, SCOPE, NS)["consentGeneration"]
    cluster.kubectl("patch", "consentrecord", "-n", NS, "alice-docs-agent-grant-1",
                    "--type=merge", "-p", '{"spec": {"decision": "withdrawn"}}')
    status = converge(lambda: phase_is(cluster, SCOPE, "Disabled", "CONSENT_WITHDRAWN", ns=NS),
                      "the scope Disabled after withdrawal")
    assert status["lastErasure"]["result"] == "Verified"
    assert status["consentGeneration"] > before
    assert entry_count(host_dsn, f"{NS}/{SCOPE}") == 0


def test_offboarding_erases_and_reaches_ready_for_deactivation(
        release: Release, host_dsn: str) -> None:
    cluster = release.cluster
    cluster.kubectl("apply", "-f", "-", input="\n---\n".join(
        json.dumps(o) for o in scope_and_consent(NS, "bob-docs-agent", "bob")))
    status = converge(lambda: phase_is(cluster, "bob-docs-agent", "Enabled", ns=NS), "bob Enabled")
    save_facts(host_dsn, access(cluster, "bob-docs-agent", status["consentGeneration"], NS),
               ["bob's fact"])
    result = kubectl_apply(cluster, EXAMPLES / "40-offboarding.yaml")
    assert result.returncode == 0, result.stderr

    def offboarded() -> dict[str, Any] | None:
        obj = json.loads(cluster.kubectl("get", "principaloffboarding", "offboard-bob",
                                         "-o", "json"))
        status = obj.get("status") or {}
        return status if status.get("phase") == "ReadyForDeactivation" else None

    converge(offboarded, "the offboarding ReadyForDeactivation")
    assert entry_count(host_dsn, f"{NS}/bob-docs-agent") == 0
