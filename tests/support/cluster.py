"""The cluster tier's helpers: our chart installed by helm on a real node, and what the tests
ask of it (pods, logs, a throw-away client pod running our image's Python)."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from fgentic_governance.devenv.binaries import cache_dir
from fgentic_governance.devenv.node import LocalCluster
from fgentic_governance.paths import repo_root

CHART = repo_root() / "charts" / "fgentic-governance"
RELEASE = "fg"
NAMESPACE = "fgentic-system"
PYTHON = "/opt/fgentic-governance/bin/python"
"""The image's interpreter: client pods run it instead of a shell (the image has none we use)."""


def built_image() -> tuple[Path, str]:
    """hack/image.sh (cached by its inputs): the docker-archive and its repo:tag."""
    result = subprocess.run(["bash", str(repo_root() / "hack" / "image.sh")],
                            capture_output=True, text=True, timeout=1800, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"hack/image.sh failed:\n{result.stderr[-3000:]}")
    archive = Path(result.stdout.strip().splitlines()[-1])
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    return archive, f"{values['image']['repository']}:{chart['appVersion']}"


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

    def upgrade(self, chart: Path = CHART, **overrides: Any) -> None:
        self._apply("upgrade", chart, overrides)

    def _apply(self, verb: str, chart: Path, overrides: Mapping[str, Any]) -> None:
        values = _merge(self.values, overrides)
        path = Path(self.cluster.workdir) / f"values-{len(self.history)}.yaml"
        path.write_text(yaml.safe_dump(values))
        try:
            self.helm(verb, self.name, str(chart), "--namespace", self.namespace,
                      "--create-namespace", "--values", str(path), "--wait", "--timeout",
                      "240s")
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


def wait_for(check: Callable[[], Any], what: str, timeout: float = 120,
             interval: float = 1.0) -> Any:
    """Poll until ``check`` returns something truthy; its last exception explains a timeout."""
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while time.monotonic() < deadline:
        try:
            value = check()
            if value:
                return value
        except Exception as exc:
            last = exc
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}: {last!r}")


def ready(pod: Mapping[str, Any]) -> bool:
    conditions = pod.get("status", {}).get("conditions", [])
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def client_pod(namespace: str, name: str, image: str, script: str, *,
               labels: Mapping[str, str] | None = None,
               service_account: str | None = None) -> dict[str, Any]:
    """A pod that runs ``script`` with the image's Python once (restartPolicy Never)."""
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "securityContext": {"runAsNonRoot": True, "runAsUser": 65532,
                            "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [{
            "name": "client", "image": image, "imagePullPolicy": "Never",
            "command": [PYTHON, "-c", script],
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

    phase = wait_for(finished, f"pod {meta['name']} to finish", timeout=timeout)
    log = cluster.kubectl("logs", "-n", meta["namespace"], meta["name"])
    cluster.kubectl("delete", "pod", "-n", meta["namespace"], meta["name"], "--wait=false")
    return str(phase), log


def _merge(base: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in overrides.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def apply(cluster: LocalCluster, manifests: Sequence[Mapping[str, Any]] | str) -> str:
    text = manifests if isinstance(manifests, str) else "\n---\n".join(
        json.dumps(m) for m in manifests)
    return cluster.kubectl("apply", "-f", "-", input=text)
