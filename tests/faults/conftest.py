"""Fixtures of the fault tests: a store on the shared PostgreSQL, and a dedicated PostgreSQL
and control plane for the tests that stop or restart them (the session ones stay untouched)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import asyncpg
import pytest
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from fgentic_governance.devenv.binaries import upstream_crds
from fgentic_governance.devenv.controlplane import LocalControlPlane
from fgentic_governance.devenv.postgres import LocalPostgres
from fgentic_governance.memory import MemoryStore, migrate
from tests.conftest import project_crds
from tests.faults.harness import Cluster


async def _store(dsn: str) -> tuple[asyncpg.Pool, MemoryStore]:
    pool = await asyncpg.create_pool(dsn, min_size=1, max_size=4)
    async with pool.acquire() as conn:
        await migrate(conn)
    return pool, MemoryStore(pool)


@pytest.fixture
async def store(pg_dsn: str) -> AsyncIterator[MemoryStore]:
    """The fenced store in a fresh database of the shared PostgreSQL."""
    pool, store = await _store(pg_dsn)
    yield store
    await pool.close()


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
