"""Fixtures of the integration tests; the owner `pool` and `store` come from tests/conftest.py."""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import pytest

from tests.support.store import DELEGATE_SETTINGS, RUNTIME_SETTINGS


@pytest.fixture
async def runtime_pool(pg_dsn: str, pool: asyncpg.Pool) -> AsyncIterator[asyncpg.Pool]:
    """Connections as the restricted fgentic_memory_runtime role (what kagent would use), opened
    after ``pool`` migrated the schema."""
    runtime = await asyncpg.create_pool(pg_dsn, min_size=1, max_size=24,
                                        server_settings=RUNTIME_SETTINGS)
    yield runtime
    await runtime.close()


@pytest.fixture
async def delegate_pool(pg_dsn: str, pool: asyncpg.Pool) -> AsyncIterator[asyncpg.Pool]:
    """Connections as fgentic_memory_delegate, the memory API's role (the runtime's privileges
    plus delegation), opened after ``pool`` migrated the schema."""
    delegate = await asyncpg.create_pool(pg_dsn, min_size=1, max_size=24,
                                         server_settings=DELEGATE_SETTINGS)
    yield delegate
    await delegate.close()
