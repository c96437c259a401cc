"""Readiness says what the store is doing: restarting after a crash is not an outage."""

from __future__ import annotations

import json

import asyncpg
import pytest

from fgentic_governance.memory.readiness import reason_of
from fgentic_governance.memoryapi import http, proxy
from fgentic_governance.reasons import Reason


@pytest.mark.parametrize(("error", "reason"), [
    (asyncpg.CannotConnectNowError("in recovery"), Reason.STORE_RESTARTING),
    (asyncpg.CrashShutdownError("crash of another server process"), Reason.STORE_RESTARTING),
    (asyncpg.AdminShutdownError("administrator command"), Reason.STORE_UNAVAILABLE),
    (asyncpg.ConnectionDoesNotExistError("closed"), Reason.STORE_UNAVAILABLE),
    (OSError("refused"), Reason.STORE_UNAVAILABLE), (TimeoutError(), Reason.STORE_UNAVAILABLE),
])
def test_a_crash_or_recovery_is_restarting_anything_else_unavailable(
        error: BaseException, reason: Reason) -> None:
    assert reason_of(error) is reason


@pytest.mark.parametrize("state", [Reason.OK, Reason.STORE_RESTARTING, Reason.STORE_UNAVAILABLE])
async def test_the_memory_apis_readyz_answers_the_stores_state(state: Reason) -> None:
    async def store_ready() -> Reason:
        return state

    answer = await http._probe(True, proxy.InFlight(4, 1), store_ready)
    assert answer.status == (200 if state is Reason.OK else 503)
    assert answer.body is not None and json.loads(bytes(answer.body)) == {"reason": state.value}


async def test_an_unreachable_store_is_logged_once_with_its_cause(
        caplog: pytest.LogCaptureFixture) -> None:
    """Issue 27: a store port a NetworkPolicy drops showed only as readiness 503; the log
    now says the state change once, with the failure's class (never its message)."""
    import logging
    from contextlib import asynccontextmanager
    from typing import Any

    from fgentic_governance.memory.readiness import StoreReadiness

    class Dropped:
        @asynccontextmanager
        async def acquire(self) -> Any:
            raise TimeoutError("SENTINEL host and port")
            yield

    log = logging.getLogger("test.readiness")
    ready = StoreReadiness(Dropped(), log, seconds=0.5)
    with caplog.at_level(logging.INFO, logger="test.readiness"):
        assert await ready() is Reason.STORE_UNAVAILABLE
        assert await ready() is Reason.STORE_UNAVAILABLE
    assert [r.getMessage() for r in caplog.records] == [
        "store-ready reason=STORE_UNAVAILABLE was=OK cause=TimeoutError"]
