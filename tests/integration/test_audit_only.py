"""Issue 37 item 10: the audit-only roll-out through the real kube-apiserver.

A webhook started with ``--enforcement audit``, registered as the chart registers it (fail
closed), and the ValidatingAdmissionPolicies rendered for that mode: an Agent every rule would
refuse is admitted, ``kubectl`` prints each rule's warning (a memory rule's with its risk),
the webhook logs the verdict and its start-up line states what no longer holds, and the
audit's PolicyReport records what enforcement would refuse as ``fail``.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from fgentic_devenv.binaries import binary
from fgentic_devenv.paths import repo_root
from fgentic_governance.admission import enforcement
from fgentic_governance.admission.render import admission_policy, webhook_configuration
from tests.support import processes
from tests.support.objects import ROOT, scoped_policies
from tests.support.polling import until

pytestmark = pytest.mark.integration
CRD = Path(__file__).parents[1] / "support" / "crds" / "policyreports.yaml"
DENIED = ROOT / "examples" / "policy" / "FORBIDDEN_HEADER" / "denied.yaml"
SENTINEL = "SENTINEL-audit-only-4d2"
CHART = repo_root() / "charts" / "fgentic-governance"


def _leaky_memory_agent(namespace: str) -> dict[str, Any]:
    """The FORBIDDEN_HEADER sample with memory: refused by a header rule (webhook and policy
    alike) and by a memory rule (no memory API is configured)."""
    import yaml

    agent: dict[str, Any] = yaml.safe_load(DENIED.read_text())
    agent["metadata"] = {"name": "leaky", "namespace": namespace}
    declarative = agent["spec"]["declarative"]
    declarative["systemMessage"] = SENTINEL
    declarative["memory"] = {"modelConfig": "embedding-model-config", "ttlDays": 3}
    return agent


def _apply(cp: Any, doc: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    """`kubectl apply`, keeping stderr (where kubectl prints admission warnings)."""
    return subprocess.run([str(binary("kubectl")), "--kubeconfig", str(cp.kubeconfig), "apply",
                           "-f", "-"], input=json.dumps(doc), capture_output=True, text=True,
                          timeout=60, check=False)


def test_an_audit_only_webhook_admits_with_warnings_and_reports_what_it_would_deny(
        control_plane: Any, k8s_client: client.ApiClient, tmp_path: Path) -> None:
    control_plane.install_crds([CRD])
    namespace = f"audit-only-{uuid.uuid4().hex[:6]}"
    control_plane.ensure_namespace(namespace)
    only = {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
    webhook, port, ca = processes.spawn_webhook(
        control_plane.kubeconfig, tmp_path, audit_interval=1,
        extra=["--enforcement", "audit"])
    config = webhook_configuration(f"audit-only-{namespace}", f"https://127.0.0.1:{port}", ca)
    for hook in config["webhooks"]:
        hook["namespaceSelector"] = only
    policies = scoped_policies([admission_policy(audit_only=True)], only,
                               uuid.uuid4().hex[:6])
    agent = _leaky_memory_agent(namespace)
    try:
        for doc in (config, *policies):
            control_plane.kubectl("apply", "-f", "-", input=json.dumps(doc))

        def warned_by_both() -> str | None:
            """The API server loads the configuration and the policy in a moment: an Agent
            admitted before both warn is deleted and applied again."""
            done = _apply(control_plane, agent)
            assert done.returncode == 0, done.stderr  # audit-only: never refused
            if "(audit-only, not denied)" in done.stderr and \
                    "ValidatingAdmissionPolicy" in done.stderr:
                return done.stderr
            control_plane.kubectl("delete", "agent", "-n", namespace, "leaky")
            return None

        warnings = until(warned_by_both, "warnings from the webhook and the policy", 30,
                         interval=0.5)
        assert "Warning: FORBIDDEN_HEADER at spec.declarative.tools[0].mcpServer." \
            "allowedHeaders[1] (authorization): remove the header" in warnings
        assert "Warning: MEMORY_RUNTIME_UNGOVERNED at spec.declarative.memory: " in warnings
        assert f"({enforcement.MEMORY_WARNING})" in warnings
        assert "FORBIDDEN_HEADER: remove the header" in warnings  # the policy's, warned
        assert SENTINEL not in warnings

        custom = client.CustomObjectsApi(k8s_client)

        def report() -> dict[str, Any] | None:
            found: dict[str, Any] = custom.get_namespaced_custom_object(
                "wgpolicyk8s.io", "v1alpha2", namespace, "policyreports",
                "fgentic-governance-audit")
            return found if found.get("summary", {}).get("fail") else None

        written = until(report, "the audit's PolicyReport", 30, interval=0.3,
                        tolerate=(ApiException,))  # 404 until the audit writes it
        results = {(r["rule"], r["result"], r["resources"][0]["name"])
                   for r in written["results"]}
        assert {("FORBIDDEN_HEADER", "fail", "leaky"),
                ("MEMORY_RUNTIME_UNGOVERNED", "fail", "leaky")} <= results
        assert SENTINEL not in json.dumps(written)

        log = (tmp_path / "webhook.log").read_text()
        assert enforcement.AUDIT_RISK in log  # the start-up line states the memory risk
        assert (f"review warned route=agents operation=CREATE kind=Agent namespace={namespace}"
                " codes=IDENTITY_HEADER_UNBOUND,FORBIDDEN_HEADER,MEMORY_RUNTIME_UNGOVERNED") in log
        verdicts = [line for line in log.splitlines() if "review warned" in line]
        assert SENTINEL not in log and not any("leaky" in line for line in verdicts)
    finally:
        processes.stop(webhook)
        control_plane.kubectl("delete", "--ignore-not-found", "validatingwebhookconfiguration",
                              config["metadata"]["name"])
        for doc in policies:
            control_plane.kubectl("delete", "--ignore-not-found",
                                  doc["kind"].lower(), doc["metadata"]["name"])


def _template(*sets: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(binary("helm")), "template", "fg", str(CHART), "--set-json",
         "webhook.networkPolicy.apiServerSources=[]", "--set", "localHomeserver=fgentic.local",
         *(arg for value in sets for arg in ("--set", value))],
        capture_output=True, text=True, check=False, timeout=60)


def test_the_chart_switches_the_webhook_and_every_admission_policy_to_audit_only() -> None:
    """``webhook.enforcement: audit`` reaches the webhook as ``--enforcement=audit`` and binds
    every ValidatingAdmissionPolicy with Warn and Audit, so the API server refuses nothing the
    webhook only warns about; the default denies; the schema refuses any other value."""
    import yaml

    for value, actions in (("deny", ["Deny"]), ("audit", ["Warn", "Audit"])):
        rendered = _template(f"webhook.enforcement={value}")
        assert rendered.returncode == 0, rendered.stderr
        docs = [d for d in yaml.safe_load_all(rendered.stdout) if d]
        bindings = [d for d in docs if d["kind"] == "ValidatingAdmissionPolicyBinding"]
        assert {b["metadata"]["name"] for b in bindings} == {"fg-agents", "fg-memoryscopes"}
        assert all(b["spec"]["validationActions"] == actions for b in bindings), bindings
        [webhook] = [d for d in docs if d["kind"] == "Deployment"
                     and d["metadata"]["name"] == "fg-webhook"]
        assert f"--enforcement={value}" in webhook["spec"]["template"]["spec"][
            "containers"][0]["args"]
    refused = _template("webhook.enforcement=warn")
    assert refused.returncode != 0 and "enforcement" in refused.stderr
