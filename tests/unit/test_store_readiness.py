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


async def test_a_login_that_could_act_as_the_owner_is_said_and_refused_when_required(
        caplog: pytest.LogCaptureFixture) -> None:
    """memoryapi/login.py: the gauge and one log line per change say whether the login is
    privileged; only a required delegate login makes it a refusal. Before the schema exists
    nothing can be said (STORE_SCHEMA_MISMATCH when required, else the store's own answer); a
    store that is down stays its own code."""
    import logging
    from contextlib import asynccontextmanager
    from typing import Any

    from prometheus_client import REGISTRY

    from fgentic_governance.memoryapi.login import LoginReadiness

    class Login:
        privileged: bool | None = True

        @asynccontextmanager
        async def acquire(self) -> Any:
            yield self

        async def fetchval(self, query: str) -> bool | None:
            assert "session_user" in query
            return self.privileged

    store = [Reason.OK]

    async def store_ready() -> Reason:
        return store[0]

    def gauge() -> float | None:
        return REGISTRY.get_sample_value("fgentic_memory_api_store_login_privileged")

    log, login = logging.getLogger("test.login"), Login()
    required = LoginReadiness(store_ready, login, log, require=True)
    reported = LoginReadiness(store_ready, login, log, require=False)
    with caplog.at_level(logging.INFO, logger="test.login"):
        assert await required() is Reason.STORE_LOGIN_PRIVILEGED
        assert await required() is Reason.STORE_LOGIN_PRIVILEGED
        assert gauge() == 1
        assert await reported() is Reason.OK
        login.privileged = False
        assert await required() is Reason.OK
        assert gauge() == 0
        login.privileged = None
        assert await required() is Reason.STORE_SCHEMA_MISMATCH
        assert await reported() is Reason.OK
        store[0] = Reason.STORE_UNAVAILABLE
        assert await required() is Reason.STORE_UNAVAILABLE
    assert [r.getMessage() for r in caplog.records] == [
        "store-login privileged=true required=true",
        "store-login privileged=true required=false",
        "store-login privileged=false required=true"]
