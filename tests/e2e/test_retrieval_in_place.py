"""Retrieval in place: the projector's X-Fgentic-Identity crosses the real kagent runtime to the
real retrieval server (ADR 0017 §1, §5, §13; issue 25).

One bridge request enters the real agentgateway v1.3.1 on the rendered local A2A route. The
real projector sets the carrier, and the route delivers it, on A2A 0.3, to the Agent's own
endpoint (status.deviations). That endpoint is the unmodified kagent-adk 0.9.11 runtime (and,
for the tests marked ``kagent_runtimes``, 0.10.4 in a stack of its own; issue 38 §5), whose
scripted model calls the retrieval tool. The runtime's MCP client propagates exactly
`X-Fgentic-Identity` through `allowed_headers` to the rendered MCP route. The route hands it to
`fgentic-governance retrieval-server`, which answers from the prefilter over a real
PostgreSQL + pgvector corpus.

A recording hop between the gateway and the server (`HeaderTap`) shows what reached the MCP
endpoint. The stubs stand for what is outside the system: the model, the embeddings
provider, and kagent's session and task store.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiohttp import ClientSession

from fgentic_devenv import free_port
from fgentic_devenv.postgres import LocalPostgres
from fgentic_governance import contract
from fgentic_governance.api.retrieval import A2aWire
from fgentic_governance.contract import limits as contract_limits
from fgentic_governance.retrieval import vocabulary as n
from tests.support.gateway import (
    AGENT_MCP_KEY,
    BRIDGE_KEY,
    Stack,
    gateway_stack,
    send_message_body,
    task_body,
)
from tests.support.kagent import (
    CallTool,
    ChatStub,
    ControllerStub,
    RunningAgent,
    reply_text,
    retrieval_agent_config,
    runtime_versions,
    start_agent,
)
from tests.support.polling import until_async
from tests.support.projector import AGENT, ALICE, ceiling_room_context, room_context
from tests.support.retrieval_server import (
    TOOL,
    Chunk,
    HeaderTap,
    RunningServer,
    reingest,
    served_corpus,
)

pytestmark = pytest.mark.e2e
both_runtimes = pytest.mark.kagent_runtimes


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    runtime_versions(metafunc)


ALICE_KEY = {"kind": "matrix", "principal": ALICE}
CAROL_KEY = {"kind": "matrix", "principal": "@carol:org-a.example"}
GROUNDED = "the retention policy keeps chat logs for thirty days"
BOB_ONLY = "the partner contract renews every spring"
PARTNER_DOC = "the onboarding guide for partners has three steps"
CORPUS = [
    Chunk(1, GROUNDED, "docs/retention.md",
          {"classification": "public", "allowed_principals": [ALICE_KEY]}),
    Chunk(2, BOB_ONLY, "docs/partner.md",
          {"classification": "public",
           "allowed_principals": [{"kind": "matrix", "principal": "@bob:org-a.example"}]}),
    Chunk(3, PARTNER_DOC, "docs/onboarding.md",  # the example binding's org-b partner group
          {"classification": "public", "allowed_groups": ["partner/org-b/docs"]}),
]
# The public route's timeout here: a partner token then needs only 1 + 30 s (clock skew) + a
# margin of lifetime, so a projection can expire within a test's patience.
PUBLIC_TIMEOUT = 1
ALLOWED = frozenset({"x-fgentic-identity"})  # the Agent tool's allowedHeaders


@dataclass
class InPlace:
    gateway: Stack
    server: RunningServer
    tap: HeaderTap
    agent: RunningAgent
    chat: ChatStub
    controller: ControllerStub
    dsn: str
    """The corpus database the server reads (an operator's re-ingestion writes here)."""


@pytest.fixture(scope="module")
async def in_place(postgres: LocalPostgres, tmp_path_factory: pytest.TempPathFactory,
                   kagent_version: str) -> AsyncIterator[InPlace]:
    work = tmp_path_factory.mktemp("in-place")
    chat, controller = ChatStub(), ControllerStub()
    for stub in (chat, controller):
        await stub.start()
    agent_port = free_port()
    try:
        async with served_corpus(postgres, work, CORPUS,
                                 agent=f"{AGENT.namespace}/{AGENT.name}") as served, \
                gateway_stack(work, wire=A2aWire.V0_3, kagent=f"127.0.0.1:{agent_port}",
                              retrieval=served.tap.address,
                              public_timeout=PUBLIC_TIMEOUT) as gateway:
            config = retrieval_agent_config(chat.url, gateway.mcp_url, api_key=AGENT_MCP_KEY,
                                            tool=TOOL)
            agent = await start_agent(work / "runtime", kagent_url=controller.base_url,
                                      chat=chat, embeddings=None, config=config,
                                      namespace=AGENT.namespace, agent=AGENT.name,
                                      port=agent_port, version=kagent_version)
            try:
                yield InPlace(gateway, served.server, served.tap, agent, chat, controller,
                              served.dsn)
            finally:
                agent.stop()
    finally:
        for stub in (controller, chat):
            await stub.stop()


async def bridge_turn(place: InPlace, text: str, *,
                      context: contract.RoomContext | None = None) -> tuple[int, dict[str, Any]]:
    """One bridge request on the local route (A2A 0.3 message/send, a fresh context), from
    the room context's caller."""
    context = context or room_context()
    encoded = contract.encode_room_context(context)
    headers = [("authorization", f"Bearer {BRIDGE_KEY}"),
               ("x-user-id", context.caller.principal), ("x-fgentic-room-context", encoded)]
    body = send_message_body(A2aWire.V0_3, text)
    async with ClientSession() as http, \
            http.post(place.gateway.local_url, json=body, headers=headers,
                      timeout=90) as answer:
        text = await answer.text()
    try:
        return answer.status, json.loads(text)
    except ValueError:  # a refusal before the runtime is the projector's plain code
        return answer.status, {"text": text}


def tool_results(chat: ChatStub, since: int) -> list[str]:
    """The tool results the runtime handed the model after request ``since``."""
    found = []
    for request in chat.requests[since:]:
        for message in request.json().get("messages", []):
            if message.get("role") == "tool":
                found.append(json.dumps(message.get("content")))
    return found


def stored_identities(controller: ControllerStub) -> list[str]:
    """X-Fgentic-Identity as kagent's runtime stored it with its session events."""
    values = []
    for events in controller.events.values():
        for event in events:  # {"id", "data": the ADK Event as JSON text}
            data = json.loads(event.get("data") or "{}")
            headers = ((data.get("actions") or {}).get("state_delta") or {}).get("headers")
            if isinstance(headers, dict) and "x-fgentic-identity" in headers:
                values.append(headers["x-fgentic-identity"])
    return values


@both_runtimes
async def test_the_projectors_value_arrives_exactly_once_at_the_mcp_endpoint(
    in_place: InPlace,
) -> None:
    tapped, chats = len(in_place.tap.requests), len(in_place.chat.requests)
    in_place.chat.script(CallTool(TOOL, {"query": GROUNDED}, then="Thirty days."))
    status, reply = await bridge_turn(in_place, "How long are chat logs kept?")
    assert status == 200, reply
    assert reply_text(reply["result"]) == "Thirty days."

    calls = in_place.tap.mcp_requests(tapped)
    methods = [method for method, _ in calls]
    assert "initialize" in methods and "tools/call" in methods, methods
    values = {r.header("x-fgentic-identity") for _, r in calls}
    assert len(values) == 1
    [value] = values
    for _, recorded in calls:
        names = [name for name, _ in recorded.headers]
        assert names.count("x-fgentic-identity") == 1  # exactly one carrier, every request
        # Neither the user's id, a cookie, a credential nor any other reserved name.
        assert not {"x-user-id", "cookie", "authorization", "proxy-authorization"} & set(names)
        assert {h for h in names if h.startswith(n.RESERVED_PREFIX)} == ALLOWED

    # The value is the projector's canonical stamp of the bridge's room context for this
    # Agent, byte for byte, as the runtime received it from the gateway.
    identity = contract.decode_identity([value], now=int(time.time()), agent=AGENT)
    assert isinstance(identity, contract.MatrixProjection)
    expected = contract.stamp_matrix(room_context(), agent=AGENT, iat=identity.iat)
    assert value == contract.encode_identity(expected)
    assert value in stored_identities(in_place.controller)

    # The server answered from the prefilter: Alice's chunk, never Bob's.
    [result] = tool_results(in_place.chat, chats)
    assert GROUNDED in result and BOB_ONLY not in result
    assert "docs/retention.md" in result


@both_runtimes
async def test_kagent_stores_the_projection_with_its_session(in_place: InPlace) -> None:
    """The data inventory of docs/retrieval-rendering.md: kagent-adk 0.9.11 appends every
    inbound header to the session (state_delta), and posts it to kagent's session store."""
    in_place.chat.script(CallTool(TOOL, {"query": GROUNDED}, then="Noted."))
    status, _ = await bridge_turn(in_place, "Anything on retention?")
    assert status == 200
    stored = stored_identities(in_place.controller)
    assert stored
    for value in stored:  # each one a projection for this Agent, nothing else
        assert contract.load_identity(contract.codec.header_bytes([value])).agent == AGENT


@both_runtimes
async def test_a_changed_audience_gets_a_fresh_context_without_earlier_content(
    in_place: InPlace,
) -> None:
    """A later delegation whose audience no longer matches the chunk's ACL (Carol joined the
    room) starts a fresh context: the runtime's model sees none of the earlier grounded
    content, and the prefilter returns nothing."""
    in_place.chat.script(CallTool(TOOL, {"query": GROUNDED}, then="Grounded."))
    status, _ = await bridge_turn(in_place, "First question about retention.")
    assert status == 200
    chats = len(in_place.chat.requests)
    wider = room_context(audience=[ALICE_KEY, CAROL_KEY])
    in_place.chat.script(CallTool(TOOL, {"query": GROUNDED}, then="Nothing found."))
    status, reply = await bridge_turn(in_place, "Second question about retention.",
                                      context=wider)
    assert status == 200, reply
    later = [json.dumps(r.json()) for r in in_place.chat.requests[chats:]]
    assert later and not any(GROUNDED in text and "First question" in text for text in later)
    [result] = tool_results(in_place.chat, chats)
    assert GROUNDED not in result
    assert '\\"chunks\\": []' in result or '\\"chunks\\":[]' in result


@both_runtimes
async def test_a_forged_carrier_from_the_bridge_is_replaced_before_the_runtime(
    in_place: InPlace,
) -> None:
    """A bridge request that brings its own X-Fgentic-Identity gets the projector's value
    instead: the forged one reaches neither the runtime's session nor the MCP endpoint."""
    forged = contract.encode_identity(contract.stamp_matrix(
        room_context(audience=[ALICE_KEY, CAROL_KEY]), agent=AGENT, iat=int(time.time())))
    tapped, stored = len(in_place.tap.requests), len(stored_identities(in_place.controller))
    in_place.chat.script(CallTool(TOOL, {"query": GROUNDED}, then="Replaced."))
    encoded = contract.encode_room_context(room_context())
    headers = [("authorization", f"Bearer {BRIDGE_KEY}"), ("x-user-id", ALICE),
               ("x-fgentic-room-context", encoded), ("x-fgentic-identity", forged)]
    async with ClientSession() as http, \
            http.post(in_place.gateway.local_url, json=send_message_body(A2aWire.V0_3),
                      headers=headers, timeout=90) as answer:
        assert answer.status == 200
    arrived = [r.header("x-fgentic-identity") for _, r in in_place.tap.mcp_requests(tapped)]
    assert arrived and forged not in arrived
    assert forged not in stored_identities(in_place.controller)[stored:]
    expected_audience = [ALICE_KEY]
    for value in set(arrived):
        identity = contract.load_identity(contract.codec.header_bytes([value]))
        assert [a.model_dump() for a in identity.audience] == expected_audience  # type: ignore[union-attr]


@both_runtimes
async def test_a_ceiling_sized_projection_crosses_both_hops_and_kagent_intact(
    in_place: InPlace,
) -> None:
    """The exact header boundary across both pinned hops (ADR 0017 §5): a room context whose
    projection is exactly 8,192 bytes crosses the A2A hop, the runtime and the MCP hop intact,
    and the server decodes it (its audience names no chunk's readers: no chunks). One byte
    more is refused where the projection is made: the bridge's request gets no answer."""
    context = ceiling_room_context()
    tapped = len(in_place.tap.requests)
    in_place.chat.script(CallTool(TOOL, {"query": GROUNDED}, then="At the ceiling."))
    status, reply = await bridge_turn(in_place, "Ceiling question.", context=context)
    assert status == 200, reply
    arrived = {r.header("x-fgentic-identity") for _, r in in_place.tap.mcp_requests(tapped)}
    assert len(arrived) == 1
    [value] = arrived
    assert len(value.encode()) == 8192
    identity = contract.decode_identity([value], now=int(time.time()), agent=AGENT)
    assert value == contract.encode_identity(
        contract.stamp_matrix(context, agent=AGENT, iat=identity.iat))
    assert value in stored_identities(in_place.controller)
    over = ceiling_room_context(extra=1)
    tapped = len(in_place.tap.requests)
    status, reply = await bridge_turn(in_place, "Over the ceiling.", context=over)
    assert (status, reply) == (403, {"text": "PROJECTION_FAILED/DECODED_TOO_LARGE\n"})
    assert in_place.tap.requests[tapped:] == []


async def test_a_projection_that_expires_mid_session_fails_the_next_call(
    in_place: InPlace,
) -> None:
    """ADR 0017: every retrieval call after expiry fails, whatever the session. A partner's
    request is projected for as long as its token lives (here 34 s). The gateway answers the
    partner when its route times out, but the runtime goes on with the task. Its slow model
    calls the tool once in time, then again after the projection expired. The runtime's MCP
    session sends the same carrier both times: the first call is answered from the prefilter,
    the second is refused (EXPIRED) and hands the model nothing."""
    lifetime = PUBLIC_TIMEOUT + contract_limits.CLOCK_SKEW_SECONDS + 3
    token = in_place.gateway.issuer.token(lifetime=lifetime)
    expires = int(time.time()) + lifetime  # the token's exp, and so the projection's

    async def until_expired() -> None:
        await asyncio.sleep(max(0.0, expires + 1 - time.time()))

    query = {"query": PARTNER_DOC}
    late = CallTool(TOOL, query, then="Second answer.", after=until_expired)
    in_place.chat.script(CallTool(TOOL, query, then=late))
    answered = len(in_place.tap.answers)
    headers = [("authorization", f"Bearer {token}")]
    async with ClientSession() as http, \
            http.post(in_place.gateway.public_url, json=send_message_body(A2aWire.V0_3),
                      headers=headers, ssl=in_place.gateway.ssl_context(),
                      timeout=30) as answer:
        assert answer.status == 504  # the route's timeout; the runtime's task goes on
    await until_async(lambda: tool_results(in_place.chat, len(in_place.chat.requests) - 1),
                      "both tool results in the model's last request",
                      max(0.0, expires + 30 - time.time()), interval=0.5,
                      holds=lambda results: len(results) >= 2)
    # The model's last request holds the whole turn: both tool results, in order.
    first, second = tool_results(in_place.chat, len(in_place.chat.requests) - 1)
    assert PARTNER_DOC in first and "docs/onboarding.md" in first
    assert PARTNER_DOC not in second

    # The MCP route is stateless: the gateway opens an upstream session for each call, and
    # the late call's is refused at its first request (initialize), before any tools/call.
    answers = in_place.tap.answers[answered:]
    assert [s for method, s, _ in answers if method == "tools/call"] == [200], answers
    refused = [body for _, status, body in answers if status not in {200, 202}]
    assert refused, answers
    assert all(b"EXPIRED" in body and PARTNER_DOC.encode() not in body for body in refused)


# -- drift between two delegations (ADR 0017 Consequences 5, issue 38 §4) ---------------------

# Each drift chunk's text holds a sentinel; the model's query names neither, so the query itself
# never carries one (with k=5, the prefilter returns every chunk the projection may read).
DRIFT_QUERY = "what happens at the weekly review?"
ACL_SENTINEL = "drift-acl-5c1e"
CLASS_SENTINEL = "drift-class-9a47"
APPROVED = ("approved_non_public", "public")


def drift_row(chunk_id: int, sentinel: str, *, classification: str = "public",
              readers: tuple[dict[str, str], ...] = (ALICE_KEY,)) -> dict[str, Any]:
    """One chunk of the ingestion contract, as an operator's ``corpus load`` line."""
    return {"id": chunk_id, "text": f"{sentinel}: the weekly review meets on fridays",
            "source": f"docs/{sentinel}.md", "classification": classification,
            "allowed_principals": list(readers)}


@dataclass
class Delegation:
    """Every form one bridge delegation's grounded content could take: the reply, what the
    runtime handed the model (the whole conversation of the turn), the tool results and the
    MCP answers the server sent."""

    status: int
    reply: dict[str, Any]
    tool_results: list[str]
    model_inputs: list[str]
    mcp_answers: list[bytes]

    @property
    def context_id(self) -> str:
        return str(self.reply["result"]["contextId"])

    def forms(self) -> list[str]:
        return [json.dumps(self.reply), *self.tool_results, *self.model_inputs,
                *(body.decode(errors="replace") for body in self.mcp_answers)]


async def delegation(place: InPlace, question: str, *, context: contract.RoomContext,
                     then: str) -> Delegation:
    """One bridge delegation whose model calls the tool once with ``DRIFT_QUERY``."""
    chats, answered = len(place.chat.requests), len(place.tap.answers)
    place.chat.script(CallTool(TOOL, {"query": DRIFT_QUERY}, then=then))
    status, reply = await bridge_turn(place, question, context=context)
    assert status == 200, reply
    return Delegation(status, reply, tool_results(place.chat, chats),
                      [json.dumps(r.json()) for r in place.chat.requests[chats:]],
                      [body for _, _, body in place.tap.answers[answered:]])


def assert_grounded(first: Delegation, sentinel: str) -> None:
    [result] = first.tool_results
    assert sentinel in result
    assert any(sentinel.encode() in body for body in first.mcp_answers)
    assert sentinel in reply_text(first.reply["result"])


def assert_not_grounded(second: Delegation, first: Delegation, sentinel: str) -> None:
    """The later delegation has a fresh context and none of the earlier grounded content in
    any form; its one tool call was still answered from the prefilter (Alice's other chunk),
    so the absence is the prefilter's decision, not a failed call."""
    assert second.context_id != first.context_id
    [result] = second.tool_results
    assert GROUNDED in result
    leaked = [form for form in second.forms() if sentinel in form]
    assert not leaked, f"{len(leaked)} forms carry the earlier grounded content"


@both_runtimes
async def test_an_acl_revoked_between_two_delegations_leaves_none_of_the_first(
    in_place: InPlace,
) -> None:
    """ACL drift: the operator re-ingests a chunk without Alice between two of her
    delegations. The first is grounded in it; the second (the same room, the same question,
    the same runtime, server and MCP pool) carries none of it."""
    await reingest(in_place.dsn, [drift_row(10, ACL_SENTINEL)])
    first = await delegation(in_place, "When is the review?", context=room_context(),
                             then=f"From the docs: {ACL_SENTINEL}.")
    assert_grounded(first, ACL_SENTINEL)
    bob = {"kind": "matrix", "principal": "@bob:org-a.example"}
    await reingest(in_place.dsn, [drift_row(10, ACL_SENTINEL, readers=(bob,))])
    second = await delegation(in_place, "When is the review?", context=room_context(),
                              then="Nothing on that.")
    assert_not_grounded(second, first, ACL_SENTINEL)


@both_runtimes
async def test_classifications_lowered_between_two_delegations_leave_none_of_the_first(
    in_place: InPlace,
) -> None:
    """Classification drift: the room's allowed classifications (the bridge's room registry,
    in its room context; the binding's ceiling admits approved_non_public) are lowered to
    public between two delegations. The first is grounded in an approved_non_public chunk;
    the second carries none of it."""
    await reingest(in_place.dsn, [drift_row(11, CLASS_SENTINEL,
                                            classification="approved_non_public")])
    first = await delegation(in_place, "When is the review?",
                             context=room_context(classes=APPROVED),
                             then=f"From the docs: {CLASS_SENTINEL}.")
    assert_grounded(first, CLASS_SENTINEL)
    second = await delegation(in_place, "When is the review?", context=room_context(),
                              then="Nothing on that.")
    assert_not_grounded(second, first, CLASS_SENTINEL)


# -- two clients, one context (ADR 0017 §11, §12, Consequences 5) ----------------------------


async def post(place: InPlace, route: str, body: dict[str, Any],
               headers: list[tuple[str, str]]) -> tuple[int, str]:
    """One request to the gateway's ``route`` ("local" or "public"): (status, body text)."""
    url = place.gateway.local_url if route == "local" else place.gateway.public_url
    ssl = place.gateway.ssl_context() if route == "public" else None
    async with ClientSession() as http, \
            http.post(url, json=body, headers=headers, ssl=ssl, timeout=30) as answer:
        return answer.status, await answer.text()


def untouched(place: InPlace, seen: tuple[int, int, int], task_id: str) -> None:
    """Since ``seen`` (model, MCP and controller request counts) nothing reached the runtime:
    its model and the MCP endpoint got no request, and kagent's store was not asked for the
    task (the runtime reads a task before it answers a poll or cancels it; a send's own
    trailing saves never name one by path)."""
    chats, tapped, stored = seen
    assert (len(place.chat.requests), len(place.tap.requests)) == (chats, tapped)
    assert not [r.method for r in place.controller.requests[stored:]
                if r.path == f"/api/tasks/{task_id}"]


def bridge_headers(context: contract.RoomContext | None = None) -> list[tuple[str, str]]:
    context = context or room_context()
    return [("authorization", f"Bearer {BRIDGE_KEY}"), ("x-user-id", context.caller.principal),
            ("x-fgentic-room-context", contract.encode_room_context(context))]


async def test_a_partner_cannot_attempt_the_bridges_context(in_place: InPlace) -> None:
    """The bridge's delegation gets a server-generated context and task. A partner naming
    that context, or reading or cancelling that task, and the bridge naming it again (another
    room's delegation) are refused at the gateway: none reaches the runtime or the server."""
    first = await delegation(in_place, "When is the review?", context=room_context(),
                             then="Bridge answer.")
    task_id, context_id = first.reply["result"]["id"], first.context_id
    wire = A2aWire.V0_3
    partner = [("authorization", f"Bearer {in_place.gateway.issuer.token()}")]
    seen = (len(in_place.chat.requests), len(in_place.tap.requests),
            len(in_place.controller.requests))
    attempts = [
        ("public", send_message_body(wire, "Partner question.", contextId=context_id), partner),
        ("public", send_message_body(wire, "Partner question.", taskId=task_id), partner),
        ("public", task_body(wire, "get", "partner-get", task_id), partner),
        ("public", task_body(wire, "cancel", "partner-cancel", task_id), partner),
        ("local", send_message_body(wire, "Another room.", contextId=context_id),
         bridge_headers(room_context(audience=[ALICE_KEY, CAROL_KEY]))),
    ]
    for route, body, headers in attempts:
        status, _ = await post(in_place, route, body, headers)
        assert status == 403, (route, body["method"])
    untouched(in_place, seen, task_id)


async def test_the_bridge_cannot_read_or_cancel_a_partners_task(in_place: InPlace) -> None:
    """A partner's delegation runs in its own server-generated context and task, grounded in
    its group's chunk, which no Matrix projection may read; kagent's task store keeps the
    tool's result with the task and hands it to whoever names the task's id. The bridge
    naming it (a poll or a cancel on the local route) is refused by the projector with a
    bounded code, and nothing reaches the runtime."""
    wire = A2aWire.V0_3
    tasks = set(in_place.controller.tasks)
    in_place.chat.script(CallTool(TOOL, {"query": PARTNER_DOC}, then="Partner answer."))
    partner = [("authorization", f"Bearer {in_place.gateway.issuer.token()}")]
    # The partner's answer (or the public route's 1 s timeout) ends its request; the runtime
    # ends the task either way, and kagent's store keeps it.
    await post(in_place, "public", send_message_body(wire, "Onboarding?"), partner)

    def partner_task() -> dict[str, Any] | None:
        done = [in_place.controller.tasks[t] for t in set(in_place.controller.tasks) - tasks]
        return next((t for t in done if t["status"]["state"] == "completed"), None)

    await until_async(lambda: partner_task() is not None, what="the partner's task ends",
                      timeout=60)
    task = partner_task()
    assert task is not None and PARTNER_DOC in json.dumps(task)  # what a poll would hand out
    seen = (len(in_place.chat.requests), len(in_place.tap.requests),
            len(in_place.controller.requests))
    bridge = [("authorization", f"Bearer {BRIDGE_KEY}")]
    for operation in ("get", "cancel"):
        body = task_body(wire, operation, f"bridge-{operation}", task["id"])
        for headers in (bridge, bridge_headers()):
            status, text = await post(in_place, "local", body, headers)
            assert (status, text) == (403, "A2A_METHOD_MISMATCH\n"), operation
    untouched(in_place, seen, task["id"])
    assert in_place.controller.tasks[task["id"]]["status"]["state"] == "completed"


@both_runtimes
def test_the_runtime_log_holds_no_projection(in_place: InPlace) -> None:
    value_prefix = "eyJ"  # every carrier is base64url JSON, beginning '{"'
    log = Path(in_place.agent.log).read_text(errors="replace")
    assert value_prefix not in log
