"""The bridge's local A2A route through the real agentgateway v1.3.1 (ADR 0017 §4, §7-§9, §11).

The gateway runs the renderer's standalone config for the example RetrievalBinding in front of
the real projector process and an echo backend standing in for kagent.
"""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp import ClientSession

from fgentic_governance import contract
from fgentic_governance.retrieval import vocabulary as n
from tests.support.gateway import (
    AGENT_MCP_KEY,
    BACKEND_HEADERS,
    BRIDGE_KEY,
    Received,
    Stack,
    send_message_body,
    task_body,
    version_headers,
)
from tests.support.projector import AGENT, ALICE, SLACK_BOB, room_context

pytestmark = pytest.mark.e2e



CONTEXT = contract.encode_room_context(room_context())


def bridge_headers(*, user: str = ALICE, context: str = CONTEXT,
                   key: str | None = BRIDGE_KEY) -> list[tuple[str, str]]:
    """The bridge's headers without A2A-Version, which ``send`` adds for the stack's wire."""
    headers = [("x-user-id", user), ("x-fgentic-room-context", context)]
    return ([("authorization", f"Bearer {key}")] if key is not None else []) + headers


async def send(stack: Stack, session: ClientSession, headers: list[tuple[str, str]],
               body: dict[str, Any] | None = None) -> tuple[int, str, Received | None]:
    body = body or send_message_body(stack.wire)
    headers = [*version_headers(stack.wire), *headers]
    async with session.post(stack.local_url, json=body, headers=headers) as response:
        text = await response.text()
    return response.status, text, stack.backend.received.get(body["id"])


def assert_canonical_projection(received: Received, *, user: str = ALICE) -> None:
    """Exactly one identity value, byte-equal to the projector's stamp of the room context."""
    [value] = received.values("x-fgentic-identity")
    identity = contract.load_identity(contract.codec.header_bytes([value]))
    assert isinstance(identity, contract.MatrixProjection | contract.BridgedMatrixProjection)
    context = contract.decode_room_context([CONTEXT if user == ALICE else _BRIDGED],
                                           user_id=user)
    expected = contract.stamp_matrix(context, agent=AGENT, iat=identity.iat)
    assert value == contract.encode_identity(expected)
    assert received.values("x-user-id") == [user]


_BOB = {"kind": "bridged_matrix", "network": "slack", "principal": SLACK_BOB}
_BRIDGED = contract.encode_room_context(room_context(
    caller=_BOB, audience=[_BOB, {"kind": "matrix", "principal": ALICE}]))


async def test_backend_receives_exactly_the_projection_and_validated_user(
    stack: Stack, session: ClientSession
) -> None:
    status, _, received = await send(stack, session, bridge_headers())
    assert status == 200
    assert received is not None
    assert received.path == n.AGENT_A2A_PATH  # the Agent's own Service, not the controller
    assert_canonical_projection(received)
    assert received.names <= BACKEND_HEADERS, received.names - BACKEND_HEADERS
    # Never the credential, the room context or a check header.
    assert "authorization" not in received.names
    assert n.ROOM_CONTEXT not in received.names
    assert not any(BRIDGE_KEY in v or CONTEXT in v for _, v in received.headers)


async def test_bridged_caller_is_projected_with_its_kind(
    stack: Stack, session: ClientSession
) -> None:
    status, _, received = await send(stack, session,
                                     bridge_headers(user=SLACK_BOB, context=_BRIDGED))
    assert status == 200 and received is not None
    assert_canonical_projection(received, user=SLACK_BOB)


@pytest.mark.parametrize("key", [None, "wrong-key", AGENT_MCP_KEY])
async def test_missing_or_wrong_key_is_refused_before_the_projector(
    stack: Stack, session: ClientSession, key: str | None
) -> None:
    status, _, received = await send(stack, session, bridge_headers(key=key))
    assert (status, received) == (401, None)


def _without(headers: list[tuple[str, str]], name: str) -> list[tuple[str, str]]:
    return [(k, v) for k, v in headers if k != name]


def _twice(headers: list[tuple[str, str]], name: str, value: str | None = None) -> list[
        tuple[str, str]]:
    first = next(v for k, v in headers if k == name)
    return [*headers, (name, value if value is not None else first)]


@pytest.mark.parametrize(("change", "code"), [
    (lambda h: _without(h, "x-user-id"), "USER_ID_COUNT/HEADER_MISSING"),
    (lambda h: _twice(h, "x-user-id"), "USER_ID_COUNT/HEADER_DUPLICATE"),
    (lambda h: _twice(h, "x-user-id", "@bob:org-a.example"), "USER_ID_COUNT/HEADER_DUPLICATE"),
    (lambda h: _without(h, "x-fgentic-room-context"), "ROOM_CONTEXT_COUNT/HEADER_MISSING"),
    (lambda h: _twice(h, "x-fgentic-room-context"), "ROOM_CONTEXT_COUNT/HEADER_DUPLICATE"),
], ids=["user-missing", "user-same-twice", "user-two-values", "context-missing",
        "context-same-twice"])
async def test_raw_identity_headers_must_appear_exactly_once(
    stack: Stack, session: ClientSession, change: Any, code: str
) -> None:
    status, text, received = await send(stack, session, change(bridge_headers()))
    assert (status, received) == (403, None)
    assert code in text  # the projector's own content-free code, relayed by the gateway


@pytest.mark.parametrize(("user", "context", "code"), [
    ("@bob:org-a.example", CONTEXT, "ROOM_CONTEXT_INVALID/CALLER_MISMATCH"),
    ("alice", CONTEXT, "ROOM_CONTEXT_INVALID/CALLER_MISMATCH"),
    (ALICE, "not-base64!", "ROOM_CONTEXT_INVALID/NOT_BASE64URL"),
    (ALICE, "e30", "ROOM_CONTEXT_INVALID/FIELD_MISSING"),
    # 8,193 bytes: refused by the contract's ceiling, not by a transport limit.
    (ALICE, "A" * 8193, "ROOM_CONTEXT_INVALID/HEADER_TOO_LARGE"),
])
async def test_invalid_room_context_or_user_is_refused(
    stack: Stack, session: ClientSession, user: str, context: str, code: str
) -> None:
    status, text, received = await send(stack, session, bridge_headers(user=user,
                                                                       context=context))
    assert (status, received) == (403, None)
    assert code in text
    assert user not in text and context not in text  # never echoed


async def test_oversized_header_is_refused_without_echo(
    stack: Stack, session: ClientSession
) -> None:
    """Beyond the projector's 64 KiB header limit its HTTP parser refuses the check; the
    gateway relays that answer, which names no content."""
    marker = "secretmarker" * 6000
    status, text, received = await send(stack, session, bridge_headers(context=marker))
    assert (status, received) == (400, None)
    assert text == "HTTP_REQUEST_REJECTED\n"


@pytest.mark.parametrize("forged", [["forged"], ["forged-1", "forged-2"]],
                         ids=["one", "two"])
async def test_forged_incoming_identity_is_overwritten(
    stack: Stack, session: ClientSession, forged: list[str]
) -> None:
    headers = bridge_headers() + [("x-fgentic-identity", value) for value in forged]
    status, _, received = await send(stack, session, headers)
    assert status == 200 and received is not None
    assert_canonical_projection(received)
    assert not set(forged) & set(received.values("x-fgentic-identity"))


@pytest.mark.parametrize("name", ["x-fgentic-debug", n.CHECK_WORKLOAD, n.CHECK_USER_ID_COUNT])
async def test_unknown_reserved_header_is_refused(
    stack: Stack, session: ClientSession, name: str
) -> None:
    # Forging a check header cannot help either: the gateway overwrites it for the check and
    # the route refuses every X-Fgentic-* name but the two it owns.
    value = "serviceaccount:matrix/matrix-a2a-bridge" if name == n.CHECK_WORKLOAD else "1"
    status, _, received = await send(stack, session, [*bridge_headers(), (name, value)])
    assert (status, received) == (403, None)


async def test_credentials_and_cookies_never_reach_the_projector(
    stack: Stack, session: ClientSession
) -> None:
    # The projector refuses any check carrying these (CHECK_HEADER_FORBIDDEN), so a 200 here
    # proves the rendered includeRequestHeaders allowlist kept them from it.
    headers = [*bridge_headers(), ("cookie", "session=secret"),
               ("proxy-authorization", "Basic c2VjcmV0"), ("x-fgentic-identity", "forged")]
    status, _, _ = await send(stack, session, headers)
    assert status == 200
    assert 'reason="CHECK_HEADER_FORBIDDEN"' not in stack.projector_metrics()


async def test_cookie_and_proxy_credentials_are_not_forwarded_to_the_backend(
    stack: Stack, session: ClientSession
) -> None:
    headers = [*bridge_headers(), ("cookie", "session=secret"),
               ("proxy-authorization", "Basic c2VjcmV0")]
    status, _, received = await send(stack, session, headers)
    assert status == 200 and received is not None
    assert not {"cookie", "proxy-authorization", "authorization"} & received.names


async def test_task_references_are_refused(stack: Stack, session: ClientSession) -> None:
    # a2a-sdk 0.3 reads the snake_case names too (its models validate by name), and so does
    # protobuf JSON: each spelling is refused.
    references: list[dict[str, Any]] = [{"contextId": "c1"}, {"taskId": "t1"},
                                        {"referenceTaskIds": []}, {"context_id": "c1"},
                                        {"task_id": "t1"}, {"reference_task_ids": ["r"]}]
    for field_ in references:
        status, _, received = await send(stack, session, bridge_headers(),
                                         send_message_body(stack.wire, **field_))
        assert (status, received) == (403, None), field_


@pytest.mark.parametrize("operation", ["get", "cancel"])
async def test_the_local_route_has_no_task_read_or_cancel(
    stack: Stack, session: ClientSession, operation: str
) -> None:
    """kagent's task store hands a task to whoever names its id, so the bridge may neither
    poll nor cancel one (issue 38 §4): the projector refuses the method with its code, bare
    or with the bridge's headers, and nothing reaches kagent."""
    body = task_body(stack.wire, operation, f"local-{operation}-1")
    status, text, received = await send(stack, session,
                                        [("authorization", f"Bearer {BRIDGE_KEY}")], body)
    assert (status, text, received) == (403, "A2A_METHOD_MISMATCH\n", None)
    body = {**body, "id": f"local-{operation}-2"}
    status, text, received = await send(stack, session, bridge_headers(), body)
    assert (status, text, received) == (403, "A2A_METHOD_MISMATCH\n", None)


async def test_decisions_are_counted_by_code(stack: Stack, session: ClientSession) -> None:
    await send(stack, session, _twice(bridge_headers(), "x-user-id"))
    metrics = stack.projector_metrics()
    assert ('fgentic_projector_decisions_total{detail="HEADER_DUPLICATE",'
            'reason="USER_ID_COUNT",route="local"}') in metrics
    assert 'reason="ALLOWED",route="local"' in metrics
    assert ALICE not in metrics


async def test_stopped_projector_fails_closed(stack: Stack, session: ClientSession) -> None:
    stack.stop_projector()
    try:
        status, _, received = await send(stack, session, bridge_headers())
        assert (status, received) == (403, None)
    finally:
        stack.start_projector()
    status, _, received = await send(stack, session, bridge_headers())
    assert status == 200 and received is not None


async def test_only_the_bindings_own_wire_is_admitted(stack: Stack,
                                                      session: ClientSession) -> None:
    """The routes admit one A2A version: the other one's send (with its own A2A-Version) and
    a present but empty A2A-Version are refused before the projector and the Agent."""
    other = next(w for w in type(stack.wire) if w is not stack.wire)
    body = send_message_body(other)
    headers = [*version_headers(other), *bridge_headers()]
    async with session.post(stack.local_url, json=body, headers=headers) as response:
        assert response.status == 403
    assert body["id"] not in stack.backend.received
    empty = send_message_body(stack.wire)
    async with session.post(stack.local_url, json=empty,
                            headers=[("a2a-version", ""), *bridge_headers()]) as response:
        assert response.status == 403
    assert empty["id"] not in stack.backend.received
