"""Issue 39: the operator's reconcile lane and erasure lane, with the real operator, apiserver
and PostgreSQL. The test itself saturates the scope lane: it row-locks scopes in the store and
pokes them, so their reconciles block inside the store holding every pooled connection (the
state of an overloaded operator at 10,000 scopes, made deterministic)."""

from __future__ import annotations

import asyncio
import os
import signal
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from kubernetes import client

from fgentic_devenv import child_pids, wait_until
from fgentic_governance.api.memory import MemoryScopeSpec
from fgentic_governance.controller.erasure_process import application_name
from fgentic_governance.memory import ScopeRecord
from tests.support import processes
from tests.support.kube import GROUP, VERSION, phase, until_status
from tests.support.objects import consent_obj, example, scope_obj
from tests.support.polling import until, until_async

pytestmark = pytest.mark.integration

POOL_SIZE = 8  # tuning.RECONCILE_SLOTS (default): the operator's scope pool and its slots
LOCKED = 2 * POOL_SIZE  # half block in the store, half queue behind them
POKE = f"{GROUP}/consent-revision"
HOLDER = f"@holder-{uuid.uuid4().hex[:8]}:fgentic.local"
LEAVER = f"@leaver-{uuid.uuid4().hex[:8]}:fgentic.local"
WAITING = """SELECT pid, query_start FROM pg_stat_activity
              WHERE datname = current_database() AND pid <> pg_backend_pid()
                AND wait_event_type = 'Lock'"""
SCOPE_FAILED_UNAVAILABLE = ('fgentic_scope_reconciles_total'
                            '{phase="Failed",reason="STORE_UNAVAILABLE"}')
SCOPE_ENABLED = 'fgentic_scope_reconciles_total{phase="Enabled",reason="OK"}'


@pytest.fixture
def env(control_plane: Any, pg_dsn: str, tmp_path: Path,
        k8s_client: client.ApiClient) -> Iterator[dict[str, Any]]:
    ns = f"lanes-{uuid.uuid4().hex[:8]}"
    control_plane.ensure_namespace(ns)
    (tmp_path / "dsn").write_text(pg_dsn)
    port = processes.free_port()
    log = tmp_path / "op.log"
    # No resync during the test: every reconcile counted here is one the test caused.
    proc = processes.spawn_cli(
        ["operator", "--kubeconfig", str(control_plane.kubeconfig), "--namespace", ns,
         "--local-homeserver", "fgentic.local", "--store-dsn-file", str(tmp_path / "dsn"),
         "--metrics-port", str(port), "--erasure-process"], log,
        env={"FGENTIC_SCOPE_RESYNC_SECONDS": "3600"})
    # Scopes created before the store is open would wait for a resync the test turned off.
    wait_until(lambda: "content store ready" in log.read_text(), proc, what="operator store",
               log=log, timeout=60)
    yield {"ns": ns, "port": port, "log": log, "api": client.CustomObjectsApi(k8s_client),
           "proc": proc}
    processes.stop(proc)


@pytest.fixture
async def locker(pg_dsn: str) -> AsyncIterator[asyncpg.Connection]:
    conn = await asyncpg.connect(pg_dsn)
    # The test's own session holds its locks until the test says (the database pins 30 s
    # for idle transactions); each test still ends it, and the tests' timeouts bound it.
    await conn.execute("SET idle_in_transaction_session_timeout = 0")
    yield conn
    await conn.close()


@pytest.fixture
async def watcher(pg_dsn: str) -> AsyncIterator[asyncpg.Connection]:
    """Reads pg_stat_activity outside the locker's transaction: within one transaction
    PostgreSQL answers from the snapshot it took at the first read."""
    conn = await asyncpg.connect(pg_dsn)
    yield conn
    await conn.close()


async def _enabled(env: dict[str, Any], names: list[str], mxid: str) -> list[str]:
    """Create each scope with a granting consent; wait for Enabled; their store keys."""
    api, ns = env["api"], env["ns"]
    keys = []
    for name in names:
        scope = scope_obj(ns, name, mxid)
        api.create_namespaced_custom_object(GROUP, VERSION, ns, "memoryscopes", scope)
        api.create_namespaced_custom_object(GROUP, VERSION, ns, "consentrecords",
                                            consent_obj(ns, name, mxid))
        spec = MemoryScopeSpec.model_validate(scope["spec"])
        keys.append(ScopeRecord.from_spec(ns, name, spec).scope_key)
    for name in names:
        await until_status(api, "memoryscopes", ns, name, phase("Enabled"), timeout=120)
    return keys


async def _block_scope_lane(env: dict[str, Any], locker: asyncpg.Connection,
                            watcher: asyncpg.Connection, names: list[str],
                            keys: list[str]) -> set[tuple[int, Any]]:
    """Row-lock the scopes, poke them all at once, and return the operator's statements that
    then wait on the locks: one per pooled connection (a precondition read from the store)."""
    await locker.execute("BEGIN")
    await locker.fetch("SELECT 1 FROM fgentic_memory.scope WHERE scope_key = ANY($1::text[]) "
                       "FOR UPDATE", keys)
    api, ns = env["api"], env["ns"]
    stamp = uuid.uuid4().hex
    await asyncio.gather(*(asyncio.to_thread(
        api.patch_namespaced_custom_object, GROUP, VERSION, ns, "memoryscopes", name,
        {"metadata": {"annotations": {POKE: stamp}}}) for name in names))
    blocked = await until_async(lambda: _waiting(watcher), f"{POOL_SIZE} statements blocked", 60,
                                interval=0.05, holds=lambda found: len(found) >= POOL_SIZE)
    assert len(blocked) == POOL_SIZE, [tuple(r) for r in await watcher.fetch(
        "SELECT state, wait_event_type, wait_event, left(query, 60) FROM pg_stat_activity "
        "WHERE datname = current_database()")]
    return blocked


async def _waiting(watcher: asyncpg.Connection) -> set[tuple[int, Any]]:
    return {(r["pid"], r["query_start"]) for r in await watcher.fetch(WAITING)}


async def test_an_offboarding_is_ready_while_the_scope_lane_is_blocked(
    env: dict[str, Any], locker: asyncpg.Connection, watcher: asyncpg.Connection
) -> None:
    """The erasure lane: with every scope connection blocked in the store and more scope
    reconciles queued, a PrincipalOffboarding still erases and reaches ReadyForDeactivation
    while the very same scope statements are still waiting (an ordering, not a time)."""
    names = [f"held-{i}" for i in range(LOCKED)]
    keys = await _enabled(env, names, HOLDER)
    await _enabled(env, ["leaver-a", "leaver-b"], LEAVER)
    blocked = await _block_scope_lane(env, locker, watcher, names, keys)
    offboarding = example("PrincipalOffboarding")
    offboarding["metadata"] = {"name": f"leaver-{uuid.uuid4().hex[:6]}"}
    offboarding["spec"]["principal"]["mxid"] = LEAVER
    env["api"].create_cluster_custom_object(GROUP, VERSION, "principaloffboardings",
                                            offboarding)
    try:
        done = await until_status(env["api"], "principaloffboardings", "",
                                  offboarding["metadata"]["name"],
                                  phase("ReadyForDeactivation"), timeout=60)
        assert blocked <= await _waiting(watcher), "the scope lane was free before Ready"
        assert (done["status"]["scopesFound"], done["status"]["scopesErased"]) == (2, 2)
        # Its flow ran in the erasure process: the operator's one child holds its connections.
        (child,) = child_pids(env["proc"].pid)
        assert await watcher.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1",
            application_name(child)) >= 1
    finally:
        await locker.execute("ROLLBACK")
        env["api"].delete_cluster_custom_object(GROUP, VERSION, "principaloffboardings",
                                                offboarding["metadata"]["name"])


def test_the_operator_stops_when_its_erasure_process_dies(env: dict[str, Any]) -> None:
    """Offboardings would go unhandled: the operator exits 1 to be restarted, and says why."""
    proc = env["proc"]
    (child,) = child_pids(proc.pid)
    os.kill(child, signal.SIGKILL)
    assert until(proc.poll, "the operator's exit", 30) == 1
    assert "the erasure process ended" in env["log"].read_text()


async def test_an_overloaded_scope_lane_waits_and_never_reports_the_store_unavailable(
    env: dict[str, Any], locker: asyncpg.Connection, watcher: asyncpg.Connection
) -> None:
    """The reconcile lane: twice as many scope reconciles as pooled connections, half of them
    blocked in the store until PostgreSQL's own lock_timeout ends them. The other half wait
    for a slot instead of timing out on the pool: no scope is ever reported Failed with
    STORE_UNAVAILABLE (the flap Enabled → Failed → Enabled that cost writes and Events), and
    all end Enabled again."""
    names = [f"held-{i}" for i in range(LOCKED)]
    keys = await _enabled(env, names, HOLDER)
    enabled_before = processes.metric(env["port"], SCOPE_ENABLED) or 0.0
    assert processes.metric(env["port"], SCOPE_FAILED_UNAVAILABLE) is None
    blocked = await _block_scope_lane(env, locker, watcher, names, keys)
    # Hold the locks until the store itself ends the blocked statements (lock_timeout), which
    # is longer than the pool's acquire timeout: the queued half has waited past it by then.
    await until_async(lambda: _waiting(watcher), "the store to end the blocked statements", 60,
                      interval=0.1, holds=lambda waiting: not blocked <= waiting)
    await locker.execute("ROLLBACK")
    await until_async(lambda: processes.metric(env["port"], SCOPE_ENABLED) or 0.0,
                      f"{LOCKED} more scopes enabled", 120,
                      holds=lambda enabled: enabled >= enabled_before + LOCKED)
    assert processes.metric(env["port"], SCOPE_FAILED_UNAVAILABLE) is None
    assert (processes.metric(env["port"], SCOPE_ENABLED) or 0.0) >= enabled_before + LOCKED
    for name in names:
        await until_status(env["api"], "memoryscopes", env["ns"], name, phase("Enabled"))
