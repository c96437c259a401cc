"""The memory API binds a lease's memory calls to its room's A2A context (issue 38 §1, §6).

Two replicas of the memory API over one store; the "Pod" is an HTTP client bound to the
address of a routed Pod of the Agent (in the real API server) sending the Agent's token, the
way kagent-adk 0.9.11 sends its session and task calls (``_session_service.py``,
``_task_store.py``) through one replica while its memory calls reach the other.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import asyncpg
import pytest
from kubernetes import client

from fgentic_governance.api.kagent import app_name
from fgentic_governance.memory import Access, MemoryStore
from tests.support.kagent import ControllerStub
from tests.support.memory_api import agent_token, headers, memory_api, routed_pod
from tests.support.store import ALICE, past_turns, scope_record
from tests.support.vectors import unit_vector

pytestmark = pytest.mark.integration

AGENT = "helper"
CONTROL = "0c0ffee0c0ffee0c0ffee0c0ffee0c0f"
TEAM = "7ea77ea77ea77ea77ea77ea77ea77ea7"
TOKENS = "SELECT count(*) FROM fgentic_memory.rate_bucket WHERE subject_mxid = $1"


@dataclass
class Pod:
    """The runtime of one routed Pod: pass-through calls to ``here``, memory calls to
    ``there`` (another replica)."""

    ns: str
    token: str
    http: aiohttp.ClientSession
    here: str
    there: str

    def sent(self, user: str = ALICE) -> dict[str, str]:
        return headers(self.token, self.ns, AGENT, user)

    async def passed(self, method: str, path: str, body: Any = None, *,
                     user: str = ALICE) -> int:
        """A session or task call as the runtime sends it (``?user_id=`` on session calls)."""
        query = {"user_id": user} if path.startswith("/api/sessions") else {}
        async with self.http.request(method, self.here + path, json=body, params=query,
                                     headers=self.sent(user)) as response:
            await response.read()
            return response.status

    async def task(self, context: str, state: str) -> int:
        return await self.passed("POST", "/api/tasks", {
            "id": uuid.uuid4().hex, "contextId": context, "kind": "task",
            "status": {"state": state}, "metadata": {"kagent_user_id": ALICE}})

    async def event(self, context: str, data: dict[str, Any]) -> int:
        """An appended ADK event, as a JSON string in the body (``append_event``)."""
        return await self.passed("POST", f"/api/sessions/{context}/events",
                                 {"id": uuid.uuid4().hex, "data": json.dumps(data)})

    async def memory(self, route: str, body: dict[str, Any]) -> tuple[int, Any]:
        async with self.http.post(self.there + "/api/memories/" + route, json=body,
                                  headers=self.sent()) as response:
            return response.status, await response.json()

    def item(self, text: str) -> dict[str, Any]:
        return {"agent_name": app_name(self.ns, AGENT), "user_id": ALICE, "content": text,
                "vector": unit_vector(text)}

    async def calls(self) -> dict[str, tuple[int, Any]]:
        """A search, a save_memory save and an automatic save, as the runtime sends them."""
        search = {"agent_name": app_name(self.ns, AGENT), "user_id": ALICE,
                  "vector": unit_vector("tea"), "limit": 5, "min_score": -1.0}
        return {"search": await self.memory("search", search),
                "save": await self.memory("sessions", self.item("Alice likes tea.")),
                "batch": await self.memory("sessions/batch",
                                           {"items": [self.item("Alice cycles.")]})}


@pytest.fixture
async def pod(control_plane: Any, k8s_client: client.ApiClient, delegate_pool: asyncpg.Pool,
              store: MemoryStore) -> AsyncIterator[Pod]:
    ns = f"memctx-{uuid.uuid4().hex[:8]}"
    control_plane.ensure_namespace(ns)
    token = await agent_token(k8s_client, ns, AGENT)
    address = f"127.0.{uuid.uuid4().int % 250 + 1}.{uuid.uuid4().int % 250 + 1}"
    await asyncio.to_thread(routed_pod, k8s_client, ns, AGENT, address)
    record = scope_record(f"{ns}/alice", agent_namespace=ns, agent_name=AGENT)
    await store.ensure_scope(record)
    access = Access.for_scope(record, await store.grant(record.scope_key))
    await past_turns(store, access, 4)  # the fifth turn may save automatically
    await store.open_lease(access, 120, context_id=CONTROL)  # the control room's turn
    controller = ControllerStub()
    await controller.start()
    try:
        async with memory_api(delegate_pool, k8s_client, controller.base_url) as here, \
                memory_api(delegate_pool, k8s_client, controller.base_url) as there, \
                aiohttp.ClientSession(connector=aiohttp.TCPConnector(
                    local_addr=(address, 0))) as http:
            yield Pod(ns, token, http, here, there)
    finally:
        await controller.stop()


def codes(calls: dict[str, tuple[int, Any]]) -> dict[str, Any]:
    return {name: body.get("error") if isinstance(body, dict) and status >= 400 else status
            for name, (status, body) in calls.items()}


async def test_another_context_of_the_pair_in_progress_refuses_every_memory_call(
        pod: Pod) -> None:
    admitted = {"search": 200, "save": 201, "batch": 201}
    # Nothing of the lease's context seen yet: nothing is bound to it.
    assert codes(await pod.calls()) == dict.fromkeys(admitted, "CONTEXT_CONFLICT")
    # The control room's turn starts (seen by the other replica than the memory calls).
    await pod.task(CONTROL, "submitted")
    assert await pod.passed("POST", "/api/sessions", {
        "user_id": ALICE, "agent_ref": app_name(pod.ns, AGENT), "id": CONTROL}) == 201
    assert codes(await pod.calls()) == admitted
    # Alice's turn with the same Agent in a team room: no memory for either room.
    assert await pod.passed("GET", f"/api/sessions/{TEAM}") == 404
    assert codes(await pod.calls()) == dict.fromkeys(admitted, "CONTEXT_CONFLICT")
    await pod.passed("POST", "/api/sessions", {"user_id": ALICE, "id": TEAM})
    await pod.event(TEAM, {"author": "user", "content": {"parts": [{"text": "hi"}]}})
    # The team room's turn ends (its first user event: no automatic save follows), and the
    # control room's is alone again.
    await pod.task(TEAM, "completed")
    assert codes(await pod.calls()) == {  # bound again; this turn's one summary was taken
        **admitted, "batch": "SUMMARY_CADENCE_REACHED"}


async def test_a_search_during_load_memory_is_explicit(pod: Pod, pool: asyncpg.Pool) -> None:
    """§42's explicit bucket applies to the tool's searches, not to prefetch's."""
    await pod.passed("POST", "/api/sessions", {"user_id": ALICE, "id": CONTROL})
    await pod.event(CONTROL, {"author": "user", "content": {"parts": [{"text": "hi"}]}})
    search = {"agent_name": app_name(pod.ns, AGENT), "user_id": ALICE,
              "vector": unit_vector("tea"), "limit": 5, "min_score": 0.3}
    assert (await pod.memory("search", search))[0] == 200  # prefetch
    assert await pool.fetchval(TOKENS, ALICE) == 0
    call = {"id": "adk-" + uuid.uuid4().hex, "name": "load_memory", "args": {"query": "tea"}}
    await pod.event(CONTROL, {"author": AGENT, "content": {"parts": [{"function_call": call}]}})
    assert (await pod.memory("search", search))[0] == 200
    assert await pool.fetchval(TOKENS, ALICE) == 1
    assert await pool.fetchval(
        "SELECT tool_calls FROM fgentic_memory.agent_context WHERE context_id = $1",
        CONTROL) == [call["id"]]  # an id, never the query


async def test_only_the_agents_routed_pod_is_heard_and_a_failed_note_is_not_relayed(
        pod: Pod, k8s_client: client.ApiClient) -> None:
    await pod.passed("POST", "/api/sessions", {"user_id": ALICE, "id": CONTROL})
    # Someone else naming another context of Alice's is not heard.
    async with aiohttp.ClientSession() as stranger, stranger.get(
            pod.here + f"/api/sessions/{TEAM}", params={"user_id": ALICE},
            headers=pod.sent()) as response:
        assert response.status == 404  # relayed: not our call to refuse
    assert (await pod.calls())["search"][0] == 200
    # A context note the store refuses (a user id it cannot keep): the call is not passed
    # on, so the runtime's turn fails rather than its memory calls going unbound.
    assert await pod.passed("GET", f"/api/sessions/{TEAM}", user="@" + "x" * 300) == 400
