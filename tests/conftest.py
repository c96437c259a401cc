"""Shared fixtures: a real kube-apiserver + etcd and a real PostgreSQL, started once per session.

Integration tests never skip. If a binary cannot be found or built, the fixture errors and the
test fails, so there is no FGENTIC_REQUIRE_INTEGRATION switch; a skip reported by a test marked
`integration` is turned into a failure below.
"""

from __future__ import annotations

import importlib.util
import re
import sys
import uuid
from collections.abc import AsyncIterator, Generator, Iterator
from pathlib import Path

import pytest

_ROOT = Path(__file__).resolve().parents[1]
# Run from a plain checkout too (no `pip install -e .`).
if importlib.util.find_spec("fgentic_governance") is None:
    sys.path[:0] = [str(_ROOT / "src"), str(_ROOT / "devtools")]

import asyncpg  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402
from kubernetes import client as k8s  # noqa: E402
from kubernetes import config as k8s_config  # noqa: E402

from fgentic_devenv.binaries import upstream_crds  # noqa: E402
from fgentic_devenv.controlplane import LocalControlPlane  # noqa: E402
from fgentic_devenv.postgres import LocalPostgres  # noqa: E402
from fgentic_governance.memory import MemoryStore  # noqa: E402
from tests.support.kube import project_crds  # noqa: E402
from tests.support.store import migrated_pool  # noqa: E402

# A property's speed is asserted where it matters (e.g. test_worst_case_inputs_stay_fast), never
# by Hypothesis's per-example deadline, which one CPU stall on a loaded CI host would trip.
settings.register_profile("suite", deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("suite")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    integration_dir = _ROOT / "tests" / "integration"
    cluster_dir = _ROOT / "tests" / "cluster"
    for item in items:
        if integration_dir in item.path.parents:
            item.add_marker(pytest.mark.integration)
        if cluster_dir in item.path.parents:  # a real node: must never skip either
            item.add_marker(pytest.mark.cluster)
            item.add_marker(pytest.mark.integration)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.skipped and item.get_closest_marker("integration") and not hasattr(
        report, "wasxfail"
    ):
        report.outcome = "failed"
        report.longrepr = f"integration tests must not skip: {report.longrepr}"
    return report


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalControlPlane]:
    with LocalControlPlane(tmp_path_factory.mktemp("controlplane")) as plane:
        plane.install_crds([*upstream_crds(), *project_crds()])
        yield plane


@pytest.fixture(scope="session")
def kubeconfig(control_plane: LocalControlPlane) -> Path:
    return control_plane.kubeconfig


@pytest.fixture(scope="session")
def k8s_client(kubeconfig: Path) -> Iterator[k8s.ApiClient]:
    api = k8s_config.new_client_from_config(  # type: ignore[no-untyped-call]
        config_file=str(kubeconfig)
    )
    try:
        yield api
    finally:
        api.close()


@pytest.fixture(scope="session")
def postgres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalPostgres]:
    with LocalPostgres(tmp_path_factory.mktemp("postgres")) as server:
        yield server


@pytest.fixture
async def pg_dsn(postgres: LocalPostgres, request: pytest.FixtureRequest) -> AsyncIterator[str]:
    """A fresh database (with pgvector) per test, named after the test for easier debugging."""
    stem = re.sub(r"[^a-z0-9]+", "_", request.node.name.lower())[:40].strip("_")
    name = f"t_{stem}_{uuid.uuid4().hex[:8]}"
    dsn = await postgres.create_database(name, extensions=("vector",))
    yield dsn
    await postgres.drop_database(name)


@pytest.fixture
async def pool(pg_dsn: str) -> AsyncIterator[asyncpg.Pool]:
    """Owner (operator) connections to the test's database; the schema is migrated once."""
    owner = await migrated_pool(pg_dsn, max_size=24)
    yield owner
    await owner.close()


@pytest.fixture
def store(pool: asyncpg.Pool) -> MemoryStore:
    """The fenced content store on ``pool``."""
    return MemoryStore(pool)
