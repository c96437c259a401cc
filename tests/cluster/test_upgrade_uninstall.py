"""helm upgrade with a CRD change, then helm uninstall: nothing stuck, memory fenced.

Runs last in the tier (it removes the release the other modules use)."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import yaml

from fgentic_governance.memory import MemoryStore
from tests.support.cluster import (
    Release,
    kubectl_result,
    phase_is,
    ready,
    scope_and_consent,
    wait_for,
)
from tests.support.image import CHART
from tests.support.store import migrated_pool

NS = "fgentic-demo"


def _changed_chart(tmp_path: Path) -> Path:
    """The chart with a new patch version whose MemoryScope CRD gains a printer column."""
    chart = tmp_path / "fgentic-governance"
    shutil.copytree(CHART, chart)
    meta = yaml.safe_load((chart / "Chart.yaml").read_text())
    meta["version"] = meta["version"] + "-upgrade.1"
    (chart / "Chart.yaml").write_text(yaml.safe_dump(meta))
    crd_path = chart / "crds" / "governance.fgentic.dev_memoryscopes.yaml"
    crd = yaml.safe_load(crd_path.read_text())
    for version in crd["spec"]["versions"]:
        version.setdefault("additionalPrinterColumns", []).append(
            {"name": "Upgraded", "type": "string", "jsonPath": ".status.reasonCode"})
    crd_path.write_text(yaml.safe_dump(crd))
    return chart


def test_upgrade_applies_the_crd_change_and_keeps_every_object(
        release: Release, tmp_path: Path) -> None:
    cluster = release.cluster
    before = json.loads(cluster.kubectl("get", "memoryscopes", "-A", "-o", "json"))["items"]
    chart = _changed_chart(tmp_path)
    # helm never upgrades crds/: the documented step applies them first (docs/install.md).
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(chart / "crds"))
    release.upgrade(chart)
    crd = json.loads(cluster.kubectl("get", "crd", "memoryscopes.governance.fgentic.dev",
                                     "-o", "json"))
    columns = [c["name"] for v in crd["spec"]["versions"]
               for c in v.get("additionalPrinterColumns", [])]
    assert "Upgraded" in columns
    after = json.loads(cluster.kubectl("get", "memoryscopes", "-A", "-o", "json"))["items"]
    assert {(o["metadata"]["namespace"], o["metadata"]["name"]) for o in before} <= {
        (o["metadata"]["namespace"], o["metadata"]["name"]) for o in after}
    for component, replicas in (("operator", 1), ("webhook", 2), ("control-api", 2)):
        wait_for(lambda c=component, n=replicas: len(
            [p for p in release.pods(c) if ready(p)]) == n, f"{component} ready after upgrade")
    # The upgraded operator still reconciles: a new scope with consent becomes Enabled.
    cluster.kubectl("apply", "-f", "-", input="\n---\n".join(
        json.dumps(o) for o in scope_and_consent(NS, "erin-docs-agent", "erin")))
    wait_for(lambda: phase_is(cluster, "erin-docs-agent", "Enabled", ns=NS), "erin Enabled")


def test_uninstall_fences_memory_and_leaves_nothing_stuck(
        release: Release, host_dsn: str) -> None:
    cluster = release.cluster
    scopes = json.loads(cluster.kubectl("get", "memoryscopes", "-A", "-o", "json"))["items"]
    assert any("governance.fgentic.dev/finalizer" in (o["metadata"].get("finalizers") or [])
               for o in scopes)
    release.uninstall()
    # The pre-delete hook ran `detach`: finalizers released, every scope fenced in the store.
    for obj in json.loads(cluster.kubectl("get", "memoryscopes", "-A", "-o", "json"))["items"]:
        assert "governance.fgentic.dev/finalizer" not in (obj["metadata"].get("finalizers")
                                                          or [])

    async def states() -> list[bool]:
        pool = await migrated_pool(host_dsn, max_size=2)
        try:
            return [s.enabled for s in await MemoryStore(pool).scope_states()]
        finally:
            await pool.close()

    enabled = asyncio.run(states())
    assert enabled and not any(enabled)
    # Nothing of the release is left, and a namespace full of our objects goes away.
    wait_for(lambda: not any(release.pods(c) for c in ("operator", "webhook", "control-api")),
             "the release's pods gone", timeout=90)
    for kind in ("validatingwebhookconfigurations", "validatingadmissionpolicies",
                 "clusterroles", "clusterrolebindings"):
        names = cluster.kubectl("get", kind, "-o", "name")
        assert f"/{release.name}-" not in names and f"/{release.name}\n" not in names, names
    cluster.kubectl("delete", "namespace", NS, "--wait=true", "--timeout=90s", timeout=120)
    assert "not found" in kubectl_result(cluster, "get", "namespace", NS).stderr
