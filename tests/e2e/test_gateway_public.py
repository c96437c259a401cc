"""The public partner A2A route through the real agentgateway v1.3.1 (ADR 0017 §6, §8, §12).

jwtAuth validates a token signed by a key this test generates (its JWKS is in the rendered
config's file); the projector derives the OAuth projection from the validated claims and the
binding's partner registry only.
"""

from __future__ import annotations

import base64
import json
import re
import time
from typing import Any

import pytest
from aiohttp import ClientSession

from fgentic_governance import contract
from fgentic_governance.contract import OAuthClient, OAuthProjection
from fgentic_governance.retrieval.vocabulary import WIRES
from tests.support.gateway import (
    BACKEND_HEADERS,
    PARTNER_AZP,
    PartnerIssuer,
    Received,
    Stack,
    non_blocking,
    send_message_body,
    task_body,
    version_headers,
)
from tests.support.projector import AGENT, ALICE, AUDIENCE, ISSUER

pytestmark = pytest.mark.e2e

TIMEOUT = 30  # the example binding's publicRetrievalTimeoutSeconds
CLIENT = OAuthClient(audience=AUDIENCE, azp=PARTNER_AZP, issuer=ISSUER, policy_id="org-b")


async def send(stack: Stack, session: ClientSession, token: str | None,
               extra: list[tuple[str, str]] | None = None,
               body: dict[str, Any] | None = None) -> tuple[int, str, Received | None]:
    body = body or send_message_body(stack.wire)
    headers = [*version_headers(stack.wire), *(extra or [])]
    if token is not None:
        headers.insert(0, ("authorization", f"Bearer {token}"))
    async with session.post(stack.public_url, json=body, headers=headers,
                            ssl=stack.ssl_context()) as response:
        text = await response.text()
    return response.status, text, stack.backend.received.get(body["id"])


def projection_of(received: Received) -> OAuthProjection:
    [value] = received.values("x-fgentic-identity")
    identity = contract.decode_identity([value], now=int(time.time()), agent=AGENT)
    assert isinstance(identity, OAuthProjection)
    return identity


async def test_valid_token_is_projected_from_the_registry(
    stack: Stack, session: ClientSession
) -> None:
    token = stack.issuer.token(lifetime=3600)
    status, _, received = await send(stack, session, token)
    assert status == 200 and received is not None
    identity = projection_of(received)
    assert identity.client == CLIENT
    assert identity.groups == ("partner/org-b/docs",)
    assert identity.allowed_classifications == ("public",)
    assert identity.exp - identity.iat == 600
    assert received.values("x-user-id") == [contract.oauth_user_id(CLIENT)]
    assert re.fullmatch(r"oidc:org-b:[0-9a-f]{64}", received.values("x-user-id")[0])
    assert received.names <= BACKEND_HEADERS, received.names - BACKEND_HEADERS
    assert not any(token in v for _, v in received.headers)  # the bearer token stays here


async def test_cookie_and_proxy_credentials_are_not_forwarded(
    stack: Stack, session: ClientSession
) -> None:
    extra = [("cookie", "session=secret"), ("proxy-authorization", "Basic c2VjcmV0")]
    status, _, received = await send(stack, session, stack.issuer.token(), extra)
    assert status == 200 and received is not None
    assert not {"cookie", "proxy-authorization", "authorization"} & received.names


async def test_projection_expiry_is_capped_at_the_token_expiry(
    stack: Stack, session: ClientSession
) -> None:
    token = stack.issuer.token(lifetime=200)
    exp = int(json.loads(_payload(token))["exp"])  # the token's own exp claim
    status, _, received = await send(stack, session, token)
    assert status == 200 and received is not None
    assert projection_of(received).exp == exp


def _payload(token: str) -> bytes:
    part = token.split(".")[1]
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


async def test_caller_identity_headers_have_no_authority(
    stack: Stack, session: ClientSession
) -> None:
    extra = [("x-user-id", ALICE), ("x-fgentic-identity", "forged"),
             ("x-fgentic-identity", "forged-2")]
    status, _, received = await send(stack, session, stack.issuer.token(), extra)
    assert status == 200 and received is not None
    projection_of(received)  # exactly one value, the projector's
    assert received.values("x-user-id") == [contract.oauth_user_id(CLIENT)]


@pytest.mark.parametrize("name", ["x-fgentic-room-context", "x-fgentic-debug"])
async def test_other_reserved_headers_are_refused(
    stack: Stack, session: ClientSession, name: str
) -> None:
    status, _, received = await send(stack, session, stack.issuer.token(), [(name, "x")])
    assert (status, received) == (403, None)


@pytest.mark.parametrize(("make", "expected"), [
    (lambda i: None, 401),
    (lambda i: i.token(lifetime=-120), 401),                     # expired
    (lambda i: i.token(iss="https://evil.example"), 401),        # wrong issuer
    (lambda i: i.token(aud="other-audience"), 401),              # wrong audience
    (lambda i: PartnerIssuer().token(), 401),                    # unknown signing key
    (lambda i: i.token(azp="org-c-a2a"), 403),                   # no registry entry
    (lambda i: i.token(azp=None), 403),                          # no azp at all
    (lambda i: i.token(lifetime=TIMEOUT + 30), 403),             # near expiry: <= 60 s left
    (lambda i: i.token(lifetime=TIMEOUT + 10), 403),
], ids=["no-token", "expired", "wrong-issuer", "wrong-audience", "unknown-key", "unknown-azp",
        "no-azp", "near-expiry-60s", "near-expiry-40s"])
async def test_invalid_tokens_are_refused(
    stack: Stack, session: ClientSession, make: Any, expected: int
) -> None:
    status, _, received = await send(stack, session, make(stack.issuer))
    assert (status, received) == (expected, None)


async def test_near_expiry_is_the_projectors_decision(
    stack: Stack, session: ClientSession
) -> None:
    status, text, _ = await send(stack, session, stack.issuer.token(lifetime=TIMEOUT + 30))
    assert status == 403 and "TOKEN_NEAR_EXPIRY" in text
    # Comfortably above timeout + skew: admitted.
    status, _, received = await send(stack, session, stack.issuer.token(lifetime=TIMEOUT + 45))
    assert status == 200 and received is not None


async def test_token_expired_within_jwt_leeway_is_refused_by_the_projector(
    stack: Stack, session: ClientSession
) -> None:
    """Observed: v1.3.1's jwtAuth admits a token that expired seconds ago (a default leeway);
    the projector's lifetime rule refuses it regardless."""
    status, text, received = await send(stack, session, stack.issuer.token(lifetime=-10))
    assert (status, received) == (403, None)
    assert "TOKEN_NEAR_EXPIRY" in text


@pytest.mark.parametrize("operation", ["get", "cancel"])
async def test_public_route_has_no_task_read_or_cancel(
    stack: Stack, session: ClientSession, operation: str
) -> None:
    body = task_body(stack.wire, operation, f"pub-{operation}", "t")
    status, _, received = await send(stack, session, stack.issuer.token(), body=body)
    assert (status, received) == (403, None)


async def test_non_blocking_send_is_refused(stack: Stack, session: ClientSession) -> None:
    body = non_blocking(stack.wire, send_message_body(stack.wire))
    status, _, received = await send(stack, session, stack.issuer.token(), body=body)
    assert (status, received) == (403, None)
    (*_, other), value = WIRES[stack.wire].immediate  # the last spelling the runtime reads
    body = send_message_body(stack.wire)
    body["params"]["configuration"] = {other: value}
    status, _, received = await send(stack, session, stack.issuer.token(), body=body)
    assert (status, received) == (403, None)
    body = send_message_body(stack.wire, context_id="someone-elses")
    status, _, received = await send(stack, session, stack.issuer.token(), body=body)
    assert (status, received) == (403, None)
