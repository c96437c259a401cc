"""helm upgrade with a CRD change (from the earlier chart layout), every webhook TLS mode after
every other, then helm uninstall: nothing stuck, memory fenced.

Runs last in the tier (it removes the release the other modules use)."""

from __future__ import annotations

import asyncio
import base64
import json
import shlex
import shutil
from pathlib import Path
from typing import Any

import asyncpg
import pytest
import yaml

from fgentic_devenv.controlplane import KubectlError
from fgentic_devenv.node import LocalCluster
from fgentic_devenv.paths import repo_root
from fgentic_governance.api.common import MANAGED_BY
from fgentic_governance.memory import MemoryStore
from fgentic_governance.retrieval.render.names import BINDING_LABEL
from fgentic_governance.serving.tls import CertificateAuthority
from tests.support.cluster import (
    Release,
    apply,
    converge,
    kubectl_result,
    phase_is,
    ready,
    scope_and_consent,
)
from tests.support.image import CHART
from tests.support.store import migrated_pool

USER_TLS = "fg-webhook-user-tls"


def _chart(tmp_path: Path, tag: str) -> Path:
    """A copy of the chart with a new patch version."""
    chart = tmp_path / tag / "fgentic-governance"
    shutil.copytree(CHART, chart)
    meta = yaml.safe_load((chart / "Chart.yaml").read_text())
    meta["version"] = f"{meta['version']}-{tag}"
    (chart / "Chart.yaml").write_text(yaml.safe_dump(meta))
    return chart


def _earlier_layout(tmp_path: Path) -> Path:
    """The chart as releases before issue 37 had it: the CRDs in crds/ (Helm installs them
    once and never upgrades them), none among the templates."""
    chart = _chart(tmp_path, "crds-dir")
    (chart / "files" / "crds").rename(chart / "crds")
    (chart / "templates" / "crds.yaml").unlink()
    return chart


def _changed_chart(tmp_path: Path) -> Path:
    """The chart with a new patch version whose MemoryScope CRD gains a printer column."""
    chart = _chart(tmp_path, "upgrade.1")
    crd_path = chart / "files" / "crds" / "governance.fgentic.dev_memoryscopes.yaml"
    crd = yaml.safe_load(crd_path.read_text())
    for version in crd["spec"]["versions"]:
        version.setdefault("additionalPrinterColumns", []).append(
            {"name": "Upgraded", "type": "string", "jsonPath": ".status.reasonCode"})
    crd_path.write_text(yaml.safe_dump(crd))
    return chart


def _documented(mark: str) -> list[list[str]]:
    """The commands of docs/install.md's block under ``<!-- install-doc: {mark} -->``."""
    text = (repo_root() / "docs" / "install.md").read_text()
    block = text[text.index(f"<!-- install-doc: {mark} -->"):].split("```sh\n", 1)[1]
    return [shlex.split(line) for line in block.split("```", 1)[0].splitlines()
            if line.strip() and not line.lstrip().startswith("#")]


def _as_an_earlier_release_left_it(release: Release, tmp_path: Path) -> None:
    """The release and its CRDs as an install by the earlier chart leaves them: the release's
    manifest without CRDs, the CRDs without Helm's ownership marks, and the earlier
    documented upgrade step (`kubectl apply --server-side` of crds/) a second writer."""
    earlier = _earlier_layout(tmp_path)
    release.upgrade(earlier)  # crds.keep: Helm leaves the CRDs it no longer renders
    ours = "app.kubernetes.io/part-of=fgentic-governance"
    release.kubectl("label", "crd", "-l", ours, "app.kubernetes.io/managed-by-")
    release.kubectl("annotate", "crd", "-l", ours, "meta.helm.sh/release-name-",
                    "meta.helm.sh/release-namespace-", "helm.sh/resource-policy-")
    release.kubectl("apply", "--server-side", "--force-conflicts", "-f",
                    str(earlier / "crds"))


def test_upgrade_from_the_crds_dir_layout_upgrades_the_crds(
        release: Release, demo_namespace: str, tmp_path: Path) -> None:
    """Issue 37 §8: the CRDs are templates, so `helm upgrade` upgrades them; a release of the
    earlier layout takes docs/install.md's one-time step (as written) and no manual apply."""
    cluster = release.cluster
    before = json.loads(cluster.kubectl("get", "memoryscopes", "-A", "-o", "json"))["items"]
    _as_an_earlier_release_left_it(release, tmp_path)
    chart = _changed_chart(tmp_path)
    with pytest.raises(RuntimeError, match="invalid ownership metadata"):
        release.upgrade(chart)  # what the one-time step is for
    for argv in _documented("crd-adoption"):
        if argv[0] == "kubectl":
            cluster.kubectl(*argv[1:])
        else:  # the helm upgrade: this release's values, the flags the doc adds
            assert argv[:2] == ["helm", "upgrade"], argv
            release.upgrade(chart, *(a for a in argv if a == "--force-conflicts"))
    crd = json.loads(cluster.kubectl("get", "crd", "memoryscopes.governance.fgentic.dev",
                                     "-o", "json"))
    columns = [c["name"] for v in crd["spec"]["versions"]
               for c in v.get("additionalPrinterColumns", [])]
    assert "Upgraded" in columns
    assert crd["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"
    assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    after = json.loads(cluster.kubectl("get", "memoryscopes", "-A", "-o", "json"))["items"]
    assert {(o["metadata"]["namespace"], o["metadata"]["name"]) for o in before} <= {
        (o["metadata"]["namespace"], o["metadata"]["name"]) for o in after}
    for component, replicas in (("operator", 1), ("webhook", 2), ("control-api", 2)):
        converge(lambda c=component, n=replicas: len(
            [p for p in release.pods(c) if ready(p)]) == n, f"{component} ready after upgrade")
    # The upgraded operator still reconciles: a new scope with consent becomes Enabled.
    cluster.kubectl("apply", "-f", "-", input="\n---\n".join(
        json.dumps(o) for o in scope_and_consent(demo_namespace, "erin-docs-agent", "erin")))
    converge(lambda: phase_is(cluster, "erin-docs-agent", "Enabled", ns=demo_namespace),
             "erin Enabled")


def _user_tls_secret(release: Release) -> str:
    """A kubernetes.io/tls Secret of a CA of our own for the webhook's Service (the secret
    mode's input); the CA's certificate, base64, for webhook.tls.caBundle."""
    service = f"{release.name}-webhook"
    ca = CertificateAuthority("tier-user-ca")
    leaf = ca.issue_server([f"{service}.{release.namespace}.svc", service,
                            f"{service}.{release.namespace}"])
    apply(release.cluster, [{
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
        "metadata": {"name": USER_TLS, "namespace": release.namespace},
        "data": {"tls.crt": base64.b64encode(leaf.cert_pem).decode(),
                 "tls.key": base64.b64encode(leaf.key_pem).decode()}}])
    return base64.b64encode(ca.cert_pem).decode()


def _an_agent_is_admitted(release: Release, mode: str, namespace: str) -> None:
    """The API server reaches the webhook and it admits an Agent (a server-side dry run:
    every webhook runs, nothing is stored); retried while the old replicas drain."""
    agent = yaml.safe_load((repo_root() / "examples" / "10-agent.yaml").read_text())
    agent["metadata"].update(name=f"tls-{mode.lower()}", namespace=namespace)
    converge(lambda: kubectl_result(release.cluster, "create", "--dry-run=server", "-f", "-",
                                    input=json.dumps(agent)).returncode == 0,
             f"an Agent admitted in TLS mode {mode}", timeout=60)
    converge(lambda: len([p for p in release.pods("webhook") if ready(p)
                          and not p["metadata"].get("deletionTimestamp")]) == 2,
             f"2 ready webhook pods in TLS mode {mode}")


def test_the_webhook_tls_mode_can_follow_any_other(release: Release,
                                                  demo_namespace: str) -> None:
    """Issue 37 §8: bootstrap → secret → generate → bootstrap, each a plain `helm upgrade`.
    Before, the generate mode's Secret had the name the bootstrap webhook writes (Helm
    refused to adopt it) and Helm's server-side apply of a caBundle the webhook had written
    was a conflict."""
    ca_bundle = _user_tls_secret(release)
    steps: list[tuple[str, dict[str, Any]]] = [
        ("secret", {"mode": "secret", "secretName": USER_TLS, "caBundle": ca_bundle}),
        ("generate", {"mode": "generate", "secretName": "", "caBundle": ""}),
        ("bootstrap", {})]
    for mode, tls in steps:
        release.upgrade(CHART, webhook={"tls": tls})  # {}: the release's own (bootstrap)
        config = release.json("get", "validatingwebhookconfiguration", release.name)
        bundle = config["webhooks"][0]["clientConfig"]["caBundle"]
        if mode == "secret":
            assert bundle == ca_bundle
        _an_agent_is_admitted(release, mode, demo_namespace)
    release.kubectl("delete", "secret", "-n", release.namespace, USER_TLS,
                    f"{release.name}-webhook-tls-generated", "--ignore-not-found")


def test_uninstall_fences_memory_and_leaves_nothing_stuck(
        release: Release, demo_namespace: str, host_dsn: str) -> None:
    cluster = release.cluster
    scopes = json.loads(cluster.kubectl("get", "memoryscopes", "-A", "-o", "json"))["items"]
    assert any("governance.fgentic.dev/finalizer" in (o["metadata"].get("finalizers") or [])
               for o in scopes)
    # The example binding's objects, in its proxy and retrieval namespaces (issue 37 §2: 14 of
    # them outlived the uninstall), and what the processes made at run time, labelled as ours.
    # (Applied here too, unchanged if test_install.py applied it: this file runs alone.)
    applied = kubectl_result(cluster, "apply", "-f",
                             str(repo_root() / "examples" / "30-retrievalbinding.yaml"))
    assert applied.returncode == 0, applied.stderr
    converge(lambda: _rendered_namespaces(cluster) >= {"agentgateway-system",
                                                       "fgentic-retrieval"},
             "the example binding's objects")
    runtime = cluster.kubectl("get", "secrets,leases", "-n", release.namespace, "-l", OURS,
                              "-o", "name").split()
    assert {f"secret/{release.name}-webhook-tls",
            f"lease.coordination.k8s.io/{release.name}-operator"} <= set(runtime), runtime
    release.uninstall()
    # detach removed what every binding rendered, in every namespace; the bindings stay.
    assert not _ours_anywhere(cluster, BINDING_LABEL)
    assert json.loads(cluster.kubectl("get", "retrievalbindings", "-A", "-o", "json"))["items"]
    assert f"{release.name}-operator" not in cluster.kubectl(
        "get", "leases", "-n", release.namespace, "-o", "name")
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
    converge(lambda: not any(release.pods(c) for c in ("operator", "webhook", "control-api")),
             "the release's pods gone", timeout=90)
    for kind in ("validatingwebhookconfigurations", "validatingadmissionpolicies",
                 "clusterroles", "clusterrolebindings"):
        names = cluster.kubectl("get", kind, "-o", "name")
        assert f"/{release.name}-" not in names and f"/{release.name}\n" not in names, names
    cluster.kubectl("delete", "namespace", demo_namespace, "--wait=true", "--timeout=90s",
                    timeout=120)
    assert "not found" in kubectl_result(cluster, "get", "namespace", demo_namespace).stderr


OURS = f"{MANAGED_BY[0]}={MANAGED_BY[1]}"


def _ours_anywhere(cluster: LocalCluster, selector: str) -> list[str]:
    """Every object matching ``selector``, of every kind the API server's discovery lists,
    namespaced (in any namespace) or cluster-scoped."""
    kinds = cluster.kubectl("api-resources", "--verbs=list", "-o", "name").split()
    return cluster.kubectl("get", ",".join(kinds), "-A", "-l", selector, "-o", "name",
                           "--ignore-not-found", timeout=180).split()


def _rendered_namespaces(cluster: LocalCluster) -> set[str]:
    found = json.loads(cluster.kubectl("get", "networkpolicies,configmaps", "-A", "-l",
                                       f"{BINDING_LABEL},{OURS}", "-o", "json"))["items"]
    return {o["metadata"]["namespace"] for o in found}


def test_the_documented_removal_leaves_nothing_labelled_as_ours(
        release: Release, host_dsn: str) -> None:
    """Issue 37 §2: after the uninstall, docs/install.md's removal block as written: nothing
    our processes made (managed-by) nor anything of the release (instance) in any namespace
    or cluster-wide, and neither the schema nor its roles in the store."""
    cluster = release.cluster
    for argv in _documented("remove"):
        if argv[0] == "kubectl":
            _documented_kubectl(cluster, argv[1:])
        elif argv[0] == "psql":
            assert argv[1:3] == ["$dsn", "-c"], argv
            asyncio.run(_sql(host_dsn, argv[3]))
        else:  # erase-scope names a scope to erase; this store's fencing was checked above
            assert argv[:3] == ["fgentic-governance", "memory", "erase-scope"], argv
    assert not _ours_anywhere(cluster, OURS)
    assert not _ours_anywhere(cluster, f"app.kubernetes.io/instance={release.name}")
    roles = asyncio.run(_sql(host_dsn, "SELECT rolname FROM pg_roles WHERE rolname LIKE "
                                       "'fgentic%' UNION SELECT nspname FROM pg_namespace "
                                       "WHERE nspname LIKE 'fgentic%'"))
    assert roles == [], roles


def _documented_kubectl(cluster: LocalCluster, args: list[str]) -> None:
    """One kubectl line of the block; crds/ is the repository's. A kind this node does not
    serve (the PolicyReport CRD is optional) has nothing to delete."""
    try:
        cluster.kubectl(*(str(repo_root() / a) if a == "crds/" else a for a in args),
                        timeout=180)
    except KubectlError as exc:
        assert "doesn't have a resource type" in exc.stderr, exc


async def _sql(dsn: str, statement: str) -> list[str]:
    connection = await asyncpg.connect(dsn)
    try:
        return [str(row[0]) for row in await connection.fetch(statement)]
    finally:
        await connection.close()
