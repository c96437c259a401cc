"""The operator's tuning from the environment (controller/tuning.py, issue 39): one bounded
parser for every interval and count; a value that is not a number within its bounds stops
start-up with a message naming the variable and the bounds."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest

from fgentic_governance.controller import lanes, tuning
from fgentic_governance.controller import login as kube_login
from fgentic_governance.controller.tuning import (
    API_CONNECTIONS,
    BINDING_RESYNC,
    RECONCILE_SLOTS,
    SCOPE_RESYNC,
    STORE_CLEANUP,
    STORE_SETTINGS,
    Bounded,
    Count,
)

# setting, default, allowed samples (text -> value), out-of-range samples
CASES: list[tuple[Bounded[Any], float, dict[str, float], list[str]]] = [
    (SCOPE_RESYNC, 30.0, {"1": 1.0, "2.5": 2.5, "3600": 3600.0}, ["0", "0.5", "3601", "-1"]),
    (BINDING_RESYNC, 60.0, {"1": 1.0, "60": 60.0, "3600": 3600.0}, ["0", "0.99", "3601", "1e9"]),
    # The 24 h promise (ADR 0023 §27): at most 6 h between cleanups.
    (STORE_CLEANUP, 3600.0, {"1": 1.0, "2": 2.0, "21600": 21600.0},
     ["0", "-5", "21601", "86400"]),
    (STORE_SETTINGS, 60.0, {"1": 1.0, "30": 30.0, "3600": 3600.0}, ["0", "-60", "3601"]),
    # Counts: whole numbers of slots or connections (none would stop every reconcile or call).
    (RECONCILE_SLOTS, 8, {"1": 1, "8": 8, "64": 64, " 16 ": 16}, ["0", "65", "-1", "1000"]),
    (API_CONNECTIONS, 16, {"1": 1, "16": 16, "256": 256}, ["0", "257", "-16"]),
]
MALFORMED = ["", "soon", "60s", "1,5", "nan", "inf", "-inf", "0x10"]
NOT_WHOLE = ["8.0", "1e1", "8.5", "+8", "eight"]
IDS = [case[0].env for case in CASES]
BOUND = 10.0  # seconds: every wait below is bounded


def test_every_setting_has_its_own_variable() -> None:
    assert {case[0] for case in CASES} == set(tuning.ALL)
    assert len({setting.env for setting in tuning.ALL}) == len(tuning.ALL)


@pytest.mark.parametrize(("setting", "default", "allowed", "_"), CASES, ids=IDS)
def test_unset_is_the_default_and_allowed_values_are_taken(
        monkeypatch: pytest.MonkeyPatch, setting: Bounded[Any], default: float,
        allowed: dict[str, float], _: list[str]) -> None:
    monkeypatch.delenv(setting.env, raising=False)
    assert setting.read() == default
    for text, value in allowed.items():
        monkeypatch.setenv(setting.env, text)
        assert setting.read() == value and type(setting.read()) is type(default)


@pytest.mark.parametrize(("setting", "_d", "_a", "out_of_range"), CASES, ids=IDS)
def test_malformed_or_out_of_range_values_stop_start_up_naming_the_bounds(
        setting: Bounded[Any], _d: float, _a: dict[str, float], out_of_range: list[str]
) -> None:
    expected = "a whole number" if isinstance(setting, Count) else "a number of seconds"
    for text in [*MALFORMED, *out_of_range, *(NOT_WHOLE if isinstance(setting, Count) else [])]:
        with pytest.raises(SystemExit) as refused:
            setting.parse(text)
        said = str(refused.value)
        assert said.startswith(f"{setting.env}=") and f"expected {expected}" in said
        assert f"from {setting.low:g} to {setting.high:g}" in said


def test_start_up_names_every_bad_setting_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    for setting in tuning.ALL:
        monkeypatch.delenv(setting.env, raising=False)
    tuning.check()  # all defaults: starts
    monkeypatch.setenv(BINDING_RESYNC.env, "0")
    monkeypatch.setenv(STORE_SETTINGS.env, "often")
    with pytest.raises(SystemExit) as refused:
        tuning.check()
    said = str(refused.value)
    assert BINDING_RESYNC.env in said and STORE_SETTINGS.env in said
    assert SCOPE_RESYNC.env not in said and STORE_CLEANUP.env not in said


def test_a_long_value_is_cut_short_in_the_message() -> None:
    with pytest.raises(SystemExit) as refused:
        SCOPE_RESYNC.parse("x" * 500)
    assert len(str(refused.value)) < 120


async def test_the_slots_follow_their_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(RECONCILE_SLOTS.env, "3")
    lanes.open_lanes()
    try:
        async with contextlib.AsyncExitStack() as held:
            for _ in range(3):  # three slots taken at once, none waits
                await held.enter_async_context(lanes.reconcile_slot(1.0))
            fourth = asyncio.ensure_future(_hold_a_slot())
            for _ in range(5):
                await asyncio.sleep(0)
            assert not fourth.done()  # it waits for a slot
        await asyncio.wait_for(fourth, BOUND)  # one freed: the fourth has it
    finally:
        lanes.close_lanes()


async def _hold_a_slot() -> None:
    async with lanes.reconcile_slot(1.0):
        pass


def test_the_connection_bound_follows_its_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(API_CONNECTIONS.env, "5")
    try:
        kube_login.expect_namespaces(["a"])
        assert kube_login.connection_limit() == kube_login.WATCHED_KINDS + 5
    finally:
        kube_login.expect_namespaces([])
