"""ADR 0023 §27: expired memory is physically deleted within 24 hours, and a cleanup that fails
is never silent (issue 36 §5; it used to swallow every error, untested).

The real operator on the shared PostgreSQL, its cleanup every 2 s (an hour by default, at most
6 h). Expired rows leave the table itself, not only every read path, within that interval; a
cleanup that cannot delete (a DBA's SHARE lock on the table outlasts the operator's lock wait)
counts in ``fgentic_store_cleanup_failures_total`` by reason code and shows in every scope's
``ExpiryCleanup`` condition, and both recover with the next run that succeeds.
"""

from __future__ import annotations

import time
from typing import Any

import asyncpg
import pytest

from fgentic_governance.memory import Access, MemoryStore
from tests.support import processes
from tests.support.faults import (
    SENTINEL,
    Cluster,
    Operator,
    enabled_scope,
    new_principal,
    record_of,
)
from tests.support.objects import scope_obj
from tests.support.store import SHORT_TTL, outlive

pytestmark = pytest.mark.integration
FAILED = 'fgentic_store_cleanup_failures_total{reason="STORE_LOCK_TIMEOUT"}'
LAST_SUCCESS = "fgentic_store_cleanup_last_success_timestamp_seconds"


def _cleanup(status: dict[str, Any]) -> tuple[str, str] | None:
    """(status, reason) of the scope's ExpiryCleanup condition."""
    for cond in status.get("conditions") or []:
        if cond.get("type") == "ExpiryCleanup":
            return str(cond["status"]), str(cond["reason"])
    return None


async def test_expired_rows_are_deleted_and_a_failing_cleanup_shows(
    namespaced_operator: tuple[Operator, str], cluster: Cluster, store: MemoryStore,
    pg_dsn: str,
) -> None:
    op, ns = namespaced_operator
    port = processes.free_port()
    op.args += ["--metrics-port", str(port)]
    op.start(env={"FGENTIC_STORE_CLEANUP_SECONDS": "2", "FGENTIC_STORE_SETTINGS_SECONDS": "1"})
    mxid = new_principal()
    scope = scope_obj(ns, "expiring", mxid)
    _, generation = await enabled_scope(cluster, store, scope, mxid, 0)
    key = record_of(scope).scope_key
    access = Access.for_scope(record_of(scope), generation)
    for i in range(3):  # After the operator's first cleanup (it ran before Enabled).
        await store.save(access, f"fact {i} {SENTINEL}", ttl=SHORT_TTL)
    await outlive(time.monotonic())
    # Nothing touches the scope's rows but the operator's cleanup (a gated insert would also
    # delete them): entryCount is the physical count.
    await cluster.until("memoryscopes", ns, "expiring", lambda s: s.get("entryCount") == 0)
    assert await store.entry_count(key) == 0
    assert await cluster.until("memoryscopes", ns, "expiring",
                               lambda s: _cleanup(s) == ("True", "OK"))
    succeeded = processes.metric(port, LAST_SUCCESS)
    assert succeeded is not None and succeeded > 0

    locker = await asyncpg.connect(pg_dsn)
    try:
        await locker.execute("SET idle_in_transaction_session_timeout = 0")
        async with locker.transaction():
            # DELETE waits for this lock longer than the operator's lock_timeout (8 s).
            await locker.execute("LOCK TABLE fgentic_memory.memory IN SHARE MODE")
            await cluster.until("memoryscopes", ns, "expiring",
                                lambda s: _cleanup(s) == ("False", "STORE_LOCK_TIMEOUT"))
            assert (processes.metric(port, FAILED) or 0) >= 1
            held = processes.metric(port, LAST_SUCCESS)
    finally:
        await locker.close()
    assert "expired memory cleanup failed (STORE_LOCK_TIMEOUT)" in op.log.read_text()
    await cluster.until("memoryscopes", ns, "expiring", lambda s: _cleanup(s) == ("True", "OK"))
    recovered = processes.metric(port, LAST_SUCCESS)
    assert held is not None and recovered is not None and recovered > held >= succeeded
