"""The review of f3c355e against the real memory API server (N3, N4, N5, N7, N10): real
PostgreSQL, the real API server's TokenReview and Pods, kagent's controller and the embeddings
provider as recording stubs, every client on loopback. Requests the client libraries would not
send (CONNECT, ``*``, fragments) are written on a plain socket.

Load loops are bounded in count (``POOL`` + a few) and every wait in time.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import Any

import aiohttp
import asyncpg
import pytest
from aiohttp import web
from kubernetes import client

from fgentic_devenv import free_port
from fgentic_governance.api.kagent import ROUTED_LABEL, AgentRef, app_name
from fgentic_governance.memory import Access, MemoryStore
from fgentic_governance.memory.delegated import DelegatedStore
from fgentic_governance.memoryapi import proxy
from fgentic_governance.memoryapi.codes import ApiError, ApiReason
from fgentic_governance.memoryapi.http import make_handler
from fgentic_governance.memoryapi.service import MemoryApi
from fgentic_governance.memoryapi.workloads import KubeIdentity
from fgentic_governance.serving import http as serving
from tests.support.kagent import ChatStub, ControllerStub, EmbeddingStub
from tests.support.memory_api import (
    LOCAL,
    agent_token,
    ensure_service_account,
    headers,
    routed_pod,
)
from tests.support.polling import until_async
from tests.support.store import ALICE, CONTEXT, leased_turn, scope_record
from tests.support.stubs import LoopbackServer

pytestmark = pytest.mark.integration

AGENT = "helper"
POOL = 100
"""The upstream pool (``proxy.CONNECTIONS``; aiohttp's default bound before it was named)."""
SHARE = 16
"""One source address's share of it (``proxy.PER_CLIENT``)."""
LEDGER = "SELECT coalesce(sum(units), 0) FROM fgentic_memory.op_ledger WHERE scope_key = $1"


@dataclass
class Env:
    ns: str
    token: str
    store: MemoryStore
    pool: asyncpg.Pool
    api_pool: asyncpg.Pool
    kube: client.ApiClient
    controller: ControllerStub


@pytest.fixture
async def env(control_plane: Any, k8s_client: client.ApiClient, pool: asyncpg.Pool,
              delegate_pool: asyncpg.Pool, store: MemoryStore) -> AsyncIterator[Env]:
    ns = f"memhard-{uuid.uuid4().hex[:8]}"
    control_plane.ensure_namespace(ns)
    token = await agent_token(k8s_client, ns, AGENT)
    controller = ControllerStub()
    await controller.start()
    yield Env(ns, token, store, pool, delegate_pool, k8s_client, controller)
    await controller.stop()


@asynccontextmanager
async def served(env: Env, *, body_timeout: float = serving.BODY_TIMEOUT,
                 embeddings_url: str = "", model_url: str = "",
                 upstream_url: str = "") -> AsyncIterator[int]:
    """The memory API as ``memory-api`` serves it, on a loopback port (yielded)."""
    upstream = proxy.Upstreams()
    identity = KubeIdentity(env.kube)
    handler = make_handler(MemoryApi(DelegatedStore(env.api_pool), LOCAL), identity.agent_for,
                           upstream, upstream_url or env.controller.base_url,
                           body_timeout=body_timeout,
                           embeddings_url=embeddings_url, model_url=model_url,
                           identify_address=identity.agent_for_address)
    port = free_port()
    runner = await serving.serve(handler, "127.0.0.1", port)
    try:
        yield port
    finally:
        await runner.cleanup()
        await upstream.close()


async def scope(env: Env) -> Access:
    record = scope_record(f"{env.ns}/alice", agent_namespace=env.ns, agent_name=AGENT,
                          control_room="!alice-control:example.org")
    await env.store.ensure_scope(record)
    access = Access.for_scope(record, await env.store.grant(record.scope_key))
    await leased_turn(env.store, env.pool, access, 120)
    return access


async def exchange(port: int, head: str, *, body: bytes = b"", source: str = "127.0.0.1",
                   seconds: float = 5.0) -> tuple[int, Any]:
    """One request written as it is (``Connection: close``): the status and the JSON body."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))
    try:
        async with asyncio.timeout(seconds):
            writer.write(head.encode() + b"\r\nHost: memory-api\r\nConnection: close\r\n"
                         + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
            await writer.drain()
            answer = await reader.read()
    finally:
        writer.close()
    status_line, _, rest = answer.partition(b"\r\n")
    text = rest.partition(b"\r\n\r\n")[2]
    try:
        return int(status_line.split()[1]), json.loads(text)
    except ValueError:  # the controller stub's own 404 page, say
        return int(status_line.split()[1]), text


UPLOAD = (b"POST /api/sessions HTTP/1.1\r\nHost: memory-api\r\n"
          b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{")
"""A pass-through upload's head and one byte of its 1000-byte body."""
HANGING = b"GET /api/hang HTTP/1.1\r\nHost: memory-api\r\nConnection: close\r\n\r\n"
"""A pass-through request the controller answers only once released (:class:`Hanging`)."""


@asynccontextmanager
async def slow_uploads(port: int, sources: list[str], request: bytes = UPLOAD
                       ) -> AsyncIterator[list[asyncio.StreamReader]]:
    """One connection per source entry that sends ``request`` (by default a slow upload: one
    byte of its body), then nothing more; all are closed on exit."""
    async with AsyncExitStack() as stack:
        readers = []
        async with asyncio.timeout(30):
            for source in sources:
                reader, writer = await asyncio.open_connection("127.0.0.1", port,
                                                               local_addr=(source, 0))
                stack.callback(writer.close)
                writer.write(request)
                await writer.drain()
                readers.append(reader)
        await asyncio.sleep(1.0)  # every request reached the pass-through (loopback)
        yield readers


class Hanging(LoopbackServer):
    """A controller whose ``GET /api/hang`` answers only once ``release`` is set (at most
    30 s): what holds a pass-through connection when the controller itself is slow."""

    def __init__(self) -> None:
        super().__init__()
        self.release = asyncio.Event()

    def routes(self, app: web.Application) -> None:
        app.router.add_get("/api/hang", self._hang)

    async def _hang(self, _: web.Request) -> web.Response:
        async with asyncio.timeout(30):
            await self.release.wait()
        return web.json_response({})


@asynccontextmanager
async def hanging() -> AsyncIterator[Hanging]:
    controller = Hanging()
    await controller.start()
    try:
        yield controller
    finally:
        controller.release.set()
        await controller.stop()


async def readyz(port: int) -> tuple[int, Any]:
    return await exchange(port, "GET /readyz HTTP/1.1")


async def until_ready(port: int, status: int, seconds: float = 8.0) -> tuple[int, Any]:
    return await until_async(lambda: readyz(port), f"/readyz answering {status}", seconds,
                             interval=0.1, holds=lambda answer: answer[0] == status)


# -- N3: only origin-form targets, joined to the controller's URL --------------------------


async def test_connect_asterisk_and_absolute_targets_reach_no_server(env: Env) -> None:
    """``CONNECT x@HOST:PORT`` made the pass-through's URL ``http://controller:8083x@HOST:PORT``:
    the memory API connected to HOST:PORT with the client's headers and relayed the answer."""
    elsewhere = ControllerStub()
    await elsewhere.start()
    try:
        async with served(env) as port:
            elsewhere_at = f"127.0.0.1:{elsewhere.port}"
            heads = [f"CONNECT x@{elsewhere_at} HTTP/1.1\r\nX-Client: kept",
                     f"CONNECT {elsewhere_at} HTTP/1.1\r\nAuthorization: Bearer {env.token}",
                     f"GET http://{elsewhere_at}/api/sessions HTTP/1.1",
                     "OPTIONS * HTTP/1.1"]
            answers = [await exchange(port, head) for head in heads]
            # A legitimate path that spells an authority is still the controller's path.
            status, _ = await exchange(port, f"GET /x@{elsewhere_at}/api HTTP/1.1")
    finally:
        await elsewhere.stop()
    assert [(r.method, r.path) for r in elsewhere.requests] == []
    assert answers == [(400, {"error": "TARGET_REFUSED"})] * len(heads)
    assert status == 404
    assert [(r.method, r.path) for r in env.controller.requests] == [
        ("GET", f"/x@127.0.0.1:{elsewhere.port}/api")]


# -- N4: one reading of the path decides and is forwarded -----------------------------------


async def test_fragment_and_params_spellings_never_reach_the_controllers_memory_routes(
        env: Env) -> None:
    query = f"?agent_name={app_name(env.ns, AGENT)}&user_id={ALICE}"
    async with served(env) as port:
        for method in ("GET", "DELETE", "POST"):
            for path in ("/api/memories#x", f"/api/memories{query}#x", "/api/memories;x",
                         f"/api/memories;x{query}", "/api/memories/search;x",
                         "/api/memories/sessions/batch;x"):
                status, body = await exchange(port, f"{method} {path} HTTP/1.1", body=b"{}")
                assert 400 <= status < 500 and body["error"] in (
                    "TARGET_REFUSED", "PATH_REFUSED"), (method, path)
    assert env.controller.requests == []


# -- N5: components beyond float4 are refused before admission ------------------------------


async def test_vector_components_beyond_float4_are_refused_before_any_cost(env: Env) -> None:
    access = await scope(env)
    sent = headers(env.token, env.ns, AGENT, ALICE)
    agent = app_name(env.ns, AGENT)
    async with served(env) as port, aiohttp.ClientSession() as http:
        for huge in (1e39, 3.5e38, -3.5e38):
            vector = [0.01] * 767 + [huge]
            cases = [
                ("/api/memories/sessions", {"agent_name": agent, "user_id": ALICE,
                                            "content": "Alice likes tea.", "vector": vector}),
                ("/api/memories/sessions/batch", {"items": [{
                    "agent_name": agent, "user_id": ALICE, "content": "Alice likes tea.",
                    "vector": vector}]}),
                ("/api/memories/search", {"agent_name": agent, "user_id": ALICE,
                                          "vector": vector, "limit": 5, "min_score": 0.3}),
            ]
            for path, body in cases:
                async with http.post(f"http://127.0.0.1:{port}{path}", json=body,
                                     headers=sent) as response:
                    assert (response.status, await response.json()) == (
                        400, {"error": "REQUEST_MALFORMED"}), (path, huge)
    assert await env.pool.fetchval(LEDGER, access.scope_key) == 0  # nothing was spent
    assert await env.pool.fetchval("SELECT count(*) FROM fgentic_memory.memory") == 0


# -- N7: the embeddings caller's Agent is its Pod's service account's ----------------------


def pod_as(api: client.ApiClient, ns: str, name: str, *, account: str,
           labels: dict[str, str], address: str, phase: str = "Running") -> None:
    """A Pod at ``address`` under ``account`` with ``labels``, in ``phase`` (anyone allowed to
    create Pods chooses both; the API server holds what it was given)."""
    core = client.CoreV1Api(api)
    ensure_service_account(core, ns, account)
    core.create_namespaced_pod(ns, {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels},
        "spec": {"serviceAccountName": account, "automountServiceAccountToken": False,
                 "containers": [{"name": "kagent", "image": "kagent:0.9.11"}]}})
    core.patch_namespaced_pod_status(name, ns, {"status": {
        "phase": phase, "podIP": address, "podIPs": [{"ip": address}]}})


def address() -> str:
    """A loopback address no other test uses (the Pod IP the API server is told)."""
    return "127." + ".".join(str(uuid.uuid4().int % 250 + 1) for _ in range(3))


async def test_embeddings_are_charged_to_the_service_accounts_agent_never_the_labels(
        env: Env) -> None:
    """A Pod labelled as the Agent but running as another account (none, or another Agent's)
    spent a leased user's budget and got provider embeddings as that Agent."""
    await agent_token(env.kube, env.ns, "other-agent")
    labels = {"app": "kagent", "kagent": AGENT, ROUTED_LABEL: "true"}
    intruder, other, genuine = address(), address(), address()
    await asyncio.to_thread(pod_as, env.kube, env.ns, "intruder", account="intruder",
                            labels=labels, address=intruder)
    await asyncio.to_thread(pod_as, env.kube, env.ns, "mislabelled", account="other-agent",
                            labels=labels, address=other)
    await asyncio.to_thread(routed_pod, env.kube, env.ns, AGENT, genuine)
    alice = await scope(env)
    provider = EmbeddingStub()
    await provider.start()
    body = {"input": ["Alice likes tea."], "model": "m", "dimensions": 768}
    try:
        async with served(env, embeddings_url=provider.url + "/embeddings") as port:

            async def embed(source: str) -> tuple[int, Any]:
                connector = aiohttp.TCPConnector(local_addr=(source, 0))
                async with aiohttp.ClientSession(connector=connector) as pod, pod.post(
                        f"http://127.0.0.1:{port}/v1/embeddings", json=body,
                        headers={"Authorization": "Bearer provider-key"}) as response:
                    return response.status, await response.json()

            assert await embed(intruder) == (403, {"error": "AGENT_UNRESOLVED"})
            assert await embed(other) == (403, {"error": "AGENT_MISMATCH"})
            assert provider.requests == []
            assert await env.pool.fetchval(LEDGER, alice.scope_key) == 0
            # The Agent's own Pod is still served, for the user whose turn it runs.
            connector = aiohttp.TCPConnector(local_addr=(genuine, 0))
            async with aiohttp.ClientSession(connector=connector) as pod, pod.get(
                    f"http://127.0.0.1:{port}/api/sessions/ctx", params={"user_id": ALICE},
                    headers=headers(env.token, env.ns, AGENT, None)):
                pass
            status, _ = await embed(genuine)
            assert status == 200 and len(provider.requests) == 1
            assert await env.pool.fetchval(LEDGER, alice.scope_key) == 1
    finally:
        await provider.stop()


async def test_a_pod_that_is_no_longer_live_never_names_the_agent(env: Env) -> None:
    """R4-4: a Failed (evicted) or Succeeded routed Pod keeps its ``status.podIP``; the Pod
    later given that address was taken for the Agent (an embedding charged to its leased user).
    Only a Pending or Running Pod may name the Agent; with none the caller is no Agent."""
    await agent_token(env.kube, env.ns, "other-agent")
    routed = {"app": "kagent", "kagent": AGENT, ROUTED_LABEL: "true"}
    reused, alone, done, shared = address(), address(), address(), address()
    for name, at, phase in (("evicted", reused, "Failed"), ("failed", alone, "Failed"),
                            ("finished", done, "Succeeded"), ("old", shared, "Failed")):
        await asyncio.to_thread(pod_as, env.kube, env.ns, name, account=AGENT, labels=routed,
                                address=at, phase=phase)
    # The address's new owners: a Pod of no memory-enabled Agent, and another Agent's Pod.
    await asyncio.to_thread(pod_as, env.kube, env.ns, "newcomer", account="newcomer",
                            labels={"app": "other"}, address=reused)
    await asyncio.to_thread(pod_as, env.kube, env.ns, "other", account="other-agent",
                            labels={**routed, "kagent": "other-agent"}, address=shared,
                            phase="Pending")
    identity = KubeIdentity(env.kube)
    for source in (reused, alone, done):
        with pytest.raises(ApiError) as refused:
            await identity.agent_for_address(source)
        assert refused.value.code is ApiReason.AGENT_UNRESOLVED, source
    assert await identity.agent_for_address(shared) == AgentRef(env.ns, "other-agent")
    alice = await scope(env)
    # Alice's turn is being served (the Agent's live Pod named her at some replica).
    await DelegatedStore(env.api_pool).note_activity(env.ns, AGENT, [ALICE])
    provider = EmbeddingStub()
    await provider.start()
    try:
        async with served(env, embeddings_url=provider.url + "/embeddings") as port:
            connector = aiohttp.TCPConnector(local_addr=(reused, 0))
            async with aiohttp.ClientSession(connector=connector) as pod, pod.post(
                    f"http://127.0.0.1:{port}/v1/embeddings",
                    json={"input": ["Alice likes tea."], "model": "m"},
                    headers={"Authorization": "Bearer provider-key"}) as answer:
                assert (answer.status, await answer.json()) == (
                    403, {"error": "AGENT_UNRESOLVED"})
        assert provider.requests == []
        assert await env.pool.fetchval(LEDGER, alice.scope_key) == 0
    finally:
        await provider.stop()


ACTIVITY = "SELECT count(*) FROM fgentic_memory.agent_activity WHERE agent_namespace = $1"


async def test_only_the_agents_own_pod_names_whose_turn_it_serves(env: Env) -> None:
    """R4-9: 100 unauthenticated GETs naming 16 users each stored 1,600 attacker-chosen notes
    (sql/0019) and made the Agent's next embedding SCOPE_AMBIGUOUS. Only a caller holding the
    Agent's token, from the Agent's live routed Pod, names whose turn the Agent serves."""
    other_token = await agent_token(env.kube, env.ns, "other-agent")
    genuine, stranger = address(), address()
    await asyncio.to_thread(routed_pod, env.kube, env.ns, AGENT, genuine)
    alice = await scope(env)
    mine = headers(env.token, env.ns, AGENT, None)
    named = [("user_id", f"@user{n}:example.org") for n in range(15)]  # 16 with X-User-Id
    provider = EmbeddingStub()
    await provider.start()
    try:
        async with served(env, embeddings_url=provider.url + "/embeddings") as port:

            async def call(source: str, sent: dict[str, str], users: list[tuple[str, str]],
                           path: str = "/api/sessions/ctx") -> int:
                embedding = path == "/v1/embeddings"
                connector = aiohttp.TCPConnector(local_addr=(source, 0))
                async with aiohttp.ClientSession(connector=connector) as pod, pod.request(
                        "POST" if embedding else "GET", f"http://127.0.0.1:{port}{path}",
                        params=users, headers=sent,
                        json={"input": ["Alice likes tea."], "model": "m"} if embedding
                        else None) as answer:
                    return answer.status

            for sent, source in (({}, genuine),  # no token, from the Agent's Pod
                                 ({"Authorization": "Bearer forged"}, genuine),
                                 (headers(other_token, env.ns, "other-agent", None), genuine),
                                 (mine, stranger)):  # the Agent's token, not from its Pod
                for _ in range(5):
                    assert await call(source, {**sent, "X-User-Id": "@eve:example.org"},
                                      named) == 404  # the controller's answer, passed on
            assert await env.pool.fetchval(ACTIVITY, env.ns) == 0  # nothing stored
            await call(genuine, mine, [("user_id", ALICE)])  # the Agent's own turn
            embed = {"Authorization": "Bearer provider-key"}
            assert await call(genuine, embed, [], "/v1/embeddings") == 200  # Alice's alone
            assert await env.pool.fetchval(ACTIVITY, env.ns) == 1
            assert await env.pool.fetchval(LEDGER, alice.scope_key) == 1
    finally:
        await provider.stop()


# -- N10: one caller cannot starve every Agent ---------------------------------------------


async def test_one_client_holds_at_most_its_share_of_the_controllers_connections(
        env: Env) -> None:
    """110 requests from one address held all 100 upstream connections: every other Agent's
    sessions and tasks then failed 502 after the 5 s pool wait. Here the controller itself is
    slow (an upload no longer holds a connection at all)."""
    async with hanging() as controller, \
            served(env, upstream_url=controller.base_url) as port, \
            slow_uploads(port, ["127.0.0.2"] * (POOL + 10), HANGING) as held:
        connector = aiohttp.TCPConnector(local_addr=("127.0.0.3", 0))
        async with aiohttp.ClientSession(connector=connector) as other, asyncio.timeout(4), \
                other.get(f"http://127.0.0.1:{port}/api/sessions/missing") as response:
            assert response.status == 404  # the controller's answer, not ours
        answers = [asyncio.ensure_future(reader.read()) for reader in held]
        done, pending = await asyncio.wait(answers, timeout=3)
        for task in pending:
            task.cancel()
        refused = [t.result() for t in done if t.result().startswith(b"HTTP/1.1 429")]
        assert len(refused) == POOL + 10 - SHARE
        assert all(b'{"error": "CLIENT_BUSY"}' in answer for answer in refused)
    assert (proxy.CONNECTIONS, proxy.PER_CLIENT) == (POOL, SHARE)


async def test_a_pass_through_body_has_the_body_deadline(env: Env) -> None:
    async with served(env, body_timeout=1.0) as port, \
            slow_uploads(port, ["127.0.0.2"]) as [held]:
        async with asyncio.timeout(4):
            answer = await held.read()
        assert answer.startswith(b"HTTP/1.1 400")
        assert answer.endswith(b'{"error": "REQUEST_MALFORMED"}')
        assert await readyz(port) == (200, {"reason": "OK"})


async def test_readiness_turns_503_while_the_upstream_pool_is_exhausted(env: Env) -> None:
    """/readyz stayed 200 while no pass-through request could get an upstream connection
    (here: every one is waiting for the controller's answer)."""
    sources = [f"127.0.1.{n}" for n in range(1, -(-POOL // SHARE) + 1)]  # SHARE each
    async with hanging() as controller, \
            served(env, upstream_url=controller.base_url) as port:
        assert await readyz(port) == (200, {"reason": "OK"})
        async with slow_uploads(port, [s for s in sources for _ in range(SHARE)], HANGING):
            assert await until_ready(port, 503) == (503, {"reason": "UPSTREAM_BUSY"})
            controller.release.set()
            assert await until_ready(port, 200) == (200, {"reason": "OK"})  # answered


TURN = {"model": "m", "messages": [{"role": "system", "content": "You help."},
                                    {"role": "user", "content": "Hello."}],
        "tools": [{"type": "function", "function": {"name": "load_memory", "parameters": {}}}]}
"""An Agent's own chat turn on the governed model route (its system message, its tools)."""


async def test_slow_uploads_from_many_addresses_hold_nothing_the_others_need(
        env: Env) -> None:
    """§3: slow pass-through uploads from 7 addresses (7 x 16) held the one upstream pool:
    pass-through 502, /readyz 503 UPSTREAM_BUSY, and a routed Pod that held nothing was
    refused its chat completion, because the model route shared that pool. A body is now read
    whole before a connection is taken, and each route has its own connections."""
    pod = address()
    await asyncio.to_thread(routed_pod, env.kube, env.ns, AGENT, pod)
    await scope(env)  # Alice's turn, leased
    sources = [f"127.0.2.{n}" for n in range(1, -(-POOL // SHARE) + 2)]  # > POOL in all
    provider, chat = EmbeddingStub(), ChatStub()
    for stub in (provider, chat):
        await stub.start()
    mine = headers(env.token, env.ns, AGENT, ALICE)
    search = {"agent_name": app_name(env.ns, AGENT), "user_id": ALICE,
              "vector": [0.01] * 768, "limit": 5, "min_score": 0.3}
    try:
        async with served(env, body_timeout=60.0,  # the uploads stay for the whole test
                          embeddings_url=provider.url + "/embeddings",
                          model_url=chat.url + "/chat/completions") as port, \
                slow_uploads(port, [s for s in sources for _ in range(SHARE)]) as held, \
                aiohttp.ClientSession(connector=aiohttp.TCPConnector(
                    local_addr=(pod, 0))) as http:
            base = f"http://127.0.0.1:{port}"

            async def call(method: str, path: str, sent: dict[str, str],
                           body: Any = None) -> tuple[int, Any]:
                async with http.request(method, base + path, json=body,
                                        headers=sent) as answer:
                    return answer.status, await answer.read()

            # Another Pod's session calls (with and without a body), its memory call, its
            # turn's embedding and its chat completion are all answered.
            # (The session is the lease's context: a memory call is bound to it, sql/0021.)
            assert (await call("GET", f"/api/sessions/{CONTEXT}", mine))[0] == 404
            status, _ = await call("POST", "/api/sessions", mine,
                                   {"user_id": ALICE, "agent_ref": "x"})
            assert status == 201  # the controller's answer, passed back
            assert await call("POST", "/api/memories/search", mine, search) == (200, b"[]")
            provider_key = {"Authorization": "Bearer provider-key"}
            status, _ = await call("POST", "/v1/embeddings", provider_key,
                                   {"input": ["Alice likes tea."], "model": "m"})
            assert status == 200 and len(provider.requests) == 1
            status, _ = await call("POST", "/v1/chat/completions", provider_key, TURN)
            assert status == 200 and len(chat.requests) == 1
            # Readiness says what is true: nothing upstream is held by a slow client.
            assert await readyz(port) == (200, {"reason": "OK"})
            assert not any(reader.at_eof() for reader in held)  # every upload still open
    finally:
        for stub in (provider, chat):
            await stub.stop()


async def test_a_client_that_stops_reading_gives_its_connection_back(
        env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a write deadline a client that never reads a large answer held its upstream
    connection, and its share of the pool, for as long as it stayed connected."""
    monkeypatch.setattr(proxy, "WRITE_SECONDS", 1.0)
    size = 64 * 1024 * 1024

    async def big(_: web.Request) -> web.StreamResponse:
        answer = web.StreamResponse()
        answer.content_length = size
        await answer.prepare(_)
        for _chunk in range(size // (1024 * 1024)):
            await answer.write(b"x" * (1024 * 1024))
        return answer

    app = web.Application()
    app.router.add_get("/api/big", big)
    runner = web.AppRunner(app)
    await runner.setup()
    port_up = free_port()
    await web.TCPSite(runner, "127.0.0.1", port_up).start()
    try:
        async with served(env, upstream_url=f"http://127.0.0.1:{port_up}") as port:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"GET /api/big HTTP/1.1\r\nHost: memory-api\r\n\r\n")
            await writer.drain()
            await asyncio.sleep(3)  # not reading: the memory API's writes stall
            received = 0
            async with asyncio.timeout(15):  # then drain: the connection must have ended
                while chunk := await reader.read(1024 * 1024):
                    received += len(chunk)
            writer.close()
            assert received < size
            assert await readyz(port) == (200, {"reason": "OK"})
    finally:
        await runner.cleanup()
