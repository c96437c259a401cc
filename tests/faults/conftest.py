"""Fixtures of the fault tests: the operator process in each of its set-ups, and a dedicated
PostgreSQL and control plane for the tests that stop or restart them (the session ones stay
untouched). The store on the shared PostgreSQL (`store`) comes from tests/conftest.py."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from fgentic_devenv.binaries import upstream_crds
from fgentic_devenv.controlplane import LocalControlPlane
from fgentic_devenv.postgres import LocalPostgres
from fgentic_governance.api.common import OriginKind, Principal
from fgentic_governance.cli.offboard import object_name
from fgentic_governance.memory import MemoryStore
from tests.support.faults import Cluster, Operator, new_namespace, new_principal
from tests.support.kube import project_crds
from tests.support.store import migrated_pool


@pytest.fixture
def cluster(k8s_client: k8s.ApiClient) -> Cluster:
    return Cluster(k8s_client)


@pytest.fixture
def own_postgres(tmp_path: Path) -> Iterator[LocalPostgres]:
    """A PostgreSQL of this test alone: it is stopped and restarted mid-flow."""
    with LocalPostgres(tmp_path / "own-postgres") as server:
        yield server


@pytest.fixture
async def own_dsn(own_postgres: LocalPostgres) -> str:
    return await own_postgres.create_database("faults", extensions=("vector",))


@pytest.fixture
async def own_store(own_dsn: str) -> AsyncIterator[MemoryStore]:
    """The fenced store on this test's own PostgreSQL; terminated, not closed, afterwards (the
    server may have been stopped under it)."""
    pool = await migrated_pool(own_dsn, max_size=4)
    yield MemoryStore(pool)
    pool.terminate()


@pytest.fixture
def own_control_plane(tmp_path: Path) -> Iterator[LocalControlPlane]:
    """etcd + kube-apiserver of this test alone: its kube-apiserver is restarted mid-run."""
    with LocalControlPlane(tmp_path / "own-controlplane") as plane:
        plane.install_crds([*upstream_crds(), *project_crds()])
        yield plane


@pytest.fixture
def own_cluster(own_control_plane: LocalControlPlane) -> Iterator[Cluster]:
    api = k8s_config.new_client_from_config(  # type: ignore[no-untyped-call]
        config_file=str(own_control_plane.kubeconfig))
    try:
        yield Cluster(api)
    finally:
        api.close()


# -- the operator ----------------------------------------------------------------------------
# Each fixture depends on its store fixture so that the schema is migrated before the operator
# starts; each checks afterwards that no memory content reached the operator's log.


@pytest.fixture
def namespaced_operator(request: pytest.FixtureRequest, control_plane: LocalControlPlane,
                        pg_dsn: str, store: MemoryStore,
                        tmp_path: Path) -> Iterator[tuple[Operator, str]]:
    """(operator watching only a fresh namespace, that namespace); not started."""
    module = request.module.__name__.rpartition(".")[2].removeprefix("test_")
    ns = new_namespace(f"fault-{module.replace('_', '-')}")
    control_plane.ensure_namespace(ns)
    op = Operator(control_plane.kubeconfig, pg_dsn, tmp_path, namespace=ns)
    yield op, ns
    op.stop()
    op.assert_content_free()


def _clusterwide(control_plane: LocalControlPlane, dsn: str, cluster: Cluster, work: Path, *,
                 prefix: str, start: bool) -> Iterator[tuple[Operator, str, str]]:
    """(clusterwide operator, namespace, principal); the principal's offboarding (cluster-scoped)
    is deleted afterwards."""
    ns = new_namespace(prefix)
    control_plane.ensure_namespace(ns)
    principal = new_principal()
    op = Operator(control_plane.kubeconfig, dsn, work)
    if start:
        op.start()
    yield op, ns, principal
    op.stop()
    op.assert_content_free()
    cluster.delete_offboarding(object_name(Principal(mxid=principal,
                                                     origin_kind=OriginKind.NATIVE_LOCAL)))


@pytest.fixture
def clusterwide_operator(control_plane: LocalControlPlane, pg_dsn: str, store: MemoryStore,
                         cluster: Cluster, tmp_path: Path) -> Iterator[tuple[Operator, str, str]]:
    """(operator, namespace, principal) on the shared PostgreSQL; not started.
    PrincipalOffboarding is cluster-scoped, so the operator watches every namespace."""
    yield from _clusterwide(control_plane, pg_dsn, cluster, tmp_path, prefix="fault-offboard",
                            start=False)


@pytest.fixture
def own_store_operator(control_plane: LocalControlPlane, own_dsn: str, own_store: MemoryStore,
                       cluster: Cluster, tmp_path: Path) -> Iterator[tuple[Operator, str, str]]:
    """(operator, namespace, principal) on this test's own PostgreSQL; started, clusterwide."""
    yield from _clusterwide(control_plane, own_dsn, cluster, tmp_path, prefix="fault-store",
                            start=True)


@pytest.fixture
def own_plane_operator(own_control_plane: LocalControlPlane, pg_dsn: str, store: MemoryStore,
                       tmp_path: Path) -> Iterator[Operator]:
    """A clusterwide operator on this test's own control plane (and the shared PostgreSQL);
    started."""
    op = Operator(own_control_plane.kubeconfig, pg_dsn, tmp_path)
    op.start()
    yield op
    op.stop()
    op.assert_content_free()
