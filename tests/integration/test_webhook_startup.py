"""The webhook starts under exactly the RBAC the chart grants it (issue 37 §1).

For each value of the switch its start-up depends on (``memoryApi.enabled``), the chart's own
webhook Roles and ClusterRoles (``helm template``) are bound to a client of the real
kube-apiserver authenticated as the webhook's service account, and the webhook runs with the
arguments the chart's Deployment gives it. With the defaults it read the memory API's Pod
routing configuration, which the chart neither renders nor lets it read: a 403, and it exited
("API server refused a request (status 403)"). A 403 for a read it does need still stops it,
with a line naming the request and why.
"""

from __future__ import annotations

import json
import subprocess
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from fgentic_devenv import wait_until
from fgentic_devenv.binaries import binary
from fgentic_governance.admission.render import mutating_configuration, webhook_configuration
from tests.support import processes
from tests.support.objects import ROOT

pytestmark = pytest.mark.integration
CHART = ROOT / "charts" / "fgentic-governance"
RBAC = ("ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")


class Release:
    """One rendering of the chart: a unique release name (its roles are cluster-wide) in its
    own namespace."""

    def __init__(self, *sets: str, name: str = "") -> None:
        self.name = name or f"st{uuid.uuid4().hex[:6]}"
        self.namespace = self.name
        result = subprocess.run(
            [str(binary("helm")), "template", self.name, str(CHART), "--namespace",
             self.namespace, "--set-json", "webhook.networkPolicy.apiServerSources=[]",
             "--set", "localHomeserver=fgentic.local", "--set", "store.dsnSecret.name=store",
             *[arg for value in sets for arg in ("--set", value)]],
            capture_output=True, text=True, check=False, timeout=120)
        assert result.returncode == 0, result.stderr
        self.docs = [d for d in yaml.safe_load_all(result.stdout) if d]

    @property
    def account(self) -> str:
        return f"system:serviceaccount:{self.namespace}:{self.name}-webhook"

    def webhook_rbac(self) -> list[dict[str, Any]]:
        """Every binding of the webhook's service account and the role it refers to."""
        bindings = [d for d in self.docs if d["kind"] in RBAC[1::2] and any(
            s.get("kind") == "ServiceAccount" and s["name"] == f"{self.name}-webhook"
            for s in d.get("subjects") or [])]
        roles = {(b["roleRef"]["kind"], b["roleRef"]["name"]) for b in bindings}
        return [*bindings, *[d for d in self.docs
                             if (d["kind"], d["metadata"]["name"]) in roles]]

    def webhook_args(self) -> list[str]:
        (deploy,) = [d for d in self.docs if d["kind"] == "Deployment"
                     and d["metadata"]["name"] == f"{self.name}-webhook"]
        return list(deploy["spec"]["template"]["spec"]["containers"][0]["args"])


@pytest.fixture
def cleanup(control_plane: Any) -> Iterator[list[dict[str, Any]]]:
    """Objects created by a test, deleted after it (cluster-wide roles and configurations)."""
    made: list[dict[str, Any]] = []
    yield made
    control_plane.kubectl("delete", "--ignore-not-found", "--wait=false", "-f", "-",
                          input="\n---\n".join(json.dumps(d) for d in made))


def _install(cp: Any, release: Release, made: list[dict[str, Any]], port: int,
             *, routing: bool) -> None:
    """The namespace, the chart's webhook RBAC, and the configurations the webhook injects
    (named as the chart names them, but sending only this namespace to the webhook)."""
    cp.ensure_namespace(release.namespace)
    configs = [webhook_configuration(release.name, f"https://127.0.0.1:{port}", b"x")]
    if routing:
        configs.append(mutating_configuration(release.name, f"https://127.0.0.1:{port}", b"x"))
    for config in configs:
        for hook in config["webhooks"]:
            hook["namespaceSelector"] = {"matchLabels": {
                "kubernetes.io/metadata.name": release.namespace}}
    made += [*release.webhook_rbac(), *configs]
    cp.kubectl("apply", "-n", release.namespace, "-f", "-",
               input="\n---\n".join(json.dumps(d) for d in made))


def _run(cp: Any, release: Release, work: Path, port: int, health: int) -> Any:
    """The webhook as the chart's Deployment runs it (later flags win), here on loopback and
    authenticated as the chart's service account."""
    work.mkdir(parents=True, exist_ok=True)
    kubeconfig = cp.write_kubeconfig(work / "kubeconfig", release.account)
    args = [*release.webhook_args(), "--kubeconfig", str(kubeconfig), "--tls-dir",
            str(work / "tls"), "--host", "127.0.0.1", "--port", str(port), "--health-port",
            str(health), "--bootstrap-host", "127.0.0.1"]
    return processes.spawn_cli(args, work / "webhook.log")


def _ready(health: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{health}/readyz", timeout=2) as answer:
            return int(answer.status) == 200
    except OSError:
        return False


@pytest.mark.parametrize("memory_api", [False, True], ids=["defaults", "memory-api"])
def test_the_webhook_starts_ready_under_the_charts_rbac(
        control_plane: Any, k8s_client: client.ApiClient, tmp_path: Path,
        cleanup: list[dict[str, Any]], memory_api: bool) -> None:
    release = Release(f"memoryApi.enabled={str(memory_api).lower()}")
    port, health = processes.free_port(), processes.free_port()
    _install(control_plane, release, cleanup, port, routing=memory_api)
    proc = _run(control_plane, release, tmp_path / "webhook", port, health)
    try:
        wait_until(lambda: _ready(health), proc, what="webhook",
                             log=tmp_path / "webhook" / "webhook.log", timeout=60)
    finally:
        processes.stop(proc)
    admission = client.AdmissionregistrationV1Api(k8s_client)
    ca = client.CoreV1Api(k8s_client).read_namespaced_secret(
        f"{release.name}-webhook-tls", release.namespace).data["ca.crt"]
    configs = [admission.read_validating_webhook_configuration(release.name)]
    if memory_api:  # the Pod routing's configuration got the CA as well
        configs.append(admission.read_mutating_webhook_configuration(release.name))
    assert all(h.client_config.ca_bundle == ca for c in configs for h in c.webhooks)
    log = (tmp_path / "webhook" / "webhook.log").read_text()
    assert "403" not in log and "Traceback" not in log, log


def test_a_refused_read_it_needs_stops_it_with_the_request_and_why(
        control_plane: Any, tmp_path: Path, cleanup: list[dict[str, Any]]) -> None:
    """The memory API on, but the webhook's roles those of a release without it: the Pod
    routing's configuration cannot be read, so the webhook stops (fail closed) saying so."""
    release = Release("memoryApi.enabled=true")
    without = Release(name=release.name)
    port, health = processes.free_port(), processes.free_port()
    _install(control_plane, without, cleanup, port, routing=True)
    proc = _run(control_plane, release, tmp_path / "webhook", port, health)
    try:
        code = proc.wait(timeout=60)
    finally:
        processes.stop(proc)
    log = (tmp_path / "webhook" / "webhook.log").read_text()
    assert code == 1, log
    assert (f"fgentic-governance webhook: Kubernetes request `get mutatingwebhookconfigurations/"
            f"{release.name}` failed: status 403 Forbidden: the service account lacks this "
            "permission") in log, log
    assert "Traceback" not in log and "cannot get resource" not in log, log
