"""The cluster tier: our image and chart on a real single-node cluster (fgentic_devenv/node.py).

One node for the whole package: built image imported, upstream CRDs installed, a PostgreSQL on
the host reachable from pods over the test bridge, the chart installed by helm. Teardown
checks that nothing of the node is left on this machine (a failure there fails the run).
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from fgentic_devenv.binaries import upstream_dir
from fgentic_devenv.node import BRIDGE_ADDRESS, POD_CIDR, LocalCluster, leftovers
from fgentic_devenv.paths import repo_root
from fgentic_devenv.postgres import SUPERUSER, LocalPostgres
from tests.support import install_doc
from tests.support.cluster import (
    NAMESPACE,
    Release,
    apply,
    built_image,
    kubectl_apply,
    merge_values,
)
from tests.support.store import migrated_pool

LOCAL_HOMESERVER = "fgentic.local"
STORE_DB = "fgentic_cluster"
AGENT_NAMESPACE = "team-mem"
# The node's DNS answers only kubernetes.default (NODE.md): the memory API and the controller
# stand-in get pinned Service addresses in the static band of the Service range.
MEMORY_API_IP = "10.96.77.12"
CONTROLLER_IP = "10.96.77.13"
"""Where test_memory_routing.py runs a memory-enabled Agent's Pod (the chart renders the
routed-egress NetworkPolicy there)."""


@pytest.fixture(scope="package")
def image() -> tuple[Path, str]:
    return built_image()


@pytest.fixture(scope="package")
def cluster(tmp_path_factory: pytest.TempPathFactory,
            image: tuple[Path, str]) -> Iterator[LocalCluster]:
    workdir = tmp_path_factory.mktemp("cluster")
    node = LocalCluster(workdir, images=[image[0]])
    with node:
        # docs/install.md's prerequisites block, as written (kubectl apply --server-side of
        # kagent's, Gateway API's and agentgateway's CRDs): the page cannot drift from the tier.
        install_doc.apply_prerequisites(node.kubectl, upstream_dir())
        yield node
    left = leftovers(workdir)
    assert not left, f"the cluster left these behind: {left}"


@pytest.fixture(scope="package")
def cluster_postgres(tmp_path_factory: pytest.TempPathFactory,
                     cluster: LocalCluster) -> Iterator[LocalPostgres]:
    """On the host, listening on loopback and the bridge; pods reach it at the bridge address."""
    with LocalPostgres(tmp_path_factory.mktemp("cluster-pg"),
                       pod_network=(BRIDGE_ADDRESS, POD_CIDR)) as server:
        asyncio.run(server.create_database(STORE_DB, extensions=("vector",)))
        yield server


@pytest.fixture(scope="package")
def host_dsn(cluster_postgres: LocalPostgres) -> str:
    """The store as the tests on the host reach it (loopback)."""
    return cluster_postgres.dsn(STORE_DB)


@pytest.fixture(scope="package")
def control_token() -> str:
    return secrets.token_urlsafe(32)


MEMORY_API_LOGIN = "fgentic_memory_api"
MEMORY_API_SECRET = "fg-memory-api-store"


async def _memory_api_login(dsn: str) -> None:
    """A login holding fgentic_memory_delegate and nothing more, on a migrated store."""
    pool = await migrated_pool(dsn, max_size=1)
    try:
        if not await pool.fetchval("SELECT 1 FROM pg_roles WHERE rolname = $1",
                                   MEMORY_API_LOGIN):
            await pool.execute(f"CREATE ROLE {MEMORY_API_LOGIN} LOGIN")
        await pool.execute(f"GRANT fgentic_memory_delegate TO {MEMORY_API_LOGIN}")
    finally:
        await pool.close()


KAGENT_PEERS = [{"namespaceSelector": {"matchLabels": {
    "kubernetes.io/metadata.name": "kagent"}}}]


@pytest.fixture(scope="package")
def release(cluster: LocalCluster, cluster_postgres: LocalPostgres, image: tuple[Path, str],
            control_token: str) -> Iterator[Release]:
    repository, tag = image[1].rsplit(":", 1)
    pod_dsn = f"postgresql://{SUPERUSER}@{BRIDGE_ADDRESS}:{cluster_postgres.port}/{STORE_DB}"
    # docs/install.md's helm install, as written (its store port taken from the DSN, as the
    # doc derives it), plus only what this node needs: its image, the API server's source
    # address, pinned Service addresses (no cluster DNS here), the stand-in controller and
    # provider routes, and the tier's own Agent namespace.
    documented = install_doc.documented_install(store_port=cluster_postgres.port)
    on_node = install_doc.values_of(install_doc.documented_node_flags())
    named = install_doc.secrets_named(documented)
    # docs/install.md, "The memory API's own login": made before the install here, on a store
    # migrated first (the operator's migration then finds it current). The memory API is not
    # ready on a login that could act as the owner, so every routed call of the tier shows it.
    asyncio.run(_memory_api_login(cluster_postgres.dsn(STORE_DB)))
    api_dsn = f"postgresql://{MEMORY_API_LOGIN}@{BRIDGE_ADDRESS}:{cluster_postgres.port}/{STORE_DB}"
    apply(cluster, [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        # The chart renders a NetworkPolicy into each memoryApi.agentNamespaces entry.
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {
            "name": AGENT_NAMESPACE, "labels": {"fgentic.dev/memory-routing": "enabled"}}},
        {"apiVersion": "v1", "kind": "Secret",
         "metadata": {"name": named["store"][0], "namespace": NAMESPACE},
         "stringData": {named["store"][1]: pod_dsn}},
        {"apiVersion": "v1", "kind": "Secret",
         "metadata": {"name": named["token"][0], "namespace": NAMESPACE},
         "stringData": {named["token"][1]: control_token}},
        {"apiVersion": "v1", "kind": "Secret",
         "metadata": {"name": MEMORY_API_SECRET, "namespace": NAMESPACE},
         "stringData": {"dsn": api_dsn}},
    ])
    # docs/install.md's single-node flags, as written: this node's addresses.
    assert on_node["webhook"]["networkPolicy"]["apiServerSources"] == [
        {"ipBlock": {"cidr": f"{BRIDGE_ADDRESS}/32"}}]
    assert on_node["memoryApi"]["service"]["clusterIP"] == MEMORY_API_IP
    node = {
        "image": {"repository": repository, "tag": tag},
        # kagent's controller is a stand-in Service in namespace kagent
        # (test_memory_routing.py); the governed provider routes go to the same echo.
        "memoryApi": {"controllerUrl": f"http://{CONTROLLER_IP}:8083",
                      "embeddingsUpstream": f"http://{CONTROLLER_IP}:8083/v1/embeddings",
                      "modelUpstream": f"http://{CONTROLLER_IP}:8083/v1/chat/completions",
                      "networkPolicy": {"embeddingsPort": 8083, "embeddingsPeers": KAGENT_PEERS,
                                        "modelPort": 8083, "modelPeers": KAGENT_PEERS},
                      "agentNamespaces": [AGENT_NAMESPACE],
                      "dsnSecret": {"name": MEMORY_API_SECRET}},
    }
    values = merge_values(merge_values(install_doc.values_of(documented), on_node), node)
    assert values["localHomeserver"] == LOCAL_HOMESERVER
    assert values["memoryApi"]["networkPolicy"]["storePort"] == cluster_postgres.port
    installed = Release(cluster, values)
    installed.install()
    yield installed


DEMO_NAMESPACE_MANIFEST = repo_root() / "examples" / "00-namespace.yaml"


@pytest.fixture(scope="package")
def demo_namespace(release: Release) -> str:
    """The examples' namespace (fgentic-demo), made as examples/00-namespace.yaml makes it,
    for every file that needs it: each runs alone (`kubectl apply`, so whichever asks first
    makes it and the others find it)."""
    result = kubectl_apply(release.cluster, DEMO_NAMESPACE_MANIFEST)
    assert result.returncode == 0, result.stderr
    return str(yaml.safe_load(DEMO_NAMESPACE_MANIFEST.read_text())["metadata"]["name"])
