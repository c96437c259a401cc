"""Every store pool connects to the primary (memory/dsn.py), and a failover's driver errors
are a content-free STORE_UNAVAILABLE (memory/errors.py); the failover itself: tests/ha."""

from __future__ import annotations

from pathlib import Path

import asyncpg
import pytest

from fgentic_governance.memory.dsn import StoreDsnError, from_file, read_write
from fgentic_governance.memory.errors import reason_for
from fgentic_governance.reasons import Reason

HOSTS = "postgresql://u:secret@10.0.0.1:5432,10.0.0.2:5432,10.0.0.3:5432/memory"


@pytest.mark.parametrize(("dsn", "expected"), [
    (HOSTS, HOSTS + "?target_session_attrs=read-write"),
    (HOSTS + "?sslmode=require", HOSTS + "?sslmode=require&target_session_attrs=read-write"),
    (HOSTS + "?target_session_attrs=read-write", HOSTS + "?target_session_attrs=read-write"),
    (" postgresql://u@db/memory\n", "postgresql://u@db/memory?target_session_attrs=read-write"),
])
def test_every_store_dsn_goes_to_the_primary(dsn: str, expected: str) -> None:
    assert read_write(dsn) == expected


def test_a_mounted_dsn_file_is_read_for_the_primary(tmp_path: Path) -> None:
    """Every process reads its Secret's file the same way (memory/dsn.from_file)."""
    mounted = tmp_path / "dsn"
    mounted.write_text(HOSTS + "\n")
    assert from_file(mounted) == HOSTS + "?target_session_attrs=read-write"
    mounted.write_text(HOSTS + "?target_session_attrs=any")
    with pytest.raises(StoreDsnError):
        from_file(mounted)


@pytest.mark.parametrize("value", ["any", "primary", "standby", "read-only", "prefer-standby",
                                   ""])
def test_a_dsn_that_allows_a_standby_is_refused_without_echoing_it(value: str) -> None:
    with pytest.raises(StoreDsnError) as refused:
        read_write(f"{HOSTS}?target_session_attrs={value}")
    assert "target_session_attrs must be read-write" in str(refused.value)
    assert "secret" not in str(refused.value) and "10.0.0" not in str(refused.value)


@pytest.mark.parametrize("exc", [
    asyncpg.exceptions.TargetServerAttributeNotMatched("none of the hosts"),
    asyncpg.exceptions.InternalClientError("cannot switch to state 15"),
])
def test_a_failovers_driver_errors_are_store_unavailable(exc: BaseException) -> None:
    assert reason_for(exc) is Reason.STORE_UNAVAILABLE
