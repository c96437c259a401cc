"""The one polling helper: what it returns, what it tolerates, and what a timeout says."""

from __future__ import annotations

import itertools

import pytest

from tests.support.polling import until, until_async


def test_until_returns_the_first_value_that_holds() -> None:
    counter = itertools.count()
    assert until(lambda: next(counter) >= 3 and "done", "the third poll", 5, interval=0) == "done"


def test_until_returns_a_false_value_that_holds() -> None:
    countdown = iter([2, 1, 0])
    assert until(lambda: next(countdown), "zero left", 5, interval=0,
                 holds=lambda left: left == 0) == 0


def test_a_timeout_names_what_was_awaited_and_the_last_value_seen() -> None:
    with pytest.raises(AssertionError) as info:
        until(lambda: {"phase": "Pending"}, "the scope Enabled", 0.05, interval=0.01,
              holds=lambda status: status["phase"] == "Enabled")
    assert "waiting for the scope Enabled; last value {'phase': 'Pending'}" in str(info.value)


def test_a_long_last_value_is_shortened() -> None:
    with pytest.raises(AssertionError) as info:
        until(lambda: "x" * 10_000, "nothing", 0, holds=lambda _: False)
    assert len(str(info.value)) < 300


def test_a_tolerated_error_is_a_poll_that_did_not_hold_and_is_reported() -> None:
    def refused() -> bool:
        raise ConnectionRefusedError("port 1 closed")

    with pytest.raises(AssertionError) as info:
        until(refused, "the port open", 0.05, interval=0.01, tolerate=(OSError,))
    assert "last error ConnectionRefusedError: 'port 1 closed'" in str(info.value)


def test_any_other_error_ends_the_wait_at_once() -> None:
    calls = itertools.count()

    def broken() -> bool:
        next(calls)
        raise KeyError("status")

    with pytest.raises(KeyError):
        until(broken, "a status", 5, interval=0, tolerate=(OSError,))
    assert next(calls) == 1


def test_a_zero_timeout_still_polls_once() -> None:
    assert until(lambda: "at once", "the value", 0) == "at once"


async def test_until_async_awaits_a_probe_that_returns_an_awaitable() -> None:
    counter = itertools.count()

    async def probe() -> int:
        return next(counter)

    assert await until_async(probe, "the second poll", 5, interval=0,
                             holds=lambda n: n == 2) == 2


async def test_until_async_takes_a_plain_probe_and_tolerates_errors_of_an_awaited_one() -> None:
    assert await until_async(lambda: "plain", "a plain value", 5) == "plain"
    answers = iter([OSError("reset"), OSError("reset"), "served"])

    async def flaky() -> str:
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    assert await until_async(flaky, "an answer", 5, interval=0, tolerate=(OSError,)) == "served"


async def test_until_async_times_out_with_the_last_value() -> None:
    async def pending() -> str:
        return "Pending"

    with pytest.raises(AssertionError) as info:
        await until_async(pending, "Enabled", 0.05, interval=0.01,
                          holds=lambda phase: phase == "Enabled")
    assert "waiting for Enabled; last value 'Pending'" in str(info.value)
