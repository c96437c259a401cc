"""The operator's tuning from the environment (controller/tuning.py, issue 39): one bounded
parser for every interval; a value that is not a number of seconds within its bounds stops
start-up with a message naming the variable and the bounds."""

from __future__ import annotations

import pytest

from fgentic_governance.controller import tuning
from fgentic_governance.controller.tuning import (
    BINDING_RESYNC,
    SCOPE_RESYNC,
    STORE_CLEANUP,
    STORE_SETTINGS,
    Seconds,
)

# setting, default, allowed samples (text -> seconds), out-of-range samples
CASES = [
    (SCOPE_RESYNC, 30.0, {"1": 1.0, "2.5": 2.5, "3600": 3600.0}, ["0", "0.5", "3601", "-1"]),
    (BINDING_RESYNC, 60.0, {"1": 1.0, "60": 60.0, "3600": 3600.0}, ["0", "0.99", "3601", "1e9"]),
    # The 24 h promise (ADR 0023 §27): at most 6 h between cleanups.
    (STORE_CLEANUP, 3600.0, {"1": 1.0, "2": 2.0, "21600": 21600.0},
     ["0", "-5", "21601", "86400"]),
    (STORE_SETTINGS, 60.0, {"1": 1.0, "30": 30.0, "3600": 3600.0}, ["0", "-60", "3601"]),
]
MALFORMED = ["", "soon", "60s", "1,5", "nan", "inf", "-inf", "0x10"]
IDS = [case[0].env for case in CASES]


def test_every_setting_has_its_own_variable() -> None:
    assert {case[0] for case in CASES} == set(tuning.ALL)
    assert len({setting.env for setting in tuning.ALL}) == len(tuning.ALL)


@pytest.mark.parametrize(("setting", "default", "allowed", "_"), CASES, ids=IDS)
def test_unset_is_the_default_and_allowed_values_are_taken(
        monkeypatch: pytest.MonkeyPatch, setting: Seconds, default: float,
        allowed: dict[str, float], _: list[str]) -> None:
    monkeypatch.delenv(setting.env, raising=False)
    assert setting.read() == default
    for text, seconds in allowed.items():
        monkeypatch.setenv(setting.env, text)
        assert setting.read() == seconds


@pytest.mark.parametrize(("setting", "_d", "_a", "out_of_range"), CASES, ids=IDS)
def test_malformed_or_out_of_range_values_stop_start_up_naming_the_bounds(
        setting: Seconds, _d: float, _a: dict[str, float], out_of_range: list[str]) -> None:
    for text in [*MALFORMED, *out_of_range]:
        with pytest.raises(SystemExit) as refused:
            setting.parse(text)
        said = str(refused.value)
        assert said.startswith(f"{setting.env}=") and "expected a number of seconds" in said
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
