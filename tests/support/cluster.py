"""The cluster tier's helpers: our chart installed by helm on a real node, and what the tests
ask of it (pods, logs, a throw-away client pod running our image's Python)."""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from fgentic_devenv.binaries import cache_dir
from fgentic_devenv.node import LocalCluster
from fgentic_governance.api.memory import MemoryScopeSpec
from fgentic_governance.memory import Access, MemoryStore, ScopeRecord
from tests.support.image import CHART, build_image, chart_image_ref
from tests.support.polling import until
from tests.support.store import migrated_pool

RELEASE = "fg"
NAMESPACE = "fgentic-system"
PYTHON = "/opt/fgentic-governance/bin/python"
"""The image's interpreter: client pods run it instead of a shell (the image has none we use)."""


def built_image() -> tuple[Path, str]:
    """The image hack/image.sh built and its repo:tag as the chart names it."""
    return build_image(), chart_image_ref()


@dataclass
class Release:
    """One helm release of the chart in a cluster."""

    cluster: LocalCluster
    values: dict[str, Any]
    name: str = RELEASE
    namespace: str = NAMESPACE
    history: list[str] = field(default_factory=list)

    def helm(self, *args: str, timeout: float = 300) -> str:
        cmd = [str(cache_dir() / "helm"), "--kubeconfig", str(self.cluster.kubeconfig), *args]
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                                check=False)
        if result.returncode != 0:
            raise RuntimeError(f"helm {' '.join(args[:2])} failed: {result.stderr[-3000:]}")
        return result.stdout

    def install(self, chart: Path = CHART, **overrides: Any) -> None:
        self._apply("install", chart, overrides)

    def upgrade(self, chart: Path = CHART, *flags: str, **overrides: Any) -> None:
        """``helm upgrade`` with the release's values, ``overrides`` and ``flags`` (this
        upgrade only)."""
        self._apply("upgrade", chart, overrides, flags)

    def _apply(self, verb: str, chart: Path, overrides: Mapping[str, Any],
               flags: Sequence[str] = ()) -> None:
        values = merge_values(self.values, overrides)
        path = Path(self.cluster.workdir) / f"values-{len(self.history)}.yaml"
        path.write_text(yaml.safe_dump(values))
        try:
            self.helm(verb, self.name, str(chart), "--namespace", self.namespace,
                      "--create-namespace", "--values", str(path), "--wait", "--timeout",
                      "240s", *flags)
        except RuntimeError as exc:
            raise RuntimeError(f"{exc}\n{self.diagnostics()}") from None
        self.history.append(verb)

    def diagnostics(self) -> str:
        """What a failed wait needs to be understood: pods, events, logs (ours, content-free)."""
        parts = []
        for args in (("get", "pods", "-A", "-o", "wide"),
                     ("get", "events", "-n", self.namespace, "--sort-by=.lastTimestamp"),
                     ("describe", "pods", "-n", self.namespace)):
            try:
                parts.append(self.kubectl(*args, timeout=30))
            except Exception as exc:
                parts.append(f"kubectl {' '.join(args)}: {exc}")
        return "\n".join(parts)[-12000:]

    def uninstall(self) -> None:
        self.helm("uninstall", self.name, "--namespace", self.namespace, "--wait",
                  "--timeout", "120s")

    # -- reading the cluster ------------------------------------------------------------------

    def kubectl(self, *args: str, input: str | None = None, timeout: float = 120) -> str:
        return self.cluster.kubectl(*args, input=input, timeout=timeout)

    def json(self, *args: str) -> Any:
        return json.loads(self.kubectl(*args, "-o", "json"))

    def pods(self, component: str) -> list[dict[str, Any]]:
        listing = self.json("get", "pods", "-n", self.namespace, "-l",
                            f"app.kubernetes.io/instance={self.name},"
                            f"app.kubernetes.io/component={component}")
        return list(listing["items"])

    def logs(self, component: str) -> str:
        """Every container log of the component's pods, the previous instance's too."""
        text = []
        for pod in self.pods(component):
            name = pod["metadata"]["name"]
            text.append(self.kubectl("logs", "-n", self.namespace, name, "--all-containers"))
            restarted = any(s.get("restartCount", 0) for s in
                            pod.get("status", {}).get("containerStatuses", []))
            if restarted:
                text.append(self.kubectl("logs", "-n", self.namespace, name, "--previous"))
        return "\n".join(text)


def converge(check: Callable[[], Any], what: str, timeout: float = 120,
             interval: float = 1.0) -> Any:
    """Wait for the cluster to converge on ``check`` (something truthy, returned): pods roll and
    the API or kubectl fails meanwhile, so any error counts as "not yet" (the last one is in the
    failure), and the bound is a rollout's, not a process's."""
    return until(check, what, timeout, interval=interval, tolerate=(Exception,))


def ready(pod: Mapping[str, Any]) -> bool:
    conditions = pod.get("status", {}).get("conditions", [])
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def client_pod(namespace: str, name: str, image: str, script: str, *,
               args: Sequence[str] = (), labels: Mapping[str, str] | None = None,
               service_account: str | None = None) -> dict[str, Any]:
    """A pod that runs ``script`` (with ``args``) on the image's Python once (restartPolicy
    Never)."""
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "securityContext": {"runAsNonRoot": True, "runAsUser": 65532,
                            "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [{
            "name": "client", "image": image, "imagePullPolicy": "Never",
            "command": [PYTHON, "-c", script, *args],
            "securityContext": {"allowPrivilegeEscalation": False,
                                "readOnlyRootFilesystem": True,
                                "capabilities": {"drop": ["ALL"]}}}]}
    if service_account:
        spec["serviceAccountName"] = service_account
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": dict(labels or {})},
            "spec": spec}


def run_pod(cluster: LocalCluster, pod: Mapping[str, Any], timeout: float = 90) -> tuple[str, str]:
    """Create the pod, wait for it to finish; (phase, log)."""
    meta = pod["metadata"]
    cluster.kubectl("apply", "-f", "-", input=json.dumps(pod))

    def finished() -> str | None:
        phase = cluster.kubectl("get", "pod", "-n", meta["namespace"], meta["name"], "-o",
                                "jsonpath={.status.phase}").strip()
        return phase if phase in ("Succeeded", "Failed") else None

    phase = converge(finished, f"pod {meta['name']} to finish", timeout=timeout)
    log = cluster.kubectl("logs", "-n", meta["namespace"], meta["name"])
    cluster.kubectl("delete", "pod", "-n", meta["namespace"], meta["name"], "--wait=false")
    return str(phase), log


def merge_values(base: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in overrides.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = merge_values(merged[key], value)
        else:
            merged[key] = value
    return merged


def apply(cluster: LocalCluster, manifests: Sequence[Mapping[str, Any]] | str) -> str:
    text = manifests if isinstance(manifests, str) else "\n---\n".join(
        json.dumps(m) for m in manifests)
    return cluster.kubectl("apply", "-f", "-", input=text)


# -- memory scopes in the cluster, the store on the host ---------------------------------------


def scope_status(cluster: LocalCluster, name: str, ns: str) -> dict[str, Any]:
    obj = json.loads(cluster.kubectl("get", "memoryscope", "-n", ns, name, "-o", "json"))
    return dict(obj.get("status") or {})


def phase_is(cluster: LocalCluster, name: str, phase: str, reason: str | None = None, *,
             ns: str) -> dict[str, Any] | None:
    status = scope_status(cluster, name, ns)
    if status.get("phase") == phase and reason in (None, status.get("reasonCode")):
        return status
    return None


async def _with_store(dsn: str, work: Any) -> Any:
    pool = await migrated_pool(dsn, max_size=2)
    try:
        return await work(MemoryStore(pool))
    finally:
        await pool.close()


def access(cluster: LocalCluster, name: str, generation: int, ns: str) -> Access:
    obj = json.loads(cluster.kubectl("get", "memoryscope", "-n", ns, name, "-o", "json"))
    record = ScopeRecord.from_spec(ns, name, MemoryScopeSpec.model_validate(obj["spec"]))
    return Access.for_scope(record, generation)


def save_facts(dsn: str, grant: Access, facts: list[str]) -> None:
    async def work(store: MemoryStore) -> None:
        for fact in facts:
            await store.save(grant, fact)
    asyncio.run(_with_store(dsn, work))


def entry_count(dsn: str, scope_key: str) -> int:
    async def work(store: MemoryStore) -> int:
        return int(await store.entry_count(scope_key))
    return int(asyncio.run(_with_store(dsn, work)))


def kubectl_apply(cluster: LocalCluster, path: Path) -> subprocess.CompletedProcess[str]:
    return kubectl_result(cluster, "apply", "-f", str(path))


def kubectl_result(cluster: LocalCluster, *args: str,
                   input: str | None = None) -> subprocess.CompletedProcess[str]:
    """kubectl whose failure is an answer to look at (a refusal), not an error."""
    return subprocess.run([str(cache_dir() / "kubectl"), "--kubeconfig",
                           str(cluster.kubeconfig), *args], input=input, capture_output=True,
                          text=True, timeout=60, check=False)


def scope_and_consent(ns: str, name: str, who: str,
                      agent: str = "docs-agent") -> list[dict[str, Any]]:
    """A demo MemoryScope of ``@who:fgentic.local`` for ``agent`` and its granted consent."""
    subject = {"mxid": f"@{who}:fgentic.local", "originKind": "native-local"}
    return [
        {"apiVersion": "governance.fgentic.dev/v1alpha1", "kind": "MemoryScope",
         "metadata": {"name": name, "namespace": ns},
         "spec": {"subject": subject, "agent": {"namespace": ns, "name": agent},
                  "controlRoom": f"!{who}-control:fgentic.local",
                  "purpose": "personal-preferences", "policyVersion": "2026-11",
                  "profile": "demo", "posture": "enabled",
                  "policy": {"maxRetentionDays": 7, "entryCap": 100, "maxFactBytes": 512}}},
        {"apiVersion": "governance.fgentic.dev/v1alpha1", "kind": "ConsentRecord",
         "metadata": {"name": f"{name}-grant-1", "namespace": ns},
         "spec": {"scopeRef": {"name": name}, "subject": subject,
                  "purpose": "personal-preferences", "policyVersion": "2026-11",
                  "decision": "granted"}}]
