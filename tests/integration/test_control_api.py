"""The memory control API end to end: real PostgreSQL, real kube-apiserver, real HTTP.

Each test gets a fresh database and namespace. MemoryScope and ConsentRecord objects live in
the real API server, and the API resolves scopes from them (``KubeDirectory``); the test plays
the operator by ensuring and granting the scope record in the store, except in the one test
that runs the real operator process to show that ``off`` stays off. The API is served by the
same low-level aiohttp server as in production, on a loopback port, with the library log
filters installed and every log record of the process captured.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import pytest
from kubernetes import client
from prometheus_client import REGISTRY, generate_latest

from fgentic_governance.api.memory import MemoryScopeSpec
from fgentic_governance.controlapi.auth import BearerTokenFile
from fgentic_governance.controlapi.cluster_directory import KubeDirectory
from fgentic_governance.controlapi.confirm import ConfirmationBook
from fgentic_governance.controlapi.http import make_handler
from fgentic_governance.controlapi.room import RoomPolicy
from fgentic_governance.controlapi.service import ControlService
from fgentic_governance.memory import Access, MemoryStore, ScopeRecord, bounds
from fgentic_governance.memory.confirmations import StoreLedger
from fgentic_governance.serving.http import scrub_library_logs, serve
from tests.support import processes
from tests.support.appservice import puppet, telegram
from tests.support.kube import GROUP, VERSION, Check, until_status
from tests.support.objects import example
from tests.support.store import (
    RUNTIME_SETTINGS,
    SHORT_TTL,
    defeat_bounds,
    open_insert,
    outlive,
)

pytestmark = pytest.mark.integration

LOCAL = "fgentic.local"
ALICE = "@alice:fgentic.local"
BOB = "@bob:fgentic.local"
BOT = "@fgentic-bot:fgentic.local"
GHOST_TEMPLATE = "@agent-{namespace}-{name}:{server}"
AGENT = "docs-agent"
TOKEN = "control-api-test-token-" + "x" * 24
FACT_SENTINEL = "SENTINEL-fact-4e1b9c"
REQUEST_SENTINEL = "SENTINEL-request-a73d05"


class Clock:
    """Monotonic seconds for confirmation lifetimes, advanced by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Env:
    ns: str
    store: MemoryStore
    pool: Any
    api: client.CustomObjectsApi
    http: aiohttp.ClientSession
    url: str
    clock: Clock
    responses: list[str] = field(default_factory=list)

    def ghost(self, agent: str = AGENT) -> str:
        return GHOST_TEMPLATE.format(namespace=self.ns, name=agent, server=LOCAL)


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "bridge-token"
    path.write_text(TOKEN)
    return path


@pytest.fixture
def log_capture(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    undo = scrub_library_logs()
    caplog.set_level(logging.DEBUG)
    yield caplog
    undo()


@pytest.fixture
async def env(control_plane: Any, k8s_client: client.ApiClient, pool: Any, token_file: Path,
              log_capture: pytest.LogCaptureFixture) -> AsyncIterator[Env]:
    ns = f"control-{uuid.uuid4().hex[:8]}"
    control_plane.ensure_namespace(ns)
    clock = Clock()
    store = MemoryStore(pool)
    service = ControlService(store, KubeDirectory(k8s_client, [ns]),
                             RoomPolicy(LOCAL, BOT, GHOST_TEMPLATE, appservice=telegram(LOCAL)),
                             ConfirmationBook(StoreLedger(pool), ttl=120, clock=clock))
    port = processes.free_port()
    runner = await serve(make_handler(service, BearerTokenFile(token_file)), "127.0.0.1", port)
    async with aiohttp.ClientSession() as http:
        yield Env(ns, store, pool, client.CustomObjectsApi(k8s_client), http,
                  f"http://127.0.0.1:{port}", clock)
    await runner.cleanup()


# -- scopes, rooms and calls -----------------------------------------------------------------


def control_room(name: str) -> str:
    return f"!{name}-control"


def scope_spec(subject: str = ALICE, agent: str = AGENT, room: str = "",
               ns: str = "") -> dict[str, Any]:
    spec = example("MemoryScope")["spec"]
    spec.update(subject={"mxid": subject, "originKind": "native-local"},
                agent={"namespace": ns, "name": agent}, controlRoom=room)
    return spec


async def make_scope(env: Env, name: str, *, subject: str = ALICE, agent: str = AGENT,
                     grant: bool = True) -> Access:
    """The MemoryScope and its granted ConsentRecord in the API server; the store record."""
    spec = scope_spec(subject, agent, control_room(name), env.ns)
    scope = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "MemoryScope",
             "metadata": {"name": name, "namespace": env.ns}, "spec": spec}
    consent = example("ConsentRecord")
    consent["metadata"] = {"name": f"{name}-grant", "namespace": env.ns}
    consent["spec"].update(scopeRef={"name": name},
                           subject={"mxid": subject, "originKind": "native-local"})
    await asyncio.to_thread(env.api.create_namespaced_custom_object, GROUP, VERSION, env.ns,
                            "memoryscopes", scope)
    await asyncio.to_thread(env.api.create_namespaced_custom_object, GROUP, VERSION, env.ns,
                            "consentrecords", consent)
    record = ScopeRecord.from_spec(env.ns, name, MemoryScopeSpec.model_validate(spec))
    await env.store.ensure_scope(record)
    generation = await env.store.grant(record.scope_key) if grant else 0
    return Access.for_scope(record, generation)


def snapshot(env: Env, name: str, *, subject: str = ALICE, agent: str = AGENT,
             **changes: Any) -> dict[str, Any]:
    """The allowed state of ``name``'s control room, with ``changes`` applied."""
    room: dict[str, Any] = {
        "roomId": control_room(name), "observedAt": int(time.time()), "roomVersion": "12",
        "joinRule": "invite", "historyVisibility": "joined", "encrypted": False,
        "members": [{"userId": subject, "membership": "join"},
                    {"userId": BOT, "membership": "join"},
                    {"userId": env.ghost(agent), "membership": "join"}],
        "serverAcl": {"allow": [LOCAL], "deny": [], "allowIpLiterals": False},
    }
    room.update(changes)
    return room


def command(env: Env, name: str, *, subject: str = ALICE, agent: str = AGENT,
            room: dict[str, Any] | None = None, **fields: Any) -> dict[str, Any]:
    return {"subject": subject, "agent": {"namespace": env.ns, "name": agent},
            "room": room if room is not None else snapshot(env, name, subject=subject,
                                                           agent=agent), **fields}


def lease_open(env: Env, name: str, *, context: str = "ctx-control-room",
               **fields: Any) -> dict[str, Any]:
    """A lease/open body: a command naming the turn's A2A context (the bridge's one per room
    and ghost)."""
    return command(env, name, contextId=context, **fields)


async def post(env: Env, action: str, body: dict[str, Any] | bytes, *,
               token: str | None = TOKEN, headers: dict[str, str] | None = None,
               path: str | None = None) -> tuple[int, dict[str, Any]]:
    sent = dict(headers or {})
    if token is not None:
        sent["Authorization"] = f"Bearer {token}"
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    async with env.http.post(env.url + (path or f"/v1/memory/{action}"), data=data,
                             headers=sent) as response:
        text = await response.text()
        assert response.headers["Cache-Control"] == "no-store"
        if action != "inspect" or response.status != 200:
            env.responses.append(text)
        return response.status, json.loads(text)


async def save(env: Env, access: Access, *texts: str, ttl: timedelta | None = None) -> list[str]:
    return [await env.store.save(access, text, ttl=ttl) for text in texts]


async def entries(env: Env, name: str, **page: Any) -> list[dict[str, Any]]:
    status, body = await post(env, "inspect", command(env, name, **page))
    assert status == 200, body
    return list(body["entries"])


def assert_no_sentinel(env: Env, caplog: pytest.LogCaptureFixture, *sentinels: str) -> None:
    formatter = logging.Formatter()
    logged = caplog.text + "".join(formatter.format(r) for r in caplog.records)
    metrics = generate_latest(REGISTRY).decode()
    for sentinel in sentinels:
        assert sentinel not in logged, "content reached a log record"
        assert sentinel not in metrics, "content reached a metric"
        for text in env.responses:
            assert sentinel not in text, "content reached a non-inspect response"


# -- status ----------------------------------------------------------------------------------


async def test_status_reports_content_free_scope_state(env: Env) -> None:
    access = await make_scope(env, "alice")
    await save(env, access, f"Alice prefers tea {FACT_SENTINEL}", "Alice cycles to work")
    status, body = await post(env, "status", command(env, "alice"))
    assert status == 200
    state = body["status"]
    assert state["enabled"] is True and state["posture"] == "enabled"
    assert state["purpose"] == "personal-preferences"
    assert (state["entryCount"], state["entryCap"], state["maxRetentionDays"]) == (2, 100, 7)
    assert state["consentGeneration"] == access.generation
    assert state["hardExpiry"].endswith("Z") and state["lastErasure"] is None
    assert FACT_SENTINEL not in json.dumps(body)


# -- inspect ---------------------------------------------------------------------------------


async def test_inspect_pages_are_bounded_stable_and_complete(env: Env) -> None:
    access = await make_scope(env, "alice")
    ids = await save(env, access, *(f"Alice fact number {i}" for i in range(25)))
    status, first = await post(env, "inspect", command(env, "alice"))
    assert status == 200
    assert (len(first["entries"]), first["limit"], first["total"], first["nextOffset"]) == (
        20, 20, 25, 20)
    again = await entries(env, "alice")
    assert [e["id"] for e in again] == [e["id"] for e in first["entries"]]
    status, second = await post(env, "inspect", command(env, "alice", offset=20))
    assert (len(second["entries"]), second["nextOffset"]) == (5, None)
    seen = [e["id"] for e in first["entries"] + second["entries"]]
    assert sorted(seen) == sorted(ids) and len(set(seen)) == 25
    # Newest first, ties by id: the store's order, identical on every page request.
    rows = await env.pool.fetch("SELECT id FROM fgentic_memory.memory"
                                " ORDER BY created_at DESC, id")
    assert seen == [r["id"] for r in rows]
    small = [e["id"] for e in await entries(env, "alice", offset=3, limit=4)]
    assert small == seen[3:7]
    entry = first["entries"][0]
    assert set(entry) == {"id", "text", "sourceScope", "createdAt", "expiresAt"}
    assert entry["sourceScope"] == f"{env.ns}/alice"
    assert entry["createdAt"] < entry["expiresAt"]


@pytest.mark.parametrize("page,reason", [
    ({"limit": 21}, "PAGE_OUT_OF_RANGE"), ({"limit": 0}, "PAGE_OUT_OF_RANGE"),
    ({"limit": -1}, "PAGE_OUT_OF_RANGE"), ({"offset": -1}, "PAGE_OUT_OF_RANGE"),
    ({"offset": 100}, "PAGE_OUT_OF_RANGE"), ({"offset": 2**31}, "PAGE_OUT_OF_RANGE"),
    ({"offset": 2**63}, "REQUEST_MALFORMED"), ({"limit": 2.5}, "REQUEST_MALFORMED"),
])
async def test_inspect_page_bounds_are_refused(
    env: Env, page: dict[str, int], reason: str
) -> None:
    await make_scope(env, "alice")
    status, body = await post(env, "inspect", command(env, "alice", **page))
    assert (status, body) == (400, {"reason": reason})


async def test_inspect_near_the_offset_bound_never_points_past_it(env: Env) -> None:
    access = await make_scope(env, "alice")
    await save(env, access, *(f"Alice fact number {i}" for i in range(3)))
    status, body = await post(env, "inspect", command(env, "alice", offset=99, limit=1))
    assert (status, body["entries"], body["nextOffset"]) == (200, [], None)


async def test_inspect_never_returns_an_expired_entry(env: Env) -> None:
    access = await make_scope(env, "alice")
    [short] = await save(env, access, "Alice is in Lisbon today", ttl=SHORT_TTL)
    saved = time.monotonic()
    [kept] = await save(env, access, "Alice prefers concise answers")
    assert {e["id"] for e in await entries(env, "alice")} == {short, kept}
    await outlive(saved)
    status, body = await post(env, "inspect", command(env, "alice"))
    assert status == 200 and body["total"] == 1
    assert [e["id"] for e in body["entries"]] == [kept]
    # Still physically present until cleanup: expiry, not deletion, is what hides it.
    assert await env.pool.fetchval("SELECT count(*) FROM fgentic_memory.memory") == 2


# -- forget <id> -----------------------------------------------------------------------------


async def test_forget_deletes_exactly_one_entry_and_verifies(env: Env) -> None:
    access = await make_scope(env, "alice")
    bob = await make_scope(env, "bob", subject=BOB)
    ids = await save(env, access, "Alice likes jazz", "Alice likes tea", "Alice likes Porto")
    [bobs] = await save(env, bob, "Bob likes tea")
    status, body = await post(env, "forget", command(env, "alice", entryId=ids[1]))
    assert status == 200 and body["reason"] == "OK"
    receipt = body["receipt"]
    assert (receipt["kind"], receipt["result"], receipt["deleted"]) == ("entry", "Verified", 1)
    assert {e["id"] for e in await entries(env, "alice")} == {ids[0], ids[2]}
    left = {r["id"] for r in await env.pool.fetch("SELECT id FROM fgentic_memory.memory")}
    assert left == {ids[0], ids[2], bobs}
    # Forgetting it again verifies its absence; nothing else moves.
    status, again = await post(env, "forget", command(env, "alice", entryId=ids[1]))
    assert (status, again["receipt"]["deleted"], again["receipt"]["result"]) == (
        200, 0, "Verified")
    # Alice cannot reach Bob's entry through her own scope.
    status, cross = await post(env, "forget", command(env, "alice", entryId=bobs))
    assert status == 200 and cross["receipt"]["deleted"] == 0
    assert await env.pool.fetchval(
        "SELECT count(*) FROM fgentic_memory.memory WHERE id = $1", bobs) == 1
    # The receipt is published, content-free, as the scope's last erasure.
    obj = await asyncio.to_thread(env.api.get_namespaced_custom_object, GROUP, VERSION, env.ns,
                                  "memoryscopes", "alice")
    assert obj["status"]["lastErasure"]["receiptId"] == cross["receipt"]["id"]
    status, state = await post(env, "status", command(env, "alice"))
    assert state["status"]["lastErasure"]["receiptId"] == cross["receipt"]["id"]


# -- forget all / off: two-step confirmation -------------------------------------------------


async def test_forget_all_needs_a_single_use_confirmation(env: Env) -> None:
    access = await make_scope(env, "alice")
    await save(env, access, "Alice likes jazz", "Alice likes tea")
    status, first = await post(env, "forget-all", command(env, "alice"))
    assert status == 202 and first["reason"] == "CONFIRMATION_REQUIRED"
    confirmation = first["confirmation"]
    assert confirmation["action"] == "forget_all" and confirmation["expiresInSeconds"] == 120
    assert len(await entries(env, "alice")) == 2  # Nothing happens on the first step.
    token = confirmation["token"]
    status, done = await post(env, "forget-all", command(env, "alice", confirmationToken=token))
    assert status == 200 and done["reason"] == "OK"
    assert (done["receipt"]["kind"], done["receipt"]["result"], done["receipt"]["deleted"]) == (
        "scope", "Verified", 2)
    assert await env.pool.fetchval("SELECT count(*) FROM fgentic_memory.memory") == 0
    state = await env.store.scope_state(access.scope_key)
    assert state.enabled and state.consent_generation > access.generation  # Consent kept.
    status, replay = await post(env, "forget-all",
                                command(env, "alice", confirmationToken=token))
    assert (status, replay) == (409, {"reason": "CONFIRMATION_INVALID"})


async def test_confirmation_is_bound_to_action_scope_and_subject(env: Env) -> None:
    alice = await make_scope(env, "alice")
    await make_scope(env, "alice-other", agent="other-agent")
    bob = await make_scope(env, "bob", subject=BOB)
    await save(env, alice, "Alice likes jazz")
    await save(env, bob, "Bob likes tea")

    async def token_for(action: str, name: str = "alice", **who: Any) -> str:
        status, body = await post(env, action, command(env, name, **who))
        assert status == 202
        return str(body["confirmation"]["token"])

    async def refused(action: str, token: str, name: str = "alice", **who: Any) -> str:
        status, body = await post(env, action, command(env, name, confirmationToken=token,
                                                       **who))
        assert status == 409, body
        return str(body["reason"])

    # A forget-all token cannot run off - and the misuse burns it.
    token = await token_for("forget-all")
    assert await refused("off", token) == "CONFIRMATION_INVALID"
    assert await refused("forget-all", token) == "CONFIRMATION_INVALID"
    # An off token cannot run forget-all.
    assert await refused("forget-all", await token_for("off")) == "CONFIRMATION_INVALID"
    # Alice's token is not Bob's, in Bob's own scope and room.
    assert await refused("forget-all", await token_for("forget-all"), "bob",
                         subject=BOB) == "CONFIRMATION_INVALID"
    # Nor does it carry over to Alice's scope of another Agent.
    assert await refused("forget-all", await token_for("forget-all"), "alice-other",
                         agent="other-agent") == "CONFIRMATION_INVALID"
    # A token that was never issued.
    assert await refused("off", "A" * 43) == "CONFIRMATION_INVALID"
    # The generation the user confirmed: a consent change in between voids the token.
    token = await token_for("forget-all")
    await env.store.grant(alice.scope_key)
    assert await refused("forget-all", token) == "CONFIRMATION_INVALID"
    assert await env.pool.fetchval("SELECT count(*) FROM fgentic_memory.memory"
                                   " WHERE scope_key = $1", bob.scope_key) == 1
    state = await env.store.scope_state(alice.scope_key)
    assert state.enabled  # No off ever ran.


async def test_confirmation_expires(env: Env) -> None:
    access = await make_scope(env, "alice")
    await save(env, access, "Alice likes jazz")
    _, first = await post(env, "off", command(env, "alice"))
    env.clock.now += 120
    status, body = await post(env, "off", command(
        env, "alice", confirmationToken=first["confirmation"]["token"]))
    assert (status, body) == (409, {"reason": "CONFIRMATION_EXPIRED"})
    state = await env.store.scope_state(access.scope_key)
    assert state.enabled and state.entry_count == 1


async def test_a_confirmation_started_on_one_replica_completes_on_the_other(
    env: Env, control_plane: Any, pg_dsn: str, tmp_path: Path, token_file: Path,
) -> None:
    """Two control API processes on one store (the chart's two replicas behind one Service):
    a token issued by one is redeemed by the other, once; only its digest is stored."""
    alice, bob = await make_scope(env, "alice"), await make_scope(env, "bob", subject=BOB)
    await save(env, alice, "Alice likes jazz")
    await save(env, bob, "Bob likes folk")
    replicas = []
    try:
        for index in range(2):
            work = tmp_path / f"replica-{index}"
            work.mkdir()
            replicas.append(_spawn_api(env, pg_dsn, token_file, work,
                                       control_plane.kubeconfig))
        (_, one), (_, two) = replicas
        status, first = await post(one, "forget-all", command(env, "alice"))
        assert status == 202
        token = first["confirmation"]["token"]
        stored = await env.pool.fetch("SELECT digest FROM fgentic_memory.confirmation")
        assert [bytes(r["digest"]) for r in stored] == [hashlib.sha256(token.encode()).digest()]
        status, done = await post(two, "forget-all", command(
            env, "alice", confirmationToken=token))
        assert status == 200 and done["receipt"]["deleted"] == 1
        for api in (one, two):  # spent on its first presentation, on any replica
            assert await post(api, "forget-all", command(
                env, "alice", confirmationToken=token)) == (
                409, {"reason": "CONFIRMATION_INVALID"})
        # The other way round, and for the other action.
        _, first = await post(two, "off", command(env, "bob", subject=BOB))
        status, done = await post(one, "off", command(
            env, "bob", subject=BOB, confirmationToken=first["confirmation"]["token"]))
        assert status == 200 and done["receipt"]["kind"] == "withdrawal"
        assert await env.pool.fetchval("SELECT count(*) FROM fgentic_memory.confirmation") == 0
    finally:
        for proc, _ in replicas:
            processes.stop(proc)


async def test_off_withdraws_consent_then_clears(env: Env) -> None:
    access = await make_scope(env, "alice")
    await save(env, access, "Alice likes jazz", "Alice likes tea")
    _, first = await post(env, "off", command(env, "alice"))
    status, done = await post(env, "off", command(
        env, "alice", confirmationToken=first["confirmation"]["token"]))
    assert status == 200 and done["reason"] == "OK"
    assert (done["receipt"]["kind"], done["receipt"]["result"], done["receipt"]["deleted"]) == (
        "withdrawal", "Verified", 2)
    state = await env.store.scope_state(access.scope_key)
    assert not state.enabled and state.entry_count == 0
    consent = await asyncio.to_thread(env.api.get_namespaced_custom_object, GROUP, VERSION,
                                      env.ns, "consentrecords", "alice-grant")
    assert consent["spec"]["decision"] == "withdrawn"
    status, body = await post(env, "inspect", command(env, "alice"))
    assert (status, body) == (403, {"reason": "SCOPE_DISABLED"})
    _, st = await post(env, "status", command(env, "alice"))
    assert st["status"]["enabled"] is False
    assert st["status"]["lastErasure"]["receiptId"] == done["receipt"]["id"]


async def test_off_stays_off_under_the_running_operator(
    env: Env, control_plane: Any, pg_dsn: str, tmp_path: Path,
) -> None:
    """The operator obeys the ConsentRecord; ``off`` withdraws it, so resyncs keep it off."""
    dsn_file = tmp_path / "dsn"
    dsn_file.write_text(pg_dsn)
    log = tmp_path / "operator.log"
    proc = processes.spawn_cli(["operator", "--kubeconfig", str(control_plane.kubeconfig),
                                "--namespace", env.ns, "--local-homeserver", LOCAL,
                                "--store-dsn-file", str(dsn_file)], log,
                               env={"FGENTIC_SCOPE_RESYNC_SECONDS": "1"})
    try:
        spec = scope_spec(ALICE, AGENT, control_room("alice"), env.ns)
        await asyncio.to_thread(
            env.api.create_namespaced_custom_object, GROUP, VERSION, env.ns, "memoryscopes",
            {"apiVersion": f"{GROUP}/{VERSION}", "kind": "MemoryScope",
             "metadata": {"name": "alice", "namespace": env.ns}, "spec": spec})
        consent = example("ConsentRecord")
        consent["metadata"] = {"name": "alice-grant", "namespace": env.ns}
        consent["spec"].update(scopeRef={"name": "alice"})
        await asyncio.to_thread(env.api.create_namespaced_custom_object, GROUP, VERSION,
                                env.ns, "consentrecords", consent)
        status = await _until(env, "alice", lambda s: s.get("phase") == "Enabled")
        record = ScopeRecord.from_spec(env.ns, "alice", MemoryScopeSpec.model_validate(spec))
        access = Access.for_scope(record, status["consentGeneration"])
        await save(env, access, f"Alice likes jazz {FACT_SENTINEL}")

        _, first = await post(env, "off", command(env, "alice"))
        code, done = await post(env, "off", command(
            env, "alice", confirmationToken=first["confirmation"]["token"]))
        assert code == 200 and done["receipt"]["result"] == "Verified"
        await _until(env, "alice", lambda s: s.get("phase") == "Disabled"
                     and s.get("reasonCode") == "CONSENT_WITHDRAWN")
        await asyncio.sleep(3)  # Three operator resyncs.
        state = await env.store.scope_state(access.scope_key)
        assert not state.enabled and state.entry_count == 0
        final = await _until(env, "alice", lambda s: s.get("phase") == "Disabled")
        assert final["lastErasure"]["result"] == "Verified"
        assert final["lastErasure"]["reasonCode"] == "CONSENT_WITHDRAWN"  # The cause (issue 37).
    finally:
        processes.stop(proc)
    assert FACT_SENTINEL not in log.read_text()


async def _until(env: Env, name: str, check: Check) -> dict[str, Any]:
    """The status of the test's scope ``name`` once ``check`` holds for it."""
    obj = await until_status(env.api, "memoryscopes", env.ns, name, check)
    return dict(obj["status"])


# -- delegation leases (issue 17 §2) ---------------------------------------------------------

LIVE_LEASES = ("SELECT count(*) FROM fgentic_memory.delegation_lease l"
               " JOIN fgentic_memory.scope s USING (scope_key)"
               " WHERE l.closed_at IS NULL AND l.expires_at > now()"
               " AND l.consent_generation = s.consent_generation AND s.enabled")


async def test_a_lease_opens_after_the_room_check_and_closes_idempotently(env: Env) -> None:
    access = await make_scope(env, "alice")
    status, body = await post(env, "lease/open", lease_open(env, "alice", seconds=120))
    assert status == 201, body
    lease = body["lease"]
    assert lease["consentGeneration"] == access.generation and lease["expiresAt"].endswith("Z")
    assert await env.pool.fetchval(LIVE_LEASES) == 1
    close = {"subject": ALICE, "agent": {"namespace": env.ns, "name": AGENT},
             "roomId": control_room("alice"), "leaseId": lease["id"]}
    # Closing needs no room snapshot: it must work after the room drifted.
    assert await post(env, "lease/close", close) == (200, {"reason": "OK", "closed": True})
    assert await post(env, "lease/close", close) == (200, {"reason": "OK", "closed": False})
    assert await env.pool.fetchval(LIVE_LEASES) == 0
    # Bob cannot close Alice's lease by naming her lease id under his own scope.
    await make_scope(env, "bob", subject=BOB)
    status, body = await post(env, "lease/open", lease_open(env, "alice"))
    bob_close = {**close, "subject": BOB, "roomId": control_room("bob"), "leaseId":
                 body["lease"]["id"]}
    assert await post(env, "lease/close", bob_close) == (200, {"reason": "OK", "closed": False})
    assert await env.pool.fetchval(LIVE_LEASES) == 1


async def test_no_lease_on_drift_without_consent_or_beyond_the_ceiling(env: Env) -> None:
    await make_scope(env, "alice")
    await make_scope(env, "bob", subject=BOB, grant=False)
    drifted = snapshot(env, "alice", joinRule="public")
    status, body = await post(env, "lease/open", lease_open(env, "alice", room=drifted))
    assert (status, body["reason"], body["drift"]) == (403, "ROOM_STATE_DRIFT", ["JOIN_RULE"])
    status, body = await post(env, "lease/open", lease_open(env, "bob", subject=BOB))
    assert (status, body["reason"]) == (403, "SCOPE_DISABLED")
    status, body = await post(env, "lease/open", lease_open(env, "alice", seconds=541))
    assert (status, body["reason"]) == (400, "REQUEST_MALFORMED")
    status, body = await post(env, "lease/open", lease_open(env, "alice", subject=BOB))
    assert status == 403
    assert await env.pool.fetchval(LIVE_LEASES) == 0


async def test_off_ends_the_open_lease(env: Env) -> None:
    await make_scope(env, "alice")
    status, _ = await post(env, "lease/open", lease_open(env, "alice"))
    assert status == 201 and await env.pool.fetchval(LIVE_LEASES) == 1
    _, issued = await post(env, "off", command(env, "alice"))
    token = issued["confirmation"]["token"]
    status, _ = await post(env, "off", command(env, "alice", confirmationToken=token))
    assert status == 200
    assert await env.pool.fetchval(LIVE_LEASES) == 0


async def test_a_replayed_lease_open_returns_its_lease_and_live_leases_are_capped(
        env: Env) -> None:
    await make_scope(env, "alice")
    body = lease_open(env, "alice", seconds=120, delegationId=str(uuid.uuid4()))
    first = await post(env, "lease/open", body)
    assert first[0] == 201, first
    for _ in range(5):  # a replayed body (a bridge's retry) opens nothing new
        assert await post(env, "lease/open", body) == first
    assert await env.pool.fetchval(LIVE_LEASES) == 1
    close = {"subject": ALICE, "agent": {"namespace": env.ns, "name": AGENT},
             "roomId": control_room("alice"), "leaseId": first[1]["lease"]["id"]}
    assert await post(env, "lease/close", close) == (200, {"reason": "OK", "closed": True})
    assert await post(env, "lease/open", body) == (403, {"reason": "LEASE_MISSING"})
    # Without a delegation id (the first wire shape) each call opens a lease, up to the cap.
    cap = await env.pool.fetchval("SELECT fgentic_memory.max_live_leases()")
    for _ in range(cap):
        status, answer = await post(env, "lease/open", lease_open(env, "alice"))
        assert status == 201, answer
    assert await post(env, "lease/open", lease_open(env, "alice")) == (
        429, {"reason": "LEASE_LIMIT_REACHED"})
    assert await env.pool.fetchval(LIVE_LEASES) == cap
    status, _ = await post(env, "lease/open", lease_open(env, "alice", delegationId="Not-a-uuid"))
    assert status == 400


async def test_a_lease_names_its_rooms_context(env: Env) -> None:
    """Issue 38 §1: the memory API binds a lease's memory calls to the A2A context the bridge
    names; without one, or with one no context can be, no lease opens; a replay may not move
    it to another context."""
    await make_scope(env, "alice")
    for missing in (command(env, "alice"), lease_open(env, "alice", context=""),
                    lease_open(env, "alice", context="a/b"),
                    lease_open(env, "alice", context="x" * 129)):
        assert await post(env, "lease/open", missing) == (400, {"reason": "REQUEST_MALFORMED"})
    delegation = str(uuid.uuid4())
    status, body = await post(env, "lease/open", lease_open(env, "alice", delegationId=delegation))
    assert status == 201, body
    assert await env.pool.fetchval(
        "SELECT context_id FROM fgentic_memory.delegation_lease WHERE lease_id = $1::uuid",
        body["lease"]["id"]) == "ctx-control-room"
    assert await post(env, "lease/open", lease_open(
        env, "alice", context="ctx-team-room", delegationId=delegation)) == (
        403, {"reason": "CONTEXT_CONFLICT"})


# -- room-state drift ------------------------------------------------------------------------


def _members(env: Env, *extra: tuple[str, str], drop: str = "") -> list[dict[str, str]]:
    base = [(ALICE, "join"), (BOT, "join"), (env.ghost(), "join")]
    return [{"userId": u, "membership": m} for u, m in [*base, *extra] if u != drop]


DRIFTS: dict[str, tuple[Callable[[Env], dict[str, Any]], str]] = {
    "room-version-11": (lambda e: {"roomVersion": "11"}, "ROOM_VERSION"),
    "join-rule-public": (lambda e: {"joinRule": "public"}, "JOIN_RULE"),
    "join-rule-knock": (lambda e: {"joinRule": "knock"}, "JOIN_RULE"),
    "history-shared": (lambda e: {"historyVisibility": "shared"}, "HISTORY_VISIBILITY"),
    "history-world-readable": (lambda e: {"historyVisibility": "world_readable"},
                               "HISTORY_VISIBILITY"),
    "encryption-present": (lambda e: {"encrypted": True}, "ENCRYPTED"),
    "extra-joined-member": (lambda e: {"members": _members(e, (BOB, "join"))},
                            "EXTRA_JOINED"),
    "extra-invited-member": (lambda e: {"members": _members(e, (BOB, "invite"))},
                             "EXTRA_INVITED"),
    "missing-subject": (lambda e: {"members": _members(e, drop=ALICE)}, "MISSING_SUBJECT"),
    "missing-bot": (lambda e: {"members": _members(e, drop=BOT)}, "MISSING_BOT"),
    "missing-ghost": (lambda e: {"members": _members(e, drop=e.ghost())}, "MISSING_GHOST"),
    "remote-member": (lambda e: {"members": _members(e, ("@mallory:partner.example", "join"))},
                      "REMOTE_MEMBER"),
    "acl-missing": (lambda e: {"serverAcl": None}, "SERVER_ACL_MISSING"),
    "acl-allows-another-server": (lambda e: {"serverAcl": {
        "allow": [LOCAL, "partner.example"], "deny": [], "allowIpLiterals": False}},
        "SERVER_ACL_ALLOW"),
    "acl-ip-literals": (lambda e: {"serverAcl": {
        "allow": [LOCAL], "deny": [], "allowIpLiterals": True}}, "SERVER_ACL_IP_LITERALS"),
    "stale-snapshot": (lambda e: {"observedAt": int(time.time()) - 300}, "SNAPSHOT_STALE"),
    "wrong-room-id": (lambda e: {"roomId": "!someone-elses-room"}, "ROOM_ID_MISMATCH"),
}


@pytest.mark.parametrize("change,subcode", DRIFTS.values(), ids=DRIFTS.keys())
async def test_room_drift_suppresses_content(
    env: Env, log_capture: pytest.LogCaptureFixture,
    change: Callable[[Env], dict[str, Any]], subcode: str,
) -> None:
    access = await make_scope(env, "alice")
    await save(env, access, f"Alice likes jazz {FACT_SENTINEL}")
    room = snapshot(env, "alice", **change(env))
    status, body = await post(env, "inspect", command(env, "alice", room=room))
    assert status == 403 and body["reason"] == "ROOM_STATE_DRIFT"
    assert subcode in body["drift"]
    assert set(body) == {"reason", "drift"}
    env.responses.append(json.dumps(body))
    assert_no_sentinel(env, log_capture, FACT_SENTINEL)


async def test_room_drift_refuses_every_command_and_both_confirmation_steps(env: Env) -> None:
    access = await make_scope(env, "alice")
    [entry] = await save(env, access, "Alice likes jazz")
    drifted = snapshot(env, "alice", members=_members(env, (BOB, "invite")))
    for action, extra in (("status", {}), ("inspect", {}), ("forget", {"entryId": entry}),
                          ("forget-all", {}), ("off", {})):
        status, body = await post(env, action, command(env, "alice", room=drifted, **extra))
        assert (status, body["reason"]) == (403, "ROOM_STATE_DRIFT"), action
    # A token issued in the allowed state cannot be redeemed once the room has drifted.
    _, first = await post(env, "forget-all", command(env, "alice"))
    status, body = await post(env, "forget-all", command(
        env, "alice", room=drifted, confirmationToken=first["confirmation"]["token"]))
    assert (status, body["reason"]) == (403, "ROOM_STATE_DRIFT")
    assert (await env.store.scope_state(access.scope_key)).entry_count == 1
    # Refused before the token was looked at: back in the allowed state, it still works.
    status, body = await post(env, "forget-all", command(
        env, "alice", confirmationToken=first["confirmation"]["token"]))
    assert (status, body["receipt"]["deleted"]) == (200, 1)


# -- who may call ----------------------------------------------------------------------------


async def test_wrong_subject_or_agent_is_refused(env: Env) -> None:
    access = await make_scope(env, "alice")
    await make_scope(env, "bob", subject=BOB)
    await save(env, access, f"Alice likes jazz {FACT_SENTINEL}")
    # Bob, in Alice's room (as its members list says): not his scope, not his room.
    bob_in_alice = command(env, "alice", subject=BOB)
    status, body = await post(env, "inspect", bob_in_alice)
    assert (status, body) == (403, {"reason": "ROOM_STATE_DRIFT", "drift": ["ROOM_ID_MISMATCH"]})
    # A subject with no scope at all, and Alice with an Agent she has no scope for.
    carol = command(env, "alice", subject="@carol:fgentic.local")
    assert (await post(env, "inspect", carol))[1] == {"reason": "SCOPE_MISSING"}
    other = command(env, "alice", agent="other-agent")
    assert (await post(env, "inspect", other))[1] == {"reason": "SCOPE_MISSING"}
    # Alice's localpart on another server is a different, remote principal.
    remote = command(env, "alice", subject="@alice:partner.example")
    assert (await post(env, "inspect", remote)) == (403, {"reason": "FEDERATION_DENIED"})
    # A deleted scope object is gone for the API at once, whatever the store still holds.
    await asyncio.to_thread(env.api.delete_namespaced_custom_object, GROUP, VERSION, env.ns,
                            "memoryscopes", "alice")
    assert (await post(env, "inspect", command(env, "alice")))[1] == {"reason": "SCOPE_MISSING"}
    assert all(FACT_SENTINEL not in text for text in env.responses)


async def test_a_bridged_puppet_declared_native_local_is_refused(env: Env) -> None:
    """ADR 0023 §31: a Telegram puppet's scope, declared native-local and granted (what the
    webhook refuses at admission), in its own control room: every command is refused
    APPSERVICE_IDENTITY_DENIED before the store is read, and its memory is left alone."""
    bridged = puppet(LOCAL)
    access = await make_scope(env, "puppet", subject=bridged)
    [entry] = await save(env, access, f"a puppet's fact {FACT_SENTINEL}")
    refused = (403, {"reason": "APPSERVICE_IDENTITY_DENIED"})
    for action, fields in (("status", {}), ("inspect", {}), ("forget", {"entryId": entry})):
        assert await post(env, action, command(env, "puppet", subject=bridged,
                                               **fields)) == refused, action
    assert await env.store.readable_count(access) == 1
    await make_scope(env, "alice")  # a native user of the same server is served
    assert (await post(env, "status", command(env, "alice")))[0] == 200
    assert all(FACT_SENTINEL not in text for text in env.responses)


async def test_unauthenticated_requests_are_refused(env: Env, token_file: Path) -> None:
    access = await make_scope(env, "alice")
    await save(env, access, "Alice likes jazz")
    body = command(env, "alice")
    for token in (None, "", "wrong-token-" + "y" * 30, TOKEN[:-1], TOKEN + "z"):
        assert await post(env, "inspect", body, token=token) == (
            401, {"reason": "UNAUTHENTICATED"})
    for scheme in (f"Basic {TOKEN}", TOKEN, f"Token {TOKEN}"):
        assert await post(env, "inspect", body, token=None,
                          headers={"Authorization": scheme}) == (
            401, {"reason": "UNAUTHENTICATED"})
    # Routes are not revealed to an unauthenticated caller.
    assert await post(env, "inspect", body, token=None, path="/v1/memory/nope") == (
        401, {"reason": "UNAUTHENTICATED"})
    assert await post(env, "inspect", body, path="/v1/memory/nope") == (
        404, {"reason": "NOT_FOUND"})
    async with env.http.get(env.url + "/v1/memory/status",
                            headers={"Authorization": f"Bearer {TOKEN}"}) as response:
        assert (response.status, await response.json()) == (
            405, {"reason": "METHOD_NOT_ALLOWED"})
    async with env.http.get(env.url + "/healthz") as response:
        assert response.status == 200
    # Without a token file nothing is admitted, and the pod reports not ready.
    token_file.unlink()
    assert await post(env, "inspect", body) == (401, {"reason": "UNAUTHENTICATED"})
    async with env.http.get(env.url + "/readyz") as response:
        assert response.status == 503


async def test_duplicate_names_are_malformed(env: Env) -> None:
    """A repeated name is refused, not resolved: pydantic alone served the last one."""
    access = await make_scope(env, "alice")
    await save(env, access, "Alice likes jazz")
    good = command(env, "alice")
    text = json.dumps(good)
    room = json.dumps(good["room"])
    duplicated = [
        f'{{"subject": "{BOB}", {text[1:]}'.encode(),  # Bob's command, Alice's subject last
        f'{text[:-1]}, "subject": "{ALICE}"}}'.encode(),
        text.replace(room, f'{room[:-1]}, "roomId": "{control_room("alice")}"}}').encode(),
    ]
    for body in duplicated:
        for action in ("status", "inspect", "forget-all", "off"):
            assert await post(env, action, body) == (400, {"reason": "REQUEST_MALFORMED"})
    assert (await post(env, "status", good))[0] == 200  # The same command, once each: served.


# -- content boundary ------------------------------------------------------------------------


async def _raw(env: Env, raw: bytes) -> bytes:
    host, port = env.url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(raw)
    await writer.drain()
    data = await reader.read()
    writer.close()
    return data


async def test_sentinels_leave_only_through_inspects_text(
    env: Env, log_capture: pytest.LogCaptureFixture,
) -> None:
    access = await make_scope(env, "alice")
    ids = await save(env, access, f"Alice likes jazz {FACT_SENTINEL}",
                     f"{FACT_SENTINEL} is Alice's favourite word")
    # The one content-bearing answer: the sentinel is in entries[].text and nowhere else.
    async with env.http.post(env.url + "/v1/memory/inspect",
                             data=json.dumps(command(env, "alice")),
                             headers={"Authorization": f"Bearer {TOKEN}"}) as response:
        inspected = await response.json()
    assert all(FACT_SENTINEL in e["text"] for e in inspected["entries"])
    for e in inspected["entries"]:
        e.pop("text")
    assert FACT_SENTINEL not in json.dumps(inspected)

    s = REQUEST_SENTINEL
    good = command(env, "alice")
    malformed: list[dict[str, Any] | bytes] = [
        f"{{{s}".encode(),
        json.dumps([s]).encode(),
        {**good, "subject": s},
        {**good, "subject": f"@{s.lower()}:fgentic.local"},
        {**good, "agent": {"namespace": env.ns, "name": s}},
        {**good, s: True},
        {**good, "note": s},
        {**good, "room": {**good["room"], "roomId": f"!{s}"}},
        {**good, "room": {**good["room"], "roomVersion": s}},
        {**good, "room": {**good["room"], "joinRule": s, "historyVisibility": s}},
        {**good, "room": {**good["room"], "members": [
            *good["room"]["members"], {"userId": f"@{s.lower()}:fgentic.local",
                                       "membership": "invite"}]}},
        {**good, "room": {**good["room"], "serverAcl": {
            "allow": [s], "deny": [s], "allowIpLiterals": False}}},
        (s * 5000).encode(),  # Larger than the body limit.
    ]
    for body in malformed:
        for action in ("status", "inspect", "forget", "forget-all", "off"):
            status, answer = await post(env, action, body)
            assert status in (400, 403, 413), (action, answer)
    for extra in ({"entryId": s}, {"entryId": ids[0].replace("-", s[:4])},
                  {"confirmationToken": s}, {"confirmationToken": s.ljust(43, "x")[:43]},
                  {"offset": s}, {"limit": [s]}):
        for action in ("inspect", "forget", "forget-all", "off"):
            status, answer = await post(env, action, {**good, **extra})
            assert status in (400, 409), (action, answer)
    await post(env, "status", good, headers={"User-Agent": s, "Referer": s, "X-Note": s})
    await post(env, "status", good, path=f"/v1/memory/{s}")
    await post(env, "status", good, path=f"/v1/memory/status?{s}=1")
    await post(env, "status", good, token=s)
    # Malformed HTTP framing: aiohttp's parser answers, with the status alone.
    for raw in (f"{s} /v1/memory/status HTTP/1.1\r\nHost: x\r\n\r\n".encode(),
                f"POST /v1/memory/status HTTP/1.1\r\nHost: x\r\nBad\x01{s}: 1\r\n\r\n".encode(),
                f"POST /v1/memory/status HTTP/1.1\r\nHost: x\r\nContent-Length: {s}\r\n\r\n"
                .encode()):
        answer = await _raw(env, raw)
        assert answer.startswith(b"HTTP/1.") and b" 400 " in answer.split(b"\r\n")[0]
        env.responses.append(answer.decode("latin-1"))
    # A real erasure and a confirmation round trip, so their log lines are covered too.
    await post(env, "forget", {**good, "entryId": ids[0]})
    _, first = await post(env, "forget-all", good)
    await post(env, "forget-all", {**good, "confirmationToken": first["confirmation"]["token"]})
    assert_no_sentinel(env, log_capture, FACT_SENTINEL, REQUEST_SENTINEL)
    # The tokens themselves are credentials of a kind: never logged either.
    assert first["confirmation"]["token"] not in log_capture.text
    assert TOKEN not in log_capture.text
    lines = [r.getMessage() for r in log_capture.records
             if r.name == "fgentic_governance.controlapi"]
    assert any("action=forget-all reason=OK" in line for line in lines)
    assert any("action=unknown reason=NOT_FOUND" in line for line in lines)
    # aiohttp did log the malformed framing - reduced to the exception type by the filter.
    assert any(r.name == "aiohttp.server" and "BadHttp" in r.getMessage()
               for r in log_capture.records)


# -- the real process ------------------------------------------------------------------------


async def test_control_api_process_serves_and_logs_no_content(
    env: Env, control_plane: Any, pg_dsn: str, tmp_path: Path, token_file: Path,
) -> None:
    access = await make_scope(env, "alice")
    await save(env, access, f"Alice likes jazz {FACT_SENTINEL}")
    dsn_file = tmp_path / "dsn"
    dsn_file.write_text(pg_dsn)
    port = processes.free_port()
    log = tmp_path / "control-api.log"
    proc = processes.spawn_and_wait(
        ["control-api", "--store-dsn-file", str(dsn_file), "--token-file", str(token_file),
         "--local-homeserver", LOCAL, "--bot-mxid", BOT, "--ghost-template", GHOST_TEMPLATE,
         "--kubeconfig", str(control_plane.kubeconfig), "--namespace", env.ns,
         "--host", "127.0.0.1", "--port", str(port)], log, port)
    try:
        process = Env(env.ns, env.store, env.pool, env.api, env.http,
                      f"http://127.0.0.1:{port}", env.clock)
        assert await post(process, "status", command(env, "alice"), token=None) == (
            401, {"reason": "UNAUTHENTICATED"})
        status, body = await post(process, "inspect", command(env, "alice"))
        assert status == 200 and FACT_SENTINEL in body["entries"][0]["text"]
        status, body = await post(process, "inspect", {**command(env, "alice"),
                                                       "note": REQUEST_SENTINEL})
        assert (status, body) == (400, {"reason": "REQUEST_MALFORMED"})
        await _raw(process, f"{REQUEST_SENTINEL} / HTTP/1.1\r\n\r\n".encode())
        _, first = await post(process, "off", command(env, "alice"))
        status, done = await post(process, "off", command(
            env, "alice", confirmationToken=first["confirmation"]["token"]))
        assert status == 200 and done["receipt"]["kind"] == "withdrawal"
    finally:
        processes.stop(proc)
    text = log.read_text()
    assert "action=inspect reason=OK" in text and "action=off reason=OK" in text
    for secret in (FACT_SENTINEL, REQUEST_SENTINEL, TOKEN, first["confirmation"]["token"],
                   ALICE):
        assert secret not in text


def _spawn_api(env: Env, dsn: str, token_file: Path, work: Path, kubeconfig: Path
               ) -> tuple[subprocess.Popen[bytes], Env]:
    dsn_file = work / "dsn"
    dsn_file.write_text(dsn)
    port = processes.free_port()
    proc = processes.spawn_and_wait(
        ["control-api", "--store-dsn-file", str(dsn_file), "--token-file", str(token_file),
         "--local-homeserver", LOCAL, "--bot-mxid", BOT, "--ghost-template", GHOST_TEMPLATE,
         "--kubeconfig", str(kubeconfig), "--namespace", env.ns,
         "--host", "127.0.0.1", "--port", str(port)], work / "control-api.log", port)
    return proc, Env(env.ns, env.store, env.pool, env.api, env.http,
                     f"http://127.0.0.1:{port}", env.clock)


async def _probe(env: Env, path: str) -> tuple[int, dict[str, Any]]:
    async with env.http.get(env.url + path) as response:
        return response.status, json.loads(await response.text())


async def _stuck_runtime(dsn: str, access: Access) -> tuple[Any, Any]:
    """A runtime connection holding the scope row in an open insert, its own bounds defeated;
    (connection, open transaction)."""
    stuck = await asyncpg.connect(dsn, server_settings=RUNTIME_SETTINGS)
    tx = await open_insert(stuck, access)
    await defeat_bounds(stuck)
    return stuck, tx


async def test_parked_erasures_leave_other_users_answered(
    env: Env, control_plane: Any, pg_dsn: str, tmp_path: Path, token_file: Path,
) -> None:
    """Issue 14, finding 2: runtime transactions hold six users' scope rows and defeated their
    own bounds; six confirmed forget-alls park on their fences. Bob is still served at once,
    the forget-alls end within the fence's bound with a code, and the six scopes are closed."""
    users = [f"user{i}" for i in range(6)]
    accesses = [await make_scope(env, u, subject=f"@{u}:{LOCAL}") for u in users]
    bob = await make_scope(env, "bob", subject=BOB)
    await save(env, bob, "Bob likes tea")
    stuck = [await _stuck_runtime(pg_dsn, a) for a in accesses]
    proc, api = _spawn_api(env, pg_dsn, token_file, tmp_path, control_plane.kubeconfig)
    try:
        def confirm(user: str, token: str) -> dict[str, Any]:
            return command(env, user, subject=f"@{user}:{LOCAL}", confirmationToken=token)

        tokens = [(await post(api, "forget-all", command(env, u, subject=f"@{u}:{LOCAL}")))[1]
                  ["confirmation"]["token"] for u in users]
        parked = [asyncio.create_task(post(api, "forget-all", confirm(u, t)))
                  for u, t in zip(users, tokens, strict=True)]
        await asyncio.sleep(1.0)
        started = time.monotonic()
        status, body = await post(api, "status", command(env, "bob", subject=BOB))
        assert status == 200 and body["reason"] == "OK"
        assert await _probe(api, "/readyz") == (200, {"reason": "OK"})
        assert time.monotonic() - started < bounds.ACQUIRE_SECONDS
        answers = await asyncio.wait_for(asyncio.gather(*parked), 60)
        assert {status for status, _ in answers} == {503}
        assert {body["reason"] for _, body in answers} <= {"STORE_LOCK_TIMEOUT",
                                                           "STORE_UNAVAILABLE"}
        assert "STORE_LOCK_TIMEOUT" in {body["reason"] for _, body in answers}
        # An erasure that got a slot placed its hold, then its fence ran out of time.
        held = [(await env.store.scope_state(a.scope_key)).held for a in accesses]
        timed_out = [body["reason"] == "STORE_LOCK_TIMEOUT" for _, body in answers]
        assert held == timed_out
        user = users[held.index(True)]
        status, body = await post(api, "inspect", command(env, user, subject=f"@{user}:{LOCAL}"))
        assert status == 403 and body["reason"] == "SCOPE_DISABLED"
        for _, tx in stuck:
            await tx.rollback()
        _, first = await post(api, "forget-all", command(env, user, subject=f"@{user}:{LOCAL}"))
        status, done = await post(api, "forget-all",
                                  confirm(user, first["confirmation"]["token"]))
        assert status == 200 and done["receipt"]["result"] == "Verified"
        assert not (await env.store.scope_state(accesses[users.index(user)].scope_key)).held
    finally:
        processes.stop(proc)
        for conn, _ in stuck:
            await conn.close()


async def test_readiness_follows_the_store(
    env: Env, control_plane: Any, tmp_path: Path, token_file: Path,
) -> None:
    """Issue 14, finding 2: /readyz fails while the pool cannot serve; /healthz stays 200."""
    dead = f"postgresql://postgres@127.0.0.1:{processes.free_port()}/nothing"
    proc, api = _spawn_api(env, dead, token_file, tmp_path, control_plane.kubeconfig)
    try:
        assert await _probe(api, "/readyz") == (503, {"reason": "STORE_UNAVAILABLE"})
        assert await _probe(api, "/healthz") == (200, {"reason": "OK"})
    finally:
        processes.stop(proc)


# -- the platform CLI ------------------------------------------------------------------------


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fgentic_governance.cli", "memory", *args],
                          capture_output=True, text=True, timeout=120, check=False)


async def test_memory_cli_is_content_free(
    env: Env, control_plane: Any, pg_dsn: str, tmp_path: Path,
) -> None:
    alice = await make_scope(env, "alice")
    bob = await make_scope(env, "bob", subject=BOB)
    await save(env, alice, f"Alice likes jazz {FACT_SENTINEL}", "Alice likes tea")
    await save(env, bob, f"Bob likes tea {FACT_SENTINEL}")
    dsn = tmp_path / "dsn"
    dsn.write_text(pg_dsn)
    kube = ("--kubeconfig", str(control_plane.kubeconfig))
    outputs: list[str] = []

    async def run(*args: str) -> subprocess.CompletedProcess[str]:
        done = await asyncio.to_thread(_cli, *args, "--store-dsn-file", str(dsn))
        outputs.append(done.stdout + done.stderr)
        return done

    listed = await run("list-scopes")
    assert listed.returncode == 0
    assert f"{env.ns}/alice\ttrue\t{alice.generation}\t2" in listed.stdout
    assert f"{env.ns}/bob\ttrue\t{bob.generation}\t1" in listed.stdout
    only_bob = await run("list-scopes", "--subject", BOB, "--json")
    assert [json.loads(line)["scope"] for line in only_bob.stdout.splitlines()] == [
        f"{env.ns}/bob"]

    status = await run("status", f"{env.ns}/alice", "--json", *kube)
    fields = json.loads(status.stdout)
    assert (fields["entries"], fields["generation"], fields["enabled"]) == (
        2, alice.generation, True)
    assert fields["lastErasure"] is None and fields["hardExpiry"].endswith("Z")

    erased = await run("erase-scope", f"{env.ns}/alice", *kube)
    assert erased.returncode == 0, erased.stderr
    assert "result: Verified" in erased.stdout and "deleted: 2" in erased.stdout
    assert "statusRecorded: True" in erased.stdout
    after = json.loads((await run("status", f"{env.ns}/alice", "--json", *kube)).stdout)
    assert after["entries"] == 0 and "Verified" in after["lastErasure"]
    assert (await env.store.scope_state(bob.scope_key)).entry_count == 1

    missing = await run("status", f"{env.ns}/nobody", "--no-kube")
    assert missing.returncode == 2 and "refused: SCOPE_MISSING" in missing.stderr
    invalid = await run("erase-scope", f"not a key {REQUEST_SENTINEL}", "--no-kube")
    assert invalid.returncode == 2 and "refused: INVALID_SPEC" in invalid.stderr
    for text in outputs:
        assert FACT_SENTINEL not in text and REQUEST_SENTINEL not in text
        assert ALICE not in text and BOB not in text


async def test_the_log_check_would_catch_aiohttps_echo_without_the_filter(
    env: Env, log_capture: pytest.LogCaptureFixture,
) -> None:
    """A control for the sentinel test: unfiltered, aiohttp logs the offending bytes."""
    from fgentic_governance.serving.http import ContentFreeFilter

    # Both places the filter sits: aiohttp's logger, and every root handler (which catches
    # the libraries' child loggers; log_capture's handler included).
    targets: list[logging.Filterer] = [logging.getLogger("aiohttp.server"),
                                       *logging.getLogger().handlers]
    removed = [(target, f) for target in targets
               for f in target.filters if isinstance(f, ContentFreeFilter)]
    for target, content_free in removed:
        target.removeFilter(content_free)
    try:
        answer = await _raw(env, f"{REQUEST_SENTINEL} / HTTP/1.1\r\n\r\n".encode())
    finally:
        for target, content_free in removed:
            target.addFilter(content_free)
    assert removed and REQUEST_SENTINEL in log_capture.text
    # The answer is still content-free: that part is the server's, not the filter's.
    assert REQUEST_SENTINEL not in answer.decode("latin-1")
