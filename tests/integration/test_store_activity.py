"""Whose turn an Agent serves, shared by every memory API replica (sql/0019).

kagent's embeddings and summarisation requests name no user; the memory API attributes each
to the one user the Agent's Pods named lately. Each replica notes the (Agent, user) pairs it
sees in the store, and the attribution counts every replica's notes for the window plus the
notes' slack, with the calling replica's own view: a Pod that moved to another replica is
still attributed, and two replicas that each saw one user refuse as one that saw both would.
"""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from fgentic_governance.memory import MemoryStore
from fgentic_governance.memory.delegated import DelegatedStore
from fgentic_governance.memory.model import MAX_NOTED_USERS, RecentUsers
from fgentic_governance.reasons import Reason
from tests.support.store import ALICE, CONTEXT, enabled, past_turns, refused, scope_record

pytestmark = pytest.mark.integration

BOB = "@bob:example.org"
WINDOW, SLACK = 60.0, 6.0
LEDGER = ("SELECT coalesce(sum(units), 0) FROM fgentic_memory.op_ledger"
          " WHERE scope_key = $1 AND operation = $2")
AGE = ("UPDATE fgentic_memory.agent_activity SET seen_at = now() - make_interval(secs => $2)"
       " WHERE user_id = $1")


def seen(*users: str) -> RecentUsers:
    """What the calling replica saw itself."""
    return RecentUsers(users, WINDOW, SLACK)



async def test_every_replicas_notes_attribute_a_request_that_names_no_user(
        store: MemoryStore, pool: asyncpg.Pool, delegate_pool: asyncpg.Pool) -> None:
    here, there = DelegatedStore(delegate_pool), DelegatedStore(delegate_pool)
    alice = await enabled(store, scope_record(hourly_operation_ceiling=50))
    await past_turns(store, alice, 4)
    await store.open_lease(alice, 120, context_id=CONTEXT)  # the fifth turn: a summary may follow
    # Nobody seen anywhere: nobody is charged.
    assert await refused(here.admit_embedding("team-a", "helper", seen())) is \
        Reason.LEASE_MISSING
    # Alice's session call reached the other replica; this one saw nobody (the Pod moved).
    await there.note_activity("team-a", "helper", [ALICE])
    await here.admit_embedding("team-a", "helper", seen())
    await here.admit_summary("team-a", "helper", 100, seen())
    assert await pool.fetchval(LEDGER, alice.scope_key, "embedding") == 1
    assert await pool.fetchval(LEDGER, alice.scope_key, "summarize") == 1
    # The same user here and there is one user.
    await here.admit_embedding("team-a", "helper", seen(ALICE))
    # Another Agent's notes are not this Agent's.
    await there.note_activity("team-a", "other", [BOB])
    await here.admit_embedding("team-a", "helper", seen())
    assert await pool.fetchval(LEDGER, alice.scope_key, "embedding") == 3
    # Bob's turn noted there, Alice's seen here: two users, whoever's the request is.
    await there.note_activity("team-a", "helper", [BOB])
    for local in (seen(), seen(ALICE), seen(BOB)):
        assert await refused(here.admit_embedding("team-a", "helper", local)) is \
            Reason.SCOPE_AMBIGUOUS
        assert await refused(here.admit_summary("team-a", "helper", 100, local)) is \
            Reason.SCOPE_AMBIGUOUS
    # A note counts for the window plus the slack (it may trail its user's last call by that
    # much), and no longer.
    await pool.execute(AGE, BOB, WINDOW + SLACK - 5)  # 5 s of margin for a slow host
    assert await refused(here.admit_embedding("team-a", "helper", seen())) is \
        Reason.SCOPE_AMBIGUOUS
    await pool.execute(AGE, BOB, WINDOW + SLACK + 1)
    await here.admit_embedding("team-a", "helper", seen())
    assert await pool.fetchval(LEDGER, alice.scope_key, "embedding") == 4
    # A newer note moves it forward, an older one never back.
    await there.note_activity("team-a", "helper", [BOB])
    assert await refused(here.admit_embedding("team-a", "helper", seen())) is \
        Reason.SCOPE_AMBIGUOUS
    await pool.execute(AGE, ALICE, WINDOW + SLACK + 1)
    await pool.execute("UPDATE fgentic_memory.agent_activity SET seen_at = now() + interval"
                       " '1 hour' WHERE user_id = $1", BOB)
    await there.note_activity("team-a", "helper", [BOB])
    assert await pool.fetchval("SELECT seen_at > now() + interval '59 minutes' FROM"
                               " fgentic_memory.agent_activity WHERE user_id = $1", BOB)
    # Only Bob is recent now, but he holds no lease of his own: nobody is charged.
    assert await refused(here.admit_embedding("team-a", "helper", seen())) is \
        Reason.LEASE_MISSING
    assert await pool.fetchval(LEDGER, alice.scope_key, "embedding") == 4


async def test_notes_and_attributions_are_bounded(
        store: MemoryStore, pool: asyncpg.Pool, delegate_pool: asyncpg.Pool) -> None:
    api = DelegatedStore(delegate_pool)
    assert await pool.fetchval("SELECT fgentic_memory.max_noted_users()") == MAX_NOTED_USERS
    many = [f"@u{i}:example.org" for i in range(MAX_NOTED_USERS + 1)]
    assert await refused(api.note_activity("team-a", "helper", many)) is Reason.INVALID_SPEC
    assert await refused(api.note_activity("team-a", "helper", [])) is Reason.INVALID_SPEC
    async with delegate_pool.acquire() as conn:  # the database refuses what Python would
        for users in (many, [], [""], ["@x:" + "y" * 300], [None]):
            with pytest.raises(asyncpg.PostgresError) as info:
                await conn.fetchval("SELECT fgentic_memory.note_activity('a', 'b', $1)", users)
            assert info.value.sqlstate.startswith("FG"), users
        for window, slack in ((0, 0), (3601, 1), (10, 11), (10, -1)):
            with pytest.raises(asyncpg.PostgresError):
                await conn.fetchval("SELECT fgentic_memory.recent_user('a', 'b', '{}', $1, $2)",
                                    window, slack)
    assert await pool.fetchval("SELECT count(*) FROM fgentic_memory.agent_activity") == 0
    # More than the cap of users seen here are ambiguous, not refused as malformed.
    await enabled(store)
    assert await refused(api.admit_embedding("team-a", "helper", seen(*many))) is \
        Reason.SCOPE_AMBIGUOUS
    # Replicas noting the same users at once take the row locks in one order.
    await asyncio.gather(*(api.note_activity("team-a", "helper", [ALICE, BOB][::1 - 2 * (i % 2)])
                           for i in range(40)))
    assert await pool.fetchval("SELECT count(*) FROM fgentic_memory.agent_activity") == 2
    # The operator's cleanup drops notes no window can count.
    await pool.execute(AGE, BOB, 2 * 3600 + 1)
    await store.cleanup_expired()
    assert [r[0] for r in await pool.fetch(
        "SELECT user_id FROM fgentic_memory.agent_activity")] == [ALICE]
