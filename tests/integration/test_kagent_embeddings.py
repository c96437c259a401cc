"""ADR 0023 §42 with the real kagent-adk 0.9.11 runtime: its embeddings route is the memory
API's /v1/embeddings, so nothing is embedded before a consented delegation is open.

The runtime embeds a fact or a query before it calls the memory API. With its embedding
provider's base URL at the memory API (the Agent's embedding ModelConfig, in a cluster), each
embeddings request is admitted against the calling Agent's live lease before it reaches the
provider: the caller is the routed Pod at the request's source address (here a Pod object in
the real API server whose status says 127.0.0.1, where the runtime process runs).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import pytest
from kubernetes import client
from prometheus_client import REGISTRY, generate_latest

from fgentic_governance.memory import Access, MemoryStore
from fgentic_governance.memoryapi.activity import SLACK_FRACTION, WINDOW_SECONDS
from tests.support.kagent import (
    CallTool,
    ChatStub,
    ControllerStub,
    EmbeddingStub,
    RunningAgent,
    a2a_turn,
    start_agent,
)
from tests.support.memory_api import agent_token, memory_api, routed_pod
from tests.support.polling import until_async
from tests.support.store import past_turns, scope_record

pytestmark = pytest.mark.integration

AGENT = "helper"
ALICE = "@alice:fgentic.local"
BOB = "@bob:fgentic.local"
WINDOW = 2.0
"""The memory API's activity window in these tests (a turn's calls fall well within it)."""
PAST_WINDOW = WINDOW * (1 + SLACK_FRACTION) + 0.3
"""Long enough for a user's calls to leave the window, the store's notes included (sql/0019)."""
EMBEDDING_UNITS = ("SELECT coalesce(sum(units), 0) FROM fgentic_memory.op_ledger"
                   " WHERE scope_key = $1 AND operation = 'embedding'")


API_LOG = "fgentic_governance.memoryapi"


def api_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The memory API's own (content-free) log lines, with the time each was written."""
    return [f"{time.strftime('%H:%M:%S', time.localtime(r.created))}.{int(r.msecs):03d} "
            f"{r.getMessage()}" for r in caplog.records if r.name == API_LOG]


@dataclass
class Governed:
    """An Agent's namespace (its service account's token, its routed Pod at 127.0.0.1), the
    stubs outside the system, Alice's granted scope, the memory API and the real runtime with
    its embeddings (and, with ``model_route``, its model) at the memory API."""

    ns: str
    access: Access
    provider: EmbeddingStub
    chat: ChatStub
    controller: ControllerStub
    agent: RunningAgent


@asynccontextmanager
async def governed(k8s_client: client.ApiClient, delegate_pool: asyncpg.Pool,
                   store: MemoryStore, workdir: Path, prefix: str, *,
                   model_route: bool = False,
                   activity_seconds: float = WINDOW_SECONDS) -> AsyncIterator[Governed]:
    ns = f"{prefix}-{uuid.uuid4().hex[:8]}"
    await asyncio.to_thread(client.CoreV1Api(k8s_client).create_namespace,
                            client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
    token = await agent_token(k8s_client, ns, AGENT)
    await asyncio.to_thread(routed_pod, k8s_client, ns, AGENT, "127.0.0.1")
    provider, chat, controller = EmbeddingStub(), ChatStub(), ControllerStub()
    for stub in (provider, chat, controller):
        await stub.start()
    record = scope_record(f"{ns}/alice", subject_mxid=ALICE, agent_namespace=ns,
                          agent_name=AGENT, control_room="!alice-control:fgentic.local")
    await store.ensure_scope(record)
    access = Access.for_scope(record, await store.grant(record.scope_key))  # consent only
    agent = None
    try:
        async with memory_api(delegate_pool, k8s_client, controller.base_url,
                              local_server="fgentic.local",
                              embeddings_url=provider.url + "/embeddings",
                              model_url=chat.url + "/chat/completions" if model_route else "",
                              activity_seconds=activity_seconds) as url:
            agent = await start_agent(workdir / "runtime", kagent_url=url, chat=chat,
                                      embeddings=provider, embeddings_url=url + "/v1",
                                      model_url=url + "/v1" if model_route else None,
                                      token=token, namespace=ns, agent=AGENT)
            yield Governed(ns, access, provider, chat, controller, agent)
    finally:
        if agent is not None:
            agent.stop()
        for stub in (provider, chat, controller):
            await stub.stop()
        await asyncio.to_thread(client.CoreV1Api(k8s_client).delete_namespaced_pod,
                                f"{AGENT}-pod", ns, grace_period_seconds=0)


async def test_the_runtime_embeds_nothing_without_a_lease(
        k8s_client: client.ApiClient, pool: asyncpg.Pool, delegate_pool: asyncpg.Pool,
        store: MemoryStore, *, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=API_LOG)
    async with governed(k8s_client, delegate_pool, store, tmp_path, "embed",
                        activity_seconds=WINDOW) as world:
        ns, access, agent = world.ns, world.access, world.agent
        provider, chat, controller = world.provider, world.chat, world.controller
        fact = "Alice likes green tea with her breakfast every day."

        async def turn(user: str = ALICE, context: str | None = None) -> None:
            try:
                await a2a_turn(agent.base_url, fact, user_id=user,
                               context_id=context or uuid.uuid4().hex)
            except TimeoutError:  # say what the runtime had done by then
                calls = [(r.method, r.path, r.status) for stub in (controller, chat, provider)
                         for r in stub.requests]
                raise AssertionError(
                    f"turn timed out at {time.strftime('%H:%M:%S')}; calls: {calls}; "
                    f"memory API: {api_lines(caplog)}; "
                    f"runtime log: {agent.log_text()[-1500:]}; "
                    f"runtime stacks: {await agent.dump_stacks()}"
                ) from None

        chat.script(CallTool("save_memory", {"content": fact}))
        await turn()
        # The first turn's prefetch and the save_memory call both needed an embedding:
        # refused before the provider (no live lease), so nothing was embedded or stored.
        assert provider.requests == []
        assert await pool.fetchval("SELECT count(*) FROM fgentic_memory.memory") == 0
        lines = api_lines(caplog)
        refused = [line for line in lines if "action=embeddings reason=LEASE_MISSING" in line]
        assert len(refused) == 2 == len(lines)  # the prefetch's and the save's
        # The lease names the room's context, and serves only a turn of it (sql/0021).
        alice_room = uuid.uuid4().hex
        alice_turn = await store.open_lease(access, 120, context_id=alice_room)
        chat.script(CallTool("save_memory", {"content": fact}))
        await turn(context=alice_room)
        embedded = len(provider.requests)
        assert embedded >= 2  # prefetch + save, now inside the lease
        assert await pool.fetchval("SELECT count(*) FROM fgentic_memory.memory") == 1
        # Each embedding was charged to Alice's scope before it was made.
        assert await pool.fetchval(EMBEDDING_UNITS, access.scope_key) >= embedded

        # A failing provider whose error quotes a sentinel (ADR 0023 §44): the route
        # relays no failed body, so the runtime logs (at ERROR, which LOG_LEVEL keeps)
        # our bounded code, and no sink of ours sees the sentinel.
        sentinel = f"sentinel-provider-{uuid.uuid4().hex[:8]}"
        provider.failure = sentinel
        chat.script(CallTool("save_memory", {"content": "Alice cycles to work."}))
        await turn()
        assert len(provider.requests) > embedded  # it was asked, and failed
        runtime_log = agent.log_text()
        assert "UPSTREAM_UNAVAILABLE" in runtime_log  # what the runtime was answered
        metrics = generate_latest(REGISTRY).decode()
        for sink in (runtime_log, "\n".join(api_lines(caplog)), caplog.text, metrics):
            assert sentinel not in sink
        assert 'fgentic_memory_api_passthrough_total{status="replaced"}' in metrics
        assert await pool.fetchval("SELECT count(*) FROM fgentic_memory.memory") == 1

        # Another user's turn while Alice is leased (issue 26): an embedding names no user
        # (kagent's embeddings client sends no X-User-Id), but the turn's session calls do,
        # so Bob's embeddings are his: refused without a lease of his, never charged to
        # Alice; once he is leased, charged to him. Each turn is still answered.
        provider.failure = None
        await asyncio.sleep(PAST_WINDOW)  # Alice's turn is no longer recent
        asked, charged = len(provider.requests), await pool.fetchval(
            EMBEDDING_UNITS, access.scope_key)
        chat.script(CallTool("save_memory", {"content": "Bob walks his dog at six."},
                             then="Noted."))
        await turn(BOB)  # answered: a2a_turn raises unless the task completed
        assert len(provider.requests) == asked
        assert await pool.fetchval(EMBEDDING_UNITS, access.scope_key) == charged
        assert any("action=embeddings reason=LEASE_MISSING" in line
                   for line in api_lines(caplog)[-3:])
        bob = scope_record(f"{ns}/bob", subject_mxid=BOB, agent_namespace=ns,
                           agent_name=AGENT, control_room="!bob-control:fgentic.local")
        await store.ensure_scope(bob)
        bob_room = uuid.uuid4().hex
        await store.open_lease(Access.for_scope(bob, await store.grant(bob.scope_key)), 120,
                               context_id=bob_room)
        await asyncio.sleep(PAST_WINDOW)
        # Alice's turn is still leased (sql/0018): Bob's embeddings may be hers, so they are
        # refused, and charged to neither; his turn is still answered.
        chat.script(CallTool("save_memory", {"content": "Bob walks his dog at six."},
                             then="Noted."))
        await turn(BOB)
        assert len(provider.requests) == asked
        assert any("action=embeddings reason=SCOPE_AMBIGUOUS" in line
                   for line in api_lines(caplog)[-3:])
        assert await pool.fetchval(EMBEDDING_UNITS, bob.scope_key) == 0
        # Her turn ends: Bob is the one leased user, and his turn's embeddings are his.
        assert await store.close_lease(access.scope_key, alice_turn.id)
        chat.script(CallTool("save_memory", {"content": "Bob walks his dog at six."},
                             then="Noted."))
        await turn(BOB, bob_room)
        assert len(provider.requests) > asked
        assert await pool.fetchval(EMBEDDING_UNITS, bob.scope_key) >= 1
        assert await pool.fetchval(EMBEDDING_UNITS, access.scope_key) == charged
        assert await pool.fetchval("SELECT count(*) FROM fgentic_memory.memory") == 2


SUMMARIZE_UNITS = ("SELECT coalesce(sum(units), 0) FROM fgentic_memory.op_ledger"
                   " WHERE scope_key = $1 AND operation = 'summarize'")
ROWS = "SELECT count(*) FROM fgentic_memory.memory"


def settled(lines: list[str]) -> bool:
    """Whether a session's background work is over, read from the memory API's lines since
    it began: kagent-adk 0.9.11 asks for the summary after the fifth reply and then, with or
    without one, embeds what it saves; a refused embedding ends it, an admitted one is
    followed by the save itself."""
    summary = next((i for i, line in enumerate(lines) if "kind=summary" in line), None)
    if summary is None:
        return False
    after = lines[summary + 1:]
    embedding = next((line for line in after if "action=embeddings" in line), None)
    if embedding is None:
        return False
    return "reason=OK" not in embedding or any("action=batch" in line for line in after)


async def test_a_summary_is_admitted_before_the_model_works(
        k8s_client: client.ApiClient, pool: asyncpg.Pool, delegate_pool: asyncpg.Pool,
        store: MemoryStore, *, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """ADR 0023 §42-43 at the earliest point we see: the Agent's model route is the memory
    API's /v1/chat/completions. kagent's summarisation (every fifth user turn of a session) is
    admitted there before the model is asked: refused without a lease, over 16 KiB of
    conversation, or before the cadence allows it, each while the turn's reply still arrives;
    admitted, it is charged once (the automatic save takes its reservation). The Agent's own
    turns pass unchanged; the embeddings route refuses a query over 512 bytes."""
    caplog.set_level(logging.INFO, logger=API_LOG)
    async with governed(k8s_client, delegate_pool, store, tmp_path, "summ",
                        model_route=True) as world:
        access, agent, provider, chat = world.access, world.agent, world.provider, world.chat
        chat.summary = ["Alice likes green tea.", "Alice cycles to work."]

        def lines(code: str = "") -> int:
            return sum(f"action=model kind=summary reason={code}" in line
                       for line in api_lines(caplog))

        async def session(texts: list[str], context: str | None = None) -> None:
            """One session of ``len(texts)`` user turns in ``context`` (a new one by
            default); each reply arrives (a2a_turn raises unless the task completed), then its
            background work is over."""
            since = len(api_lines(caplog))
            context = context or uuid.uuid4().hex
            for text in texts:
                assert await a2a_turn(agent.base_url, text, user_id=ALICE,
                                      context_id=context) == "OK."
            await until_async(lambda: settled(api_lines(caplog)[since:]),
                              what="the session's summary and automatic save were decided")

        five = [f"Turn {i}: Alice mentions the weather." for i in range(5)]

        # No lease: the fifth turn's summary is refused before the model sees it.
        await session(five)
        assert lines("LEASE_MISSING") == 1
        assert chat.summariser_requests() == []
        assert len(chat.requests) == 5  # the turns themselves passed unchanged
        # Its automatic save never came (its embedding was refused), so Alice's next context
        # would be bound to nothing until max_save_seconds() (120 s) pass (sql/0021): pass them.
        await pool.execute("UPDATE fgentic_memory.agent_context SET save_until = now()")
        # A live lease but fewer than five leased turns: the cadence refuses it.
        # Each leased session runs in the context its lease names (sql/0021).
        room = uuid.uuid4().hex
        lease = await store.open_lease(access, 300, context_id=room)
        await session(five, room)
        assert lines("SUMMARY_CADENCE_REACHED") == 1
        assert chat.summariser_requests() == []
        # The runtime then saves what it has without a summary: the cadence refuses that too.
        assert sum("action=batch reason=SUMMARY_CADENCE_REACHED status=429" in line
                   for line in api_lines(caplog)) == 1
        # Five leased turns: admitted, summarised, saved; charged one summarisation.
        await store.close_lease(access.scope_key, lease.id)
        await past_turns(store, access, 3)
        room = uuid.uuid4().hex
        lease = await store.open_lease(access, 300, context_id=room)  # the fifth
        await session(five, room)
        assert lines("OK") == 1  # said on admission, before the request is passed on
        assert await pool.fetchval(ROWS) == 2  # saved: session() waited for the save's answer
        assert len(chat.summariser_requests()) == 1
        assert await pool.fetchval(SUMMARIZE_UNITS, access.scope_key) == 1
        # Over 16 KiB of conversation: refused before the model, whatever the cadence.
        # Its first turn, one sentence of 4 KiB, is also a prefetch query over 512 bytes:
        # refused at the embeddings route before the provider.
        embedded = len(provider.requests)
        await store.close_lease(access.scope_key, lease.id)
        await past_turns(store, access, 4)
        room = uuid.uuid4().hex
        await store.open_lease(access, 300, context_id=room)  # the fifth since the summary
        await session(["Alice says " + "tea " * 1000] * 5, room)
        assert lines("SUMMARY_INPUT_TOO_LARGE") == 1
        assert len(chat.summariser_requests()) == 1
        assert any("action=embeddings reason=FACT_TOO_LARGE" in line
                   for line in api_lines(caplog))
        assert len(provider.requests) == embedded
        assert await pool.fetchval(ROWS) == 2
        assert await pool.fetchval(SUMMARIZE_UNITS, access.scope_key) == 1
