"""A lease bound to its room's A2A context, shared by every memory API replica (sql/0021).

kagent's memory calls name no context. The bridge names its room's context when it opens a
lease; the memory API notes the contexts the runtime's session and task calls name, here, and a
memory call of (Agent, user) is admitted only while that context alone of the pair is in
progress. A search of a context with an outstanding ``load_memory`` call is the tool's, charged
to §42's explicit bucket. Two ``DelegatedStore`` objects stand for two replicas.
"""

from __future__ import annotations

import re

import asyncpg
import pytest

from fgentic_governance.memory import MemoryStore
from fgentic_governance.memory.delegated import Caller, DelegatedStore
from fgentic_governance.memory.model import CONTEXT_ID, MAX_TOOL_CALLS, Operation, Sighting
from fgentic_governance.reasons import Reason
from tests.support.store import ALICE, enabled, refused, scope_record

pytestmark = pytest.mark.integration

NS, AGENT = "team-a", "helper"
BOB = "@bob:example.org"
CONTROL, TEAM = "ctx-control-room", "ctx-team-room"
ALICE_CALL = Caller(ALICE, NS, AGENT)
SEARCH = {Operation.LOAD: 1, Operation.EMBEDDING: 1}
SAVE = {Operation.SAVE: 1, Operation.EMBEDDING: 1}
BATCH = {Operation.SUMMARIZE: 1, Operation.SAVE: 1, Operation.EMBEDDING: 1}
TOKENS = ("SELECT tokens FROM fgentic_memory.rate_bucket"
          " WHERE subject_mxid = $1 AND agent_namespace = $2 AND agent_name = $3")


async def leased(store: MemoryStore, context: str = CONTROL) -> None:
    """Alice's scope of the Agent, granted, with a lease naming ``context``."""
    access = await enabled(store, scope_record(agent_namespace=NS, agent_name=AGENT,
                                               hourly_operation_ceiling=50))
    await store.open_lease(access, 120, context_id=context)


async def note(replica: DelegatedStore, context: str, user: str = ALICE, *,
               agent: str = AGENT, **seen: object) -> None:
    await replica.note_context(NS, agent, user, Sighting(context, **seen))  # type: ignore[arg-type]


async def turn(replica: DelegatedStore, context: str, *, created: bool = False) -> None:
    """A turn's first calls: the task submitted, the user's event appended."""
    await note(replica, context, created=created)
    await note(replica, context, user_events=1)


async def test_a_lease_admits_only_while_its_context_alone_is_in_progress(
        store: MemoryStore, delegate_pool: asyncpg.Pool) -> None:
    here, there = DelegatedStore(delegate_pool), DelegatedStore(delegate_pool)
    await leased(store)
    # Nothing in progress: no call can be bound to the lease.
    assert await refused(here.admit(ALICE_CALL, SEARCH, bound=True)) is Reason.CONTEXT_CONFLICT
    # The control room's turn, seen by the other replica.
    await turn(there, CONTROL, created=True)
    assert await here.admit(ALICE_CALL, SEARCH, bound=True) is False  # prefetch: no token
    # Alice's turn in the team room, same Agent, while the lease lives: nothing for anyone.
    await turn(there, TEAM, created=True)
    for items in (SEARCH, SAVE, BATCH):
        assert await refused(here.admit(ALICE_CALL, items, bound=True)) is \
            Reason.CONTEXT_CONFLICT
    # Bob's contexts and another Agent's are not Alice's with this Agent.
    await note(there, TEAM, BOB)
    await note(there, "ctx-elsewhere", agent="other-helper")
    # The team-room turn ends (its first user event: no automatic save follows).
    await note(there, TEAM, final=True)
    assert await here.admit(ALICE_CALL, SEARCH, bound=True) is False
    # Any call of the team room's context puts it in progress again.
    await note(here, TEAM)
    assert await refused(here.admit(ALICE_CALL, SEARCH, bound=True)) is Reason.CONTEXT_CONFLICT


async def test_only_a_lease_naming_the_context_in_progress_admits(
        store: MemoryStore, delegate_pool: asyncpg.Pool) -> None:
    replica = DelegatedStore(delegate_pool)
    await leased(store)
    await turn(replica, TEAM, created=True)  # only the team room is in progress
    assert await refused(replica.admit(ALICE_CALL, SAVE, bound=True)) is \
        Reason.CONTEXT_CONFLICT
    # Without ``bound`` (the store's own callers), the lease admits as before.
    assert await replica.admit(ALICE_CALL, SAVE, explicit=True) is True


async def test_an_automatic_save_keeps_its_context_in_progress_until_it_arrives(
        store: MemoryStore, delegate_pool: asyncpg.Pool) -> None:
    replica = DelegatedStore(delegate_pool)
    await leased(store)
    await note(replica, TEAM, created=True)
    for _ in range(5):  # the fifth user event: the runtime saves in the background
        await turn(replica, TEAM)
        await note(replica, TEAM, final=True)
    await turn(replica, CONTROL, created=True)
    # The team room's turn has ended, but its save may still come: bound to nothing.
    assert await refused(replica.admit(ALICE_CALL, SEARCH, bound=True)) is \
        Reason.CONTEXT_CONFLICT
    # It comes, and is refused (it is not the control room's), and the wait ends.
    assert await refused(replica.admit(ALICE_CALL, BATCH, bound=True)) is \
        Reason.CONTEXT_CONFLICT
    assert await replica.admit(ALICE_CALL, SEARCH, bound=True) is False


async def test_a_session_first_seen_late_may_always_save(
        store: MemoryStore, delegate_pool: asyncpg.Pool) -> None:
    """A session created before its calls were noted has an unknown user-event count: after
    its every turn, a save may follow."""
    replica = DelegatedStore(delegate_pool)
    await leased(store)
    await turn(replica, TEAM)  # no create seen
    await note(replica, TEAM, final=True)
    await turn(replica, CONTROL, created=True)
    assert await refused(replica.admit(ALICE_CALL, SEARCH, bound=True)) is \
        Reason.CONTEXT_CONFLICT


async def test_a_search_during_load_memory_takes_the_explicit_token(
        store: MemoryStore, pool: asyncpg.Pool, delegate_pool: asyncpg.Pool) -> None:
    here, there = DelegatedStore(delegate_pool), DelegatedStore(delegate_pool)
    await leased(store)
    await turn(there, CONTROL, created=True)
    assert await here.admit(ALICE_CALL, SEARCH, bound=True) is False  # prefetch
    assert await pool.fetchval(TOKENS, ALICE, NS, AGENT) is None  # the bucket untouched
    await note(there, CONTROL, called=("adk-call-1",))  # the model calls load_memory
    assert await here.admit(ALICE_CALL, SEARCH, bound=True) is True
    assert await pool.fetchval(TOKENS, ALICE, NS, AGENT) == pytest.approx(2.0, abs=0.1)
    await note(there, CONTROL, answered=("adk-call-1",))  # its response is appended
    assert await here.admit(ALICE_CALL, SEARCH, bound=True) is False
    # Burst three, shared with explicit saves: two saves and one more load_memory search.
    await note(there, CONTROL, called=("adk-call-2",))
    assert await here.admit(ALICE_CALL, SAVE, explicit=True, bound=True) is True
    assert await here.admit(ALICE_CALL, SAVE, explicit=True, bound=True) is True
    assert await refused(here.admit(ALICE_CALL, SEARCH, bound=True)) is Reason.RATE_LIMITED
    # The turn's end forgets its calls.
    await note(there, CONTROL, final=True)
    await note(there, CONTROL)
    assert await here.admit(ALICE_CALL, SEARCH, bound=True) is False


async def test_leases_and_notes_take_bounded_context_ids(
        store: MemoryStore, pool: asyncpg.Pool, delegate_pool: asyncpg.Pool) -> None:
    replica = DelegatedStore(delegate_pool)
    access = await enabled(store, scope_record())
    for bad in ("a/b", "", "x" * 129, "ctx with space"):
        assert await refused(store.open_lease(access, 60, context_id=bad)) is \
            Reason.INVALID_SPEC
        assert await refused(note(replica, bad)) is Reason.INVALID_SPEC
    too_many = tuple(f"call-{n}" for n in range(MAX_TOOL_CALLS + 1))
    assert await refused(note(replica, CONTROL, called=too_many)) is Reason.INVALID_SPEC
    assert await pool.fetchval("SELECT fgentic_memory.context_pattern()") == CONTEXT_ID
    assert await pool.fetchval("SELECT fgentic_memory.max_tool_calls()") == MAX_TOOL_CALLS
    assert re.fullmatch(CONTEXT_ID, "0f1e2d3c4b5a69788796a5b4c3d2e1f0")


async def test_a_lease_without_a_context_is_refused_at_open(
        store: MemoryStore, pool: asyncpg.Pool) -> None:
    """Fail closed: a lease naming no context could bind no memory call, so none opens, on
    the store's API or on the SQL function it calls."""
    access = await enabled(store, scope_record())
    unnamed = store.open_lease(access, 60, context_id=None)  # type: ignore[arg-type]
    assert await refused(unnamed) is Reason.INVALID_SPEC
    with pytest.raises(asyncpg.PostgresError) as info:
        await pool.fetchrow("SELECT * FROM fgentic_memory.open_lease"
                            "($1, $2, $3, $4, $5, $6, 60, NULL, NULL)", *access.params())
    assert info.value.sqlstate == "FG012"  # INVALID_SPEC
    assert await pool.fetchval("SELECT count(*) FROM fgentic_memory.delegation_lease") == 0


async def test_a_live_lease_naming_no_context_admits_no_memory_call(
        store: MemoryStore, pool: asyncpg.Pool, delegate_pool: asyncpg.Pool) -> None:
    """Defence in depth: a lease row without a context (older than sql/0021, or written
    around open_lease, here by the owner) binds nothing."""
    replica = DelegatedStore(delegate_pool)
    await leased(store)
    await turn(replica, CONTROL, created=True)
    assert await replica.admit(ALICE_CALL, SEARCH, bound=True) is False  # bound: admitted
    await pool.execute("UPDATE fgentic_memory.delegation_lease SET context_id = NULL")
    for items in (SEARCH, SAVE, BATCH):
        assert await refused(replica.admit(ALICE_CALL, items, bound=True)) is \
            Reason.CONTEXT_CONFLICT


async def test_a_replayed_lease_open_must_name_the_same_context(store: MemoryStore) -> None:
    access = await enabled(store, scope_record())
    delegation = "6f1c1a52-2a4e-4f3b-9a53-3f0b3a0d6c11"
    first = await store.open_lease(access, 60, delegation, context_id=CONTROL)
    assert await store.open_lease(access, 60, delegation, context_id=CONTROL) == first
    assert await refused(store.open_lease(access, 60, delegation, context_id=TEAM)) is \
        Reason.CONTEXT_CONFLICT


async def test_a_save_that_came_before_its_turn_ended_is_not_waited_for(
        store: MemoryStore, delegate_pool: asyncpg.Pool) -> None:
    """The runtime's background save may arrive before or after its turn's final state."""
    replica = DelegatedStore(delegate_pool)
    await leased(store)
    await note(replica, TEAM, created=True)
    for n in range(5):
        await turn(replica, TEAM)
        if n < 4:
            await note(replica, TEAM, final=True)
    await turn(replica, CONTROL, created=True)  # one user event: it cannot be saving
    assert await refused(replica.admit(ALICE_CALL, BATCH, bound=True)) is \
        Reason.CONTEXT_CONFLICT  # the team room's save, in its fifth turn
    await note(replica, TEAM, final=True)
    assert await replica.admit(ALICE_CALL, SEARCH, bound=True) is False
