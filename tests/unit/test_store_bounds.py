"""memory/bounds.py: the pinned settings judge, and the SQL holding the same values."""

from __future__ import annotations

import re
from importlib import resources

from fgentic_governance.memory import bounds

SQL = resources.files("fgentic_governance.memory").joinpath("sql/0006_bounds.sql").read_text()
GATE = resources.files("fgentic_governance.memory").joinpath(
    "sql/functions/bound_transaction.sql").read_text()


def test_sql_bounds_equal_the_python_ones() -> None:
    in_gate = dict(re.findall(r"set_config\('(\w+)', '([^']+)', true\)", GATE))
    at_database = dict(re.findall(r"SET (\w+) = %L', current_database\(\), '([^']+)'", SQL))
    at_database |= dict(re.findall(r"SET (\w+) = %L',\s+current_database\(\), '([^']+)'", SQL))
    assert in_gate == dict(bounds.RUNTIME)
    assert at_database == dict(bounds.RUNTIME)
    logging = dict(re.findall(r"\['(\w+)', '([^']+)'\]", SQL))
    assert logging == dict(bounds.LOGGING)


def test_pool_waits_outlast_the_runtime() -> None:
    def seconds(value: str) -> float:
        number, unit = re.fullmatch(r"(\d+)(ms|s|min)", value).groups()  # type: ignore[union-attr]
        return float(number) * {"ms": 0.001, "s": 1.0, "min": 60.0}[unit]

    runtime_hold = max(seconds(bounds.RUNTIME["statement_timeout"]),
                       seconds(bounds.RUNTIME["idle_in_transaction_session_timeout"]))
    assert seconds(bounds.POOL["lock_timeout"]) > runtime_hold
    assert seconds(bounds.POOL["lock_timeout"]) > bounds.ACQUIRE_SECONDS


def _rows(**database: str) -> list[tuple[bool, str]]:
    return [(True, f"{name}={value}") for name, value in database.items()]


def test_judge_accepts_exact_pins_and_ignores_other_settings() -> None:
    rows = [*_rows(**bounds.PINNED), (True, "work_mem=64MB"), (False, "search_path=x")]
    assert bounds.judge(rows, bounds.PINNED) == []


def test_judge_names_missing_wrong_and_overridden_pins_only() -> None:
    pins = dict(bounds.PINNED)
    del pins["log_statement"]
    pins["log_min_messages"] = "warning"
    rows = [*_rows(**pins), (False, "lock_timeout=0"), (False, "lock_timeout=2s")]
    assert bounds.judge(rows, bounds.PINNED) == [
        "lock_timeout", "log_min_messages", "log_statement"]


def test_judge_never_returns_a_server_value() -> None:
    rows = [(True, "log_statement=SENTINEL-value"), (True, "SENTINEL-name=1")]
    unsafe = bounds.judge(rows, bounds.PINNED)
    assert set(unsafe) == set(bounds.PINNED)
    assert not any("SENTINEL" in name for name in unsafe)


def test_auto_explain_is_pinned_only_where_loaded() -> None:
    assert bounds.AUTO_EXPLAIN[0] not in bounds.pinned_now(False)
    assert bounds.pinned_now(True)[bounds.AUTO_EXPLAIN[0]] == "-1"
