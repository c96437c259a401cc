"""The recall policy (issue 38 §7, sql/0022) on a real PostgreSQL.

A scope's ``policy.recall`` narrows which of its readable rows may enter recall, by type,
source, confirmation, sensitivity and age. It is a predicate of the fenced view itself, so
every reader meets it (the plain ``enter_scope`` path, the memory API's delegated search, the
runtime role's own SQL); nothing is filtered after a read. What it withholds is counted by
bounded code, for the operator's status, and the fence around it still holds.
"""

from __future__ import annotations

from dataclasses import replace

import asyncpg
import pytest

from fgentic_governance.api.memory import RecallPolicy
from fgentic_governance.memory import MemoryStore
from fgentic_governance.memory.delegated import Caller, DelegatedStore
from fgentic_governance.memory.errors import guarded
from fgentic_governance.memory.model import (
    Access,
    ConfirmationStatus,
    Envelope,
    MemoryType,
    Sensitivity,
    SourceKind,
    WriteReason,
)
from fgentic_governance.reasons import Reason
from tests.support.store import ALICE, CONTEXT, enabled, enter, refused, scope_record

pytestmark = pytest.mark.integration

UNIT = [1.0] + [0.0] * 767
USER_CONFIRMED = Envelope(MemoryType.PREFERENCE, SourceKind.USER_MESSAGE,
                          WriteReason.EXPLICIT_USER_REQUEST, ConfirmationStatus.USER_CONFIRMED,
                          Sensitivity.NORMAL)
"""Passes every policy below."""
# Backdating needs the triggers off (created_at is the database's and immutable): the test's
# owner is a superuser, which no runtime is.
BACKDATE = """
SET session_replication_role = replica;
UPDATE fgentic_memory.memory SET created_at = now() - interval '2 hours' WHERE id = '{id}';
SET session_replication_role = origin;
"""
NARROW = RecallPolicy.model_validate({
    "memoryTypes": ["preference"], "sourceKinds": ["user_message"],
    "confirmationStatuses": ["user_confirmed"], "sensitivities": ["normal"], "maxAgeHours": 1})


async def scope_with(store: MemoryStore, name: str, policy: RecallPolicy) -> Access:
    """An enabled scope of Alice's with its own Agent and room, and ``policy``."""
    record = scope_record(f"team-a/{name}", agent_name=name, recall=policy,
                          control_room=f"!{name}:example.org")
    return await enabled(store, record)


async def save(store: MemoryStore, pool: asyncpg.Pool, access: Access, fact: str,
               envelope: Envelope = USER_CONFIRMED, *, old: bool = False) -> str:
    entry_id = await store.save(access, fact, embedding=UNIT, envelope=envelope)
    if old:
        await pool.execute(BACKDATE.format(id=entry_id))
    return entry_id


async def recalled(store: MemoryStore, access: Access) -> list[str]:
    """What the plain fenced path recalls (search) and lists (inspect): they must agree."""
    found = sorted(e.content for e in await store.search(access, UNIT, limit=8))
    listed = sorted(e.content for e in await store.list_entries(access))
    assert found == listed and await store.readable_count(access) == len(found)
    return found


async def withheld(store: MemoryStore, access: Access) -> dict[Reason, int]:
    return dict((await store.scope_state(access.scope_key)).recall_withheld)


async def test_each_dimension_is_withheld_inside_the_view_and_counted_once(
        store: MemoryStore, pool: asyncpg.Pool, runtime_pool: asyncpg.Pool) -> None:
    """Each row is withheld by the first dimension it fails (type, source, confirmation,
    sensitivity, age) and counted under that code alone; the allowed row is recalled by the
    plain path and by the runtime role's own SQL through the view."""
    access = await scope_with(store, "narrow", NARROW)
    await save(store, pool, access, "allowed")
    # type and sensitivity fail: counted as a type
    await save(store, pool, access, "a fact", replace(
        USER_CONFIRMED, memory_type=MemoryType.FACT, sensitivity=Sensitivity.SENSITIVE))
    await save(store, pool, access, "a summary", replace(
        USER_CONFIRMED, source_kind=SourceKind.AUTOMATIC_SUMMARY,
        write_reason=WriteReason.AUTOMATIC_SUMMARY,
        confirmation_status=ConfirmationStatus.MODEL_INFERRED))
    await save(store, pool, access, "inferred", replace(
        USER_CONFIRMED, confirmation_status=ConfirmationStatus.MODEL_INFERRED))
    # sensitivity and age fail: counted as a sensitivity
    await save(store, pool, access, "personal", replace(
        USER_CONFIRMED, sensitivity=Sensitivity.PERSONAL), old=True)
    await save(store, pool, access, "old", old=True)

    assert await recalled(store, access) == ["allowed"]
    assert await withheld(store, access) == {
        Reason.RECALL_TYPE_WITHHELD: 1, Reason.RECALL_SOURCE_WITHHELD: 1,
        Reason.RECALL_CONFIRMATION_WITHHELD: 1, Reason.RECALL_SENSITIVITY_WITHHELD: 1,
        Reason.RECALL_AGE_WITHHELD: 1}
    async with runtime_pool.acquire() as conn, conn.transaction():
        await enter(conn, access, "recall")
        assert [r["content"] for r in await conn.fetch(
            "SELECT content FROM readable_memory")] == ["allowed"]
        # Asking the view for a withheld row by its envelope finds nothing either.
        assert await conn.fetchval(
            "SELECT count(*) FROM readable_memory WHERE sensitivity <> 'normal'") == 0


ONE_DIMENSION = {
    "type": ({"memoryTypes": ["preference"]}, Envelope(memory_type=MemoryType.DECISION), False,
             Reason.RECALL_TYPE_WITHHELD),
    "source": ({"sourceKinds": ["save_memory_tool"]},
               Envelope(source_kind=SourceKind.AUTOMATIC_SUMMARY), False,
               Reason.RECALL_SOURCE_WITHHELD),
    "confirmation": ({"confirmationStatuses": ["model_inferred"]}, Envelope(), False,
                     Reason.RECALL_CONFIRMATION_WITHHELD),
    "sensitivity": ({"sensitivities": ["normal", "personal"]},
                    Envelope(sensitivity=Sensitivity.SENSITIVE), False,
                    Reason.RECALL_SENSITIVITY_WITHHELD),
    "age": ({"maxAgeHours": 1}, Envelope(), True, Reason.RECALL_AGE_WITHHELD),
}
"""Per dimension: the policy, the envelope it withholds, whether that row is old, the code."""


@pytest.mark.parametrize("dimension", sorted(ONE_DIMENSION))
async def test_one_dimension_alone_withholds_from_the_memory_apis_search(
        store: MemoryStore, pool: asyncpg.Pool, delegate_pool: asyncpg.Pool,
        dimension: str) -> None:
    """Each dimension alone, through the memory API's data path (a leased delegated search,
    the runtime's prefetch and load_memory): the withheld row is never returned, the other
    row of the scope is, and the count names the dimension."""
    policy, envelope, old, code = ONE_DIMENSION[dimension]
    access = await scope_with(store, "one", RecallPolicy.model_validate(policy))
    passing = Envelope(MemoryType.PREFERENCE, SourceKind.SAVE_MEMORY_TOOL,
                       WriteReason.UNSPECIFIED, ConfirmationStatus.MODEL_INFERRED,
                       Sensitivity.PERSONAL)
    await save(store, pool, access, "kept", passing)
    await save(store, pool, access, "withheld", envelope, old=old)
    await store.open_lease(access, 60, context_id=CONTEXT)
    found = await DelegatedStore(delegate_pool).search(
        Caller(ALICE, "team-a", "one"), UNIT, limit=8, min_score=-1.0)
    assert [f.content for f in found] == ["kept"]
    assert await withheld(store, access) == {code: 1}


async def test_a_changed_policy_applies_at_the_next_statement_and_deletes_nothing(
        store: MemoryStore, pool: asyncpg.Pool) -> None:
    """Narrowed, the scope's rows are withheld at once (no re-grant, same generation);
    widened again, they are recalled again: the policy hides, erasure deletes."""
    open_ = scope_record("team-a/changing", agent_name="changing",
                         control_room="!changing:example.org")
    access = await enabled(store, open_)
    await save(store, pool, access, "sensitive",
               replace(USER_CONFIRMED, sensitivity=Sensitivity.SENSITIVE))
    assert await recalled(store, access) == ["sensitive"]
    assert await withheld(store, access) == {}

    narrowed = replace(open_, recall=RecallPolicy.model_validate({"sensitivities": ["normal"]}))
    state = await store.ensure_scope(narrowed)
    assert state.consent_generation == access.generation
    assert state.recall_withheld == ((Reason.RECALL_SENSITIVITY_WITHHELD, 1),)
    assert await recalled(store, access) == []
    assert state.entry_count == 1

    await store.ensure_scope(open_)
    assert await recalled(store, access) == ["sensitive"]


async def test_the_fence_still_holds_around_the_policy(
        store: MemoryStore, pool: asyncpg.Pool, runtime_pool: asyncpg.Pool) -> None:
    """The policy only ever narrows: another scope's rows stay unreadable whatever either
    policy says, a withdrawn scope reads nothing and counts nothing, a reader without a claim
    has no policy (and reads nothing), and the runtime role can neither compute another
    scope's policy nor count what it withholds."""
    mine = await scope_with(store, "mine", RecallPolicy())
    theirs = await scope_with(store, "theirs", NARROW)
    await save(store, pool, mine, "mine")
    await save(store, pool, theirs, "theirs")
    await save(store, pool, theirs, "theirs, withheld",
               replace(USER_CONFIRMED, sensitivity=Sensitivity.SENSITIVE))
    assert await recalled(store, mine) == ["mine"]
    assert await recalled(store, theirs) == ["theirs"]

    async with runtime_pool.acquire() as conn:
        async with conn.transaction():
            assert await conn.fetch("SELECT * FROM current_recall_claim()") == []
            assert await conn.fetchval("SELECT count(*) FROM readable_memory") == 0
        for call in ("SELECT effective_recall_policy('team-a/theirs')",
                     "SELECT * FROM recall_withheld('team-a/theirs')",
                     "SELECT scope_recall_policy('team-a/theirs')"):
            with pytest.raises(asyncpg.InsufficientPrivilegeError):
                await conn.fetch(call)
        async with conn.transaction():
            await enter(conn, mine, "recall")
            [claim] = await conn.fetch("SELECT * FROM current_recall_claim()")
            assert claim["scope_key"] == mine.scope_key
            assert [claim[k] for k in list(claim.keys())[3:]] == [None] * 5  # mine: no policy

    receipt = await store.withdraw(theirs.scope_key)
    assert receipt.verified
    assert await withheld(store, theirs) == {}
    assert await refused(store.search(theirs, UNIT)) is Reason.SCOPE_DISABLED


async def test_the_store_refuses_a_malformed_policy(store: MemoryStore,
                                                    pool: asyncpg.Pool) -> None:
    """Whoever writes the scope record (not only our operator), an unknown value, an empty
    set, a duplicate or an age beyond retention is INVALID_SPEC, a bare code."""
    await enabled(store)
    for column, value in (("recall_memory_types", ["preference", "secret"]),
                          ("recall_sensitivities", []),
                          ("recall_source_kinds", ["unknown", "unknown"]),
                          ("recall_confirmation_statuses", [None]),
                          ("recall_max_age_seconds", 8 * 86400),
                          ("recall_max_age_seconds", 0)):
        statement = f"UPDATE fgentic_memory.scope SET {column} = $1"
        assert await refused(guarded(pool.execute(statement, value))) is Reason.INVALID_SPEC


async def test_the_effective_policy_is_one_function_a_floor_can_meet(
        store: MemoryStore, pool: asyncpg.Pool) -> None:
    """effective_recall_policy(scope_key) is what the view and the counts apply (posture
    floors replace it, sql/0023), and recall_policy_meet keeps the most restrictive of two."""
    meet = await pool.fetchrow(
        "SELECT (fgentic_memory.recall_policy_meet("
        "  ROW('{preference,fact}', NULL, '{unknown}', NULL, 7200),"
        "  ROW('{fact,decision}', '{user_message}', NULL, NULL, 3600))).*")
    assert tuple(meet.values()) == (["fact"], ["user_message"], ["unknown"], None, 3600)

    access = await enabled(store)
    await save(store, pool, access, "kept")
    async with pool.acquire() as conn:
        tx = conn.transaction()
        await tx.start()
        # A floor that admits no type: every row withheld, and counted so.
        await conn.execute(
            "CREATE OR REPLACE FUNCTION fgentic_memory.effective_recall_policy(p_scope_key text)"
            " RETURNS fgentic_memory.recall_policy LANGUAGE sql STABLE SECURITY DEFINER"
            " SET search_path = pg_catalog, pg_temp AS $$ SELECT fgentic_memory"
            ".recall_policy_meet(fgentic_memory.scope_recall_policy(p_scope_key),"
            " ROW('{}', NULL, NULL, NULL, NULL)) $$")
        await conn.execute("SET LOCAL search_path = fgentic_memory, public")
        await enter(conn, access, "recall")
        assert await conn.fetchval("SELECT count(*) FROM fgentic_memory.readable_memory") == 0
        assert [tuple(r.values()) for r in await conn.fetch(
            "SELECT * FROM fgentic_memory.recall_withheld($1)", access.scope_key)] == [
            ("RECALL_TYPE_WITHHELD", 1)]
        await tx.rollback()
    assert await recalled(store, access) == ["kept"]
