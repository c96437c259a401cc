"""One definition per bound: the store's SQL guard (sql/functions/scope_guard.sql) and the CRD
models (api/memory.py) must admit exactly the same scope bounds and spellings. The SQL repeats
them because every writer - an adapted runtime's plain SQL too - meets the database's guard,
not the models."""

from __future__ import annotations

import re
from importlib import resources
from typing import Any

import pytest
from pydantic.fields import FieldInfo

from fgentic_governance.api.common import DNS1123_LABEL, MXID_PATTERN, ROOM_ID_PATTERN
from fgentic_governance.api.memory import (
    AutomaticSavePolicy,
    ExplicitOperationsPolicy,
    MemoryPolicy,
    PrefetchPolicy,
)
from fgentic_governance.memory.bounds import MAX_SUMMARY_FACTS
from fgentic_governance.memory.model import MAX_RECALLS_PER_LEASE

GUARD = resources.files("fgentic_governance.memory").joinpath(
    "sql/functions/scope_guard.sql").read_text()
SCOPE_GUARD = GUARD[GUARD.index("scope_guard()"):GUARD.index("IF TG_OP = 'INSERT'")]


def _range(field: FieldInfo) -> tuple[int, int]:
    low = high = None
    for meta in field.metadata:
        low = getattr(meta, "ge", low)
        high = getattr(meta, "le", high)
    assert low is not None and high is not None
    return int(low), int(high)


def _sql_range(column: str) -> tuple[int, int]:
    match = re.search(rf"NEW\.{column} NOT BETWEEN (\d+) AND (\d+)", SCOPE_GUARD)
    assert match, f"no bound for {column} in the scope guard"
    return int(match[1]), int(match[2])


@pytest.mark.parametrize(("column", "model", "field"), [
    ("entry_cap", MemoryPolicy, "entry_cap"),
    ("max_fact_bytes", MemoryPolicy, "max_fact_bytes"),
    ("max_retention_days", MemoryPolicy, "max_retention_days"),
    ("hourly_operation_ceiling", MemoryPolicy, "hourly_operation_ceiling"),
    ("explicit_per_minute", ExplicitOperationsPolicy, "per_minute"),
    ("explicit_burst", ExplicitOperationsPolicy, "burst"),
])
def test_sql_bounds_equal_the_model_bounds(column: str, model: Any, field: str) -> None:
    assert _sql_range(column) == _range(model.model_fields[field])


@pytest.mark.parametrize(("column", "pattern"), [
    ("subject_mxid", MXID_PATTERN),
    ("control_room", ROOM_ID_PATTERN),
    ("agent_namespace", DNS1123_LABEL),
    ("agent_name", DNS1123_LABEL),
])
def test_sql_spellings_equal_the_model_patterns(column: str, pattern: str) -> None:
    spelled = re.findall(rf"NEW\.{column} !~ '([^']+)'", SCOPE_GUARD)
    assert spelled == [pattern]


BOUNDS_0011 = resources.files("fgentic_governance.memory").joinpath(
    "sql/0011_delegation_bounds.sql").read_text()


@pytest.mark.parametrize(("column", "model", "field", "ceiling"), [
    ("max_recalls", PrefetchPolicy, "max_subqueries", MAX_RECALLS_PER_LEASE),
    ("max_summary_facts", AutomaticSavePolicy, "max_facts", MAX_SUMMARY_FACTS),
])
def test_per_delegation_bounds_equal_the_model_bounds(column: str, model: Any, field: str,
                                                      ceiling: int) -> None:
    """sql/0011's scope columns, the models' policy fields and the ADR ceilings the memory
    API and the store name (eight recalls per lease, ten facts per summary)."""
    match = re.search(rf"CHECK \({column} BETWEEN (\d+) AND (\d+)\)", BOUNDS_0011)
    assert match, f"no CHECK for {column} in sql/0011"
    assert (int(match[1]), int(match[2])) == _range(model.model_fields[field]) == (0, ceiling)


def test_turns_per_automatic_save_equal_the_model_bounds() -> None:
    match = re.search(r"CHECK \(min_user_turns BETWEEN (\d+) AND (\d+)\)", BOUNDS_0011)
    assert match, "no CHECK for min_user_turns in sql/0011"
    assert (int(match[1]), int(match[2])) == _range(
        AutomaticSavePolicy.model_fields["min_user_turns"])
