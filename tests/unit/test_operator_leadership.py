"""Review R4-5: the operator leader's renew deadline is a gate (controller/leadership.py).

Past the deadline, counted on the process's own clock from the start of the last successful
renewal, nothing more is done: the process exits before a handler starts or hands its result
to Kopf, before Kopf's session sends a write, and the keeper neither renews nor waits.
The real frozen process: tests/integration/test_operator_leader.py.
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass

import aiohttp
import pytest
from multidict import CIMultiDict
from yarl import URL

from fgentic_governance.controller import leadership
from fgentic_governance.controller import login as kube_login
from fgentic_governance.controller.leadership import RENEW_DEADLINE


class Exited(Exception):
    """os._exit, made observable."""


class Clock:
    def __init__(self) -> None:
        self.at = 1000.0

    def __call__(self) -> float:
        return self.at


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    found = Clock()
    monkeypatch.setattr(leadership, "now", found)
    monkeypatch.setattr(leadership._deadline, "value", math.nan)

    def exit_(code: int) -> None:
        raise Exited(code)

    monkeypatch.setattr(leadership.os, "_exit", exit_)
    return found


def test_a_process_without_a_lease_is_never_gated(clock: Clock) -> None:
    clock.at += 10 * RENEW_DEADLINE
    leadership.ensure_leading()


def test_the_deadline_counts_from_the_renewals_start(clock: Clock) -> None:
    started = clock.at
    clock.at += 3  # the renewal's round trip
    leadership.confirm(started)
    clock.at = started + RENEW_DEADLINE - 0.01
    leadership.ensure_leading()
    clock.at = started + RENEW_DEADLINE
    with pytest.raises(Exited) as exited:
        leadership.ensure_leading()
    assert exited.value.args == (1,)


def test_a_revoked_lease_shuts_the_gate_at_once(clock: Clock) -> None:
    leadership.confirm(clock.at)
    leadership.revoke()
    with pytest.raises(Exited):
        leadership.ensure_leading()


async def test_a_gated_handler_neither_starts_nor_returns_past_the_deadline(
        clock: Clock) -> None:
    leadership.confirm(clock.at)
    ran: list[str] = []

    @leadership.gated
    async def handler(*, name: str) -> str:
        ran.append(name)
        clock.at += RENEW_DEADLINE  # frozen mid-handler
        return name

    assert handler.__name__ == "handler"  # Kopf's handler id is unchanged
    with pytest.raises(Exited):  # its result (Kopf's patch and log) never follows
        await handler(name="first")
    with pytest.raises(Exited):
        await handler(name="second")
    assert ran == ["first"]


@dataclass
class Elector:
    answer: bool
    held_by_other: bool = False
    attempts: int = 0

    def try_acquire(self) -> bool:
        self.attempts += 1
        return self.answer


@pytest.fixture
def quick(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(leadership, "RENEW_SECONDS", 0)
    monkeypatch.setattr(leadership, "_exit_after", lambda seconds: None)


async def test_a_keeper_resumed_past_its_deadline_stops_without_renewing(
        clock: Clock, quick: None) -> None:
    leadership.confirm(clock.at)
    clock.at += RENEW_DEADLINE  # SIGSTOP, then SIGCONT
    elector, stop = Elector(answer=True), asyncio.Event()
    await asyncio.wait_for(leadership.keep(elector, stop), 5)  # type: ignore[arg-type]
    assert stop.is_set() and elector.attempts == 0
    with pytest.raises(Exited):
        leadership.ensure_leading()


async def test_a_lease_held_by_another_shuts_the_gate_before_the_wind_down(
        clock: Clock, quick: None) -> None:
    leadership.confirm(clock.at)
    elector, stop = Elector(answer=False, held_by_other=True), asyncio.Event()
    await asyncio.wait_for(leadership.keep(elector, stop), 5)  # type: ignore[arg-type]
    assert stop.is_set() and elector.attempts == 1
    with pytest.raises(Exited):
        leadership.ensure_leading()


async def test_kopfs_session_sends_writes_only_while_leading(clock: Clock) -> None:
    trace = kube_login._leader_gate()
    [check] = trace.on_request_start

    async def send(method: str) -> None:
        params = aiohttp.TraceRequestStartParams(method, URL("https://api/x"), CIMultiDict())
        await check(None, None, params)  # type: ignore[arg-type]

    leadership.confirm(clock.at)
    clock.at += RENEW_DEADLINE
    await send("GET")  # watches and reads go on; they change nothing
    for method in ("PATCH", "POST", "PUT", "DELETE"):
        with pytest.raises(Exited):
            await send(method)
