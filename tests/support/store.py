"""The governed content store in tests: a migrated pool, the restricted runtime role's
settings, and the scope builders the store tests share."""

from __future__ import annotations

from typing import Any

import asyncpg

from fgentic_governance.memory import Access, MemoryStore, ScopeRecord, migrate

# What kagent would connect with: the restricted role, our schema first.
RUNTIME_SETTINGS = {"role": "fgentic_memory_runtime", "search_path": "fgentic_memory, public"}
ALICE = "@alice:example.org"
ROOM = "!alice-control:example.org"


async def migrated_pool(dsn: str, *, max_size: int) -> asyncpg.Pool:
    """An owner (operator) pool on ``dsn`` whose schema is migrated; the caller closes it."""
    pool = await asyncpg.create_pool(dsn, min_size=1, max_size=max_size)
    async with pool.acquire() as conn:
        await migrate(conn)
    return pool


def scope_record(key: str = "team-a/alice-helper", **overrides: Any) -> ScopeRecord:
    """Alice's scope with the helper Agent in team-a, with ``overrides`` to its fields."""
    fields: dict[str, Any] = {
        "scope_key": key, "subject_mxid": ALICE, "origin_kind": "native-local",
        "agent_namespace": "team-a", "agent_name": "helper", "control_room": ROOM,
    }
    fields.update(overrides)
    return ScopeRecord(**fields)


async def enabled(store: MemoryStore, record: ScopeRecord | None = None) -> Access:
    """Ensure and grant ``record`` (default: ``scope_record()``); its Access at that grant."""
    record = record or scope_record()
    await store.ensure_scope(record)
    generation = await store.grant(record.scope_key)
    return Access.for_scope(record, generation)
