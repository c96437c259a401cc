"""One definition per bound: the store's SQL guard (sql/0002) and the CRD models (api/memory.py)
must admit exactly the same scope bounds and spellings. The SQL repeats them because every
writer - an adapted runtime's plain SQL too - meets the database's guard, not the models."""

from __future__ import annotations

import re
from importlib import resources
from typing import Any

import pytest
from pydantic.fields import FieldInfo

from fgentic_governance.api.common import DNS1123_LABEL, MXID_PATTERN, ROOM_ID_PATTERN
from fgentic_governance.api.memory import ExplicitOperationsPolicy, MemoryPolicy

FENCE = resources.files("fgentic_governance.memory").joinpath("sql/0002_fence.sql").read_text()
SCOPE_GUARD = FENCE[FENCE.index("scope_guard()"):FENCE.index("IF TG_OP = 'INSERT'")]


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
