"""The chart's feature switches on the node (issue 37 §1): with the defaults (no memory API)
the webhook read the memory API's Pod routing configuration, which its service account may
not read, and exited (403): `helm install --wait` timed out and every Agent write failed.

One release of its own, beside the tier's: installed with the defaults, then `helm upgrade`d
through the switches, its webhook Ready (never restarted) and an Agent admitted through the
API server after each step (a server-side dry run: every webhook is asked, nothing stored;
with this release's webhook down or its CA not injected the write is refused). The TLS modes
`secret` and `generate` after `bootstrap` are test_upgrade_uninstall.py's; `certManager`
is the last step here, with cert-manager's own CRDs and this test doing what cert-manager's
controller and CA injector would (no cert-manager can run on the node: no registry).
"""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from fgentic_devenv import free_port, terminate
from fgentic_devenv.node import BRIDGE_ADDRESS, LocalCluster
from fgentic_devenv.paths import repo_root
from fgentic_devenv.postgres import SUPERUSER, LocalPostgres
from fgentic_governance.serving.tls import CertificateAuthority
from tests.support.cluster import Release, apply, converge, kubectl_result, ready
from tests.support.render import rendered
from tests.support.retrieval_server import Chunk, load_corpus

pytestmark = pytest.mark.cluster

NS = "fgentic-switches"
RELEASE = "fgsw"
STORE_DB, CORPUS_DB = "fgentic_switches", "fgentic_switches_corpus"
CERT_MANAGER_CRDS = sorted((repo_root() / "tests" / "support" / "crds" / "cert-manager")
                           .glob("*.yaml"))
CM_SECRET = f"{RELEASE}-cm-tls"
AGENT = repo_root() / "examples" / "10-agent.yaml"


def _base(image: str) -> dict[str, Any]:
    """The chart's defaults, plus what this node needs (its image, the API server's source
    address) and what a second release beside the tier's needs: the operator watches only its
    own namespace, the CRDs stay the tier release's, and no uninstall hook (it acts on every
    namespace)."""
    repository, tag = image.rsplit(":", 1)
    return {"image": {"repository": repository, "tag": tag, "pullPolicy": "Never"},
            "webhook": {"networkPolicy": {"apiServerSources": [
                {"ipBlock": {"cidr": f"{BRIDGE_ADDRESS}/32"}}]}},
            "operator": {"watchNamespaces": [NS]},
            "crds": {"install": False},
            "detachOnUninstall": False}


def _retrieval_inputs(cluster: LocalCluster, postgres: LocalPostgres, embeddings: int) -> \
        dict[str, Any]:
    """What the retrieval server needs to be ready, in this namespace: a corpus, an
    embeddings endpoint that accepts connections, and the configuration the operator renders
    from the example binding (here copied without our labels, so no operator owns it)."""
    asyncio.run(postgres.create_database(CORPUS_DB, extensions=("vector",)))
    asyncio.run(load_corpus(postgres.dsn(CORPUS_DB), [Chunk(
        1, "the switches corpus", "switches.md",
        {"classification": "public", "allowed_principals": [
            {"kind": "matrix", "principal": "@alice:fgentic.local"}]})]))
    binding = rendered()
    (config,) = [o for o in binding.objects if o["kind"] == "ConfigMap"
                 and o["metadata"]["name"].endswith(".retrieval-server")]
    config["metadata"] = {"name": config["metadata"]["name"], "namespace": NS}
    dsn = f"postgresql://{SUPERUSER}@{BRIDGE_ADDRESS}:{postgres.port}/{CORPUS_DB}"
    apply(cluster, [config, {"apiVersion": "v1", "kind": "Secret", "metadata": {
        "name": "corpus", "namespace": NS}, "stringData": {"dsn": dsn}}])
    namespace, name = binding.binding.namespace, binding.binding.name
    return {"enabled": True, "binding": {"namespace": namespace, "name": name},
            "corpusDsnSecret": {"name": "corpus"},
            "embeddings": {"url": f"http://{BRIDGE_ADDRESS}:{embeddings}/v1/embeddings",
                           "model": "hashing"}}


def _memory_inputs(cluster: LocalCluster, postgres: LocalPostgres) -> dict[str, Any]:
    """A store of this release's own (the operator migrates it; the memory API is ready on
    it), reached over the bridge."""
    asyncio.run(postgres.create_database(STORE_DB, extensions=("vector",)))
    dsn = f"postgresql://{SUPERUSER}@{BRIDGE_ADDRESS}:{postgres.port}/{STORE_DB}"
    apply(cluster, [{"apiVersion": "v1", "kind": "Secret", "metadata": {
        "name": "store", "namespace": NS}, "stringData": {"dsn": dsn}}])
    return {"store": {"dsnSecret": {"name": "store"}}, "localHomeserver": "fgentic.local",
            "memoryApi": {"enabled": True, "networkPolicy": {"storePort": postgres.port}}}


def _cert_manager_issues(release: Release) -> str:
    """What cert-manager's CA issuer writes for the chart's Certificate: a kubernetes.io/tls
    Secret with the leaf, its key and the CA (ca.crt); the CA, base64."""
    service = f"{release.name}-webhook"
    ca = CertificateAuthority(f"{release.name}-webhook-ca")
    leaf = ca.issue_server([service, f"{service}.{NS}", f"{service}.{NS}.svc",
                            f"{service}.{NS}.svc.cluster.local"])
    ca_b64 = base64.b64encode(ca.cert_pem).decode()
    apply(release.cluster, [{
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
        "metadata": {"name": CM_SECRET, "namespace": NS},
        "data": {"tls.crt": base64.b64encode(leaf.cert_pem).decode(),
                 "tls.key": base64.b64encode(leaf.key_pem).decode(), "ca.crt": ca_b64}}])
    return ca_b64


def _inject(release: Release, ca_b64: str) -> None:
    """cert-manager's CA injector: the Certificate's CA into every configuration annotated
    cert-manager.io/inject-ca-from=<namespace>/<certificate>."""
    config = release.json("get", "validatingwebhookconfiguration", release.name)
    assert config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == \
        f"{NS}/{release.name}-webhook"
    patch = [{"op": "add", "path": f"/webhooks/{i}/clientConfig/caBundle", "value": ca_b64}
             for i in range(len(config["webhooks"]))]
    release.kubectl("patch", "validatingwebhookconfiguration", release.name, "--type=json",
                    "-p", json.dumps(patch))


def _serving(release: Release) -> list[dict[str, Any]] | None:
    """The webhook's pods once exactly its two replicas run (none terminating) and are
    Ready."""
    pods = [p for p in release.pods("webhook") if not p["metadata"].get("deletionTimestamp")]
    return pods if len(pods) == 2 and all(ready(p) for p in pods) else None


def _admits(release: Release, step: str) -> None:
    pods = converge(lambda: _serving(release), f"two Ready webhook pods ({step})")
    for pod in pods:  # the defaults' webhook exited at start-up, again and again
        restarts = [s["restartCount"] for s in pod["status"]["containerStatuses"]]
        assert restarts == [0], (step, release.logs("webhook")[-3000:])
    agent = yaml.safe_load(AGENT.read_text())
    agent["metadata"] = {"name": f"switch-{step}", "namespace": "default"}
    converge(lambda: kubectl_result(release.cluster, "create", "--dry-run=server", "-f", "-",
                                    input=json.dumps(agent)).returncode == 0,
             f"an Agent admitted ({step})", timeout=60)


@pytest.fixture
def tier(release: Release) -> Release:
    """The tier's release: this one's CRDs are its."""
    return release


@pytest.fixture
def embeddings() -> Iterator[int]:
    """A hashing embedder on the bridge (the retrieval server is not ready without one)."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "fgentic_devenv.embedder", "--host",
                             BRIDGE_ADDRESS, "--port", str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        yield port
    finally:
        terminate(proc)


def test_every_switch_installs_and_its_webhook_admits(
        tier: Release, cluster_postgres: LocalPostgres, image: tuple[Path, str],
        embeddings: int) -> None:
    started, cluster = time.monotonic(), tier.cluster
    release = Release(cluster, _base(image[1]), name=RELEASE, namespace=NS)
    try:
        release.install()
        _admits(release, "defaults")
        retrieval = _retrieval_inputs(cluster, cluster_postgres, embeddings)
        release.upgrade(retrievalServer=retrieval)  # a retrieval-only platform
        _admits(release, "retrieval")
        memory = _memory_inputs(cluster, cluster_postgres)
        release.upgrade(retrievalServer=retrieval, **memory)
        _admits(release, "memory-and-retrieval")
        mutating = release.json("get", "mutatingwebhookconfiguration", release.name)
        assert all(h["clientConfig"].get("caBundle") for h in mutating["webhooks"])
        # Both off again: the Pod routing's configuration and the right to read it are gone.
        release.upgrade(store=memory["store"])
        _admits(release, "memory-off")
        assert kubectl_result(cluster, "get", "mutatingwebhookconfiguration",
                              release.name).returncode != 0
        cluster.cp.install_crds(CERT_MANAGER_CRDS)
        ca_b64 = _cert_manager_issues(release)
        tls = {"mode": "certManager", "secretName": CM_SECRET}
        release.upgrade(webhook={"tls": tls})  # Issuers and Certificates: cert-manager's schema
        (certificate,) = [c for c in release.json("get", "certificates", "-n", NS)["items"]
                          if c["metadata"]["name"] == f"{release.name}-webhook"]
        assert certificate["spec"]["secretName"] == CM_SECRET
        _inject(release, ca_b64)
        _admits(release, "cert-manager")
    finally:
        release.uninstall()
        cluster.kubectl("delete", "--ignore-not-found", *[
            arg for path in CERT_MANAGER_CRDS for arg in ("-f", str(path))])
        # Nothing of this release may outlive it: the tier's removal test then checks that
        # nothing labelled ours remains and drops the store's roles, which are the server's,
        # not a database's (this release's databases hold grants to them).
        cluster.kubectl("delete", "namespace", NS, "--ignore-not-found", "--wait=true",
                        "--timeout=120s", timeout=150)
        for database in (STORE_DB, CORPUS_DB):
            asyncio.run(cluster_postgres.drop_database(database))
    print(f"switches: {time.monotonic() - started:.0f} s")
