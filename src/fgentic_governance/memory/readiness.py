"""Readiness of a store pool, said as what it is: ready, restarting, or unavailable.

A PostgreSQL whose backend crashed makes the postmaster end every session (57P02) and refuse
new ones while it recovers (57P03); that is a restart, not an outage, and the servers' /readyz
and logs say so with a bounded code instead of only failing the next request.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Final

import asyncpg
from prometheus_client import Gauge

from fgentic_governance.reasons import Reason

READY_SECONDS: Final = 2.0
# crash_shutdown, cannot_connect_now (starting up, in recovery, shutting down).
RESTARTING_STATES: Final = frozenset({"57P02", "57P03"})
STORE_UP: Final = Gauge("fgentic_store_up",
                        "1 while the content store answered this process's last readiness "
                        "probe, else 0.")


def reason_of(exc: BaseException) -> Reason:
    if isinstance(exc, asyncpg.PostgresError) and exc.sqlstate in RESTARTING_STATES:
        return Reason.STORE_RESTARTING
    return Reason.STORE_UNAVAILABLE


async def probe(pool: Any, seconds: float = READY_SECONDS) -> Reason:
    """OK when the pool hands out a connection that answers within ``seconds``. A pooled
    connection that the server already closed says nothing of the server: one more try."""
    return (await probe_cause(pool, seconds))[0]


async def probe_cause(pool: Any, seconds: float = READY_SECONDS) -> tuple[Reason, str]:
    """:func:`probe` and, when not OK, the failure's class name (``TimeoutError``: nothing
    answered, as when a NetworkPolicy drops the store's port; ``ConnectionRefusedError``,
    ``InvalidPasswordError``...), never its message."""
    try:
        async with asyncio.timeout(seconds):
            for attempt in (1, 2):
                try:
                    async with pool.acquire() as conn:
                        await conn.fetchval("SELECT 1")
                    break
                except asyncpg.ConnectionDoesNotExistError:
                    if attempt == 2:
                        raise
    except Exception as exc:  # Any failure means "cannot serve"; only its class is told.
        return reason_of(exc), type(exc).__name__
    return Reason.OK, ""


# A superuser, or a member of the fenced schema's owner, could leave any role it assumed
# (SET ROLE NONE) and act as the owner: disable triggers, read every row (memory.md §14).
_PRIVILEGED: Final = """
SELECT r.rolsuper OR pg_has_role(session_user, n.nspowner, 'MEMBER')
  FROM pg_roles r CROSS JOIN pg_namespace n
 WHERE r.rolname = session_user AND n.nspname = 'fgentic_memory'
"""


async def login_privileged(pool: Any, seconds: float = READY_SECONDS) -> bool | None:
    """Whether the pool's login could act as the store's owner; None before the schema
    exists. Raises what the store raised (the caller says it as a bounded code)."""
    async with asyncio.timeout(seconds), pool.acquire() as conn:
        found = await conn.fetchval(_PRIVILEGED)
    return None if found is None else bool(found)


class StoreReadiness:
    """Probes ``pool`` and logs each change of its state once, as a bounded code."""

    def __init__(self, pool: Any, log: logging.Logger, seconds: float = READY_SECONDS) -> None:
        self._pool, self._log, self._seconds = pool, log, seconds
        self.last = Reason.OK

    async def __call__(self) -> Reason:
        reason, cause = await probe_cause(self._pool, self._seconds)
        STORE_UP.set(1 if reason is Reason.OK else 0)
        if reason is not self.last:
            level = logging.INFO if reason is Reason.OK else logging.WARNING
            self._log.log(level, "store-ready reason=%s was=%s cause=%s", reason.value,
                          self.last.value, cause or "-")
            self.last = reason
        return reason
