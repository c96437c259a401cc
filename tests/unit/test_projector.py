"""The identity projector's decisions (ADR 0017 §4, §6-§8, §12), as pure functions.

The check headers are those the rendered agentgateway config sends (see render.rules); the e2e
tests in tests/e2e/test_gateway_*.py send the same requests through the real gateway.
"""

from __future__ import annotations

import re

import pytest

from fgentic_governance import contract
from fgentic_governance.api.retrieval import A2aWire
from fgentic_governance.contract import (
    BridgedMatrixProjection,
    Code,
    MatrixProjection,
    OAuthClient,
    OAuthProjection,
)
from fgentic_governance.retrieval import vocabulary as n
from fgentic_governance.retrieval.projector.core import (
    Decision,
    Headers,
    Projector,
    ProjectorReason,
)
from fgentic_governance.retrieval.projector_config import (
    ProjectorConfig,
    PublicRoute,
)
from tests.support.objects import example
from tests.support.projector import (
    AGENT,
    ALICE,
    AUDIENCE,
    ISSUER,
    NOW,
    SLACK_BOB,
    config,
    local_headers,
    public_headers,
    room_context,
    wire_config,
)

CODE_TEXT = re.compile(r"^[A-Z0-9_]+(/[A-Z0-9_]+)?$")


def decide_local(headers: Headers, cfg: ProjectorConfig | None = None) -> Decision:
    return Projector(cfg or config()).local(headers, now=NOW)


def decide_public(headers: Headers, cfg: ProjectorConfig | None = None) -> Decision:
    return Projector(cfg or config()).public(headers, now=NOW)


def projected(decision: Decision) -> tuple[contract.AnyIdentity, str]:
    assert decision.allowed, decision.code
    names = [name for name, _ in decision.headers]
    assert names == ["X-Fgentic-Identity", "X-User-Id"]
    values = dict(decision.headers)
    identity = contract.decode_identity([values["X-Fgentic-Identity"]], now=NOW, agent=AGENT)
    return identity, values["X-User-Id"]


# -- local route -------------------------------------------------------------------------


def test_local_projection_is_the_stamped_room_context() -> None:
    context = room_context()
    identity, user = projected(decide_local(local_headers(context)))
    assert isinstance(identity, MatrixProjection)
    assert identity == contract.stamp_matrix(context, agent=AGENT, iat=NOW)
    assert (identity.iat, identity.exp, identity.groups) == (NOW, NOW + 600, ())
    assert identity.agent == AGENT  # from configuration, never from the caller
    assert user == ALICE


def test_local_bridged_caller_keeps_kind_and_network() -> None:
    bob = {"kind": "bridged_matrix", "network": "slack", "principal": SLACK_BOB}
    alice = {"kind": "matrix", "principal": ALICE}
    context = room_context(caller=bob, audience=[bob, alice])
    identity, user = projected(decide_local(local_headers(context, user=SLACK_BOB)))
    assert isinstance(identity, BridgedMatrixProjection)
    assert (identity.network, identity.principal, user) == ("slack", SLACK_BOB, SLACK_BOB)


LOCAL_CHECK_HEADERS = [n.USER_ID, n.CHECK_AGENT, n.CHECK_HTTP_METHOD,
                       n.CHECK_PATH, n.CHECK_A2A_METHOD, n.CHECK_WORKLOAD]


@pytest.mark.parametrize("name", LOCAL_CHECK_HEADERS)
def test_local_missing_check_header_denies(name: str) -> None:
    headers = local_headers()
    del headers[name]
    assert decide_local(headers).reason is ProjectorReason.CHECK_HEADER_MISSING


@pytest.mark.parametrize("name", LOCAL_CHECK_HEADERS)
def test_local_repeated_check_header_denies(name: str) -> None:
    headers = local_headers()
    headers[name] = headers[name] * 2
    assert decide_local(headers).reason is ProjectorReason.CHECK_HEADER_DUPLICATE


@pytest.mark.parametrize(("name", "value", "reason"), [
    (n.CHECK_WORKLOAD, "agent:fgentic-demo/docs-agent", ProjectorReason.WORKLOAD_MISMATCH),
    (n.CHECK_WORKLOAD, "", ProjectorReason.WORKLOAD_MISMATCH),
    (n.CHECK_AGENT, "fgentic-demo/other-agent", ProjectorReason.AGENT_MISMATCH),
    (n.CHECK_HTTP_METHOD, "GET", ProjectorReason.HTTP_METHOD_MISMATCH),
    (n.CHECK_PATH, "/a2a/fgentic-demo/other-agent", ProjectorReason.PATH_MISMATCH),
    (n.CHECK_PATH, "/a2a/fgentic-demo/docs-agent/", ProjectorReason.PATH_MISMATCH),
    (n.CHECK_A2A_METHOD, "tasks/get", ProjectorReason.A2A_METHOD_MISMATCH),
    (n.CHECK_A2A_METHOD, "SendMessage", ProjectorReason.A2A_METHOD_MISMATCH),
    (n.CHECK_A2A_METHOD, "message/Send", ProjectorReason.A2A_METHOD_MISMATCH),
    (n.A2A_VERSION_HEADER, "1.0", ProjectorReason.A2A_VERSION_MISMATCH),
    (n.A2A_VERSION_HEADER, "0.3.0", ProjectorReason.A2A_VERSION_MISMATCH),
])
def test_local_route_shape_must_be_exact(name: str, value: str, reason: ProjectorReason) -> None:
    assert decide_local(local_headers(changes={name: [value]})).reason is reason


@pytest.mark.parametrize(("count", "detail"), [
    (None, Code.HEADER_MISSING), ("0", Code.HEADER_MISSING), ("2", Code.HEADER_DUPLICATE),
    ("17", Code.HEADER_DUPLICATE), ("one", Code.SHAPE_INVALID), ("", Code.SHAPE_INVALID)])
@pytest.mark.parametrize(("header", "reason"), [
    (n.CHECK_USER_ID_COUNT, ProjectorReason.USER_ID_COUNT),
    (n.CHECK_ROOM_CONTEXT_COUNT, ProjectorReason.ROOM_CONTEXT_COUNT)])
def test_local_raw_counts_must_be_exactly_one(header: str, reason: ProjectorReason,
                                              count: str | None,
                                              detail: Code) -> None:
    """The gateway forwards only a header's first value, so its CEL count is the proof."""
    decision = decide_local(local_headers(changes={header: [count] if count is not None else None}))
    assert (decision.reason, decision.detail) == (reason, detail)


@pytest.mark.parametrize("name", ["authorization", "proxy-authorization", "cookie",
                                  n.IDENTITY])
def test_local_refuses_a_check_that_carries_credentials_or_a_projection(name: str) -> None:
    decision = decide_local(local_headers(changes={name: ["anything"]}))
    assert decision.reason is ProjectorReason.CHECK_HEADER_FORBIDDEN


def test_local_room_context_missing_or_repeated_at_the_check() -> None:
    assert decide_local(local_headers(changes={n.ROOM_CONTEXT: None})).detail is Code.HEADER_MISSING
    headers = local_headers()
    headers[n.ROOM_CONTEXT] *= 2
    assert decide_local(headers).detail is Code.HEADER_DUPLICATE


@pytest.mark.parametrize(("value", "detail"), [
    ("not base64!", Code.NOT_BASE64URL),
    ("A" * 8193, Code.HEADER_TOO_LARGE),
    ("e30", Code.FIELD_MISSING),  # "{}"
])
def test_local_malformed_room_context_denies_with_the_contract_code(value: str,
                                                                    detail: Code) -> None:
    decision = decide_local(local_headers(changes={n.ROOM_CONTEXT: [value]}))
    assert (decision.reason, decision.detail) == (ProjectorReason.ROOM_CONTEXT_INVALID, detail)


@pytest.mark.parametrize("user", ["@bob:org-a.example", "@alice", "alice", ALICE + " "])
def test_local_user_id_must_be_the_room_context_caller(user: str) -> None:
    decision = decide_local(local_headers(user=user))
    assert (decision.reason, decision.detail) == (ProjectorReason.ROOM_CONTEXT_INVALID,
                                                  Code.CALLER_MISMATCH)


def test_local_classification_above_the_binding_ceiling_is_refused() -> None:
    approved = room_context(classes=("approved_non_public", "public"))
    allowed, _ = projected(decide_local(local_headers(approved)))  # example ceiling: approved
    assert allowed.allowed_classifications == ("approved_non_public", "public")
    strict = config(classificationCeiling="public", publicRoute=None)
    decision = decide_local(local_headers(approved), strict)
    assert decision.reason is ProjectorReason.CLASSIFICATION_ABOVE_CEILING


def _with_namespaces() -> ProjectorConfig:
    cfg = config()
    doc = cfg.wire()
    doc["local"]["appserviceNamespaces"] = [
        {"network": "slack", "userRegex": r"@slack-[a-z0-9._=/+-]+:org-a\.example"}]
    return ProjectorConfig.model_validate(doc)


@pytest.mark.parametrize(("caller", "audience", "allowed"), [
    ({"kind": "matrix", "principal": ALICE}, None, True),
    ({"kind": "bridged_matrix", "network": "slack", "principal": SLACK_BOB}, None, True),
    # A localpart in the slack namespace cannot claim to be a native user...
    ({"kind": "matrix", "principal": SLACK_BOB}, None, False),
    # ...nor another network, and a native MXID cannot claim to be bridged.
    ({"kind": "bridged_matrix", "network": "irc", "principal": SLACK_BOB}, None, False),
    ({"kind": "bridged_matrix", "network": "slack", "principal": ALICE}, None, False),
    # Every audience entry is checked, not just the caller.
    ({"kind": "matrix", "principal": ALICE},
     [{"kind": "matrix", "principal": ALICE}, {"kind": "matrix", "principal": SLACK_BOB}],
     False),
])
def test_local_sender_kinds_follow_the_trusted_appservice_namespaces(
    caller: dict[str, str], audience: list[dict[str, str]] | None, allowed: bool
) -> None:
    context = room_context(caller=caller, audience=audience)
    decision = decide_local(local_headers(context, user=caller["principal"]), _with_namespaces())
    assert decision.allowed is allowed
    if not allowed:
        assert decision.reason is ProjectorReason.SENDER_KIND_INVALID


# -- public route ------------------------------------------------------------------------


def test_public_projection_comes_from_the_registry_entry_only() -> None:
    token_exp = NOW + 3600
    identity, user = projected(decide_public(public_headers(token_exp=token_exp)))
    assert isinstance(identity, OAuthProjection)
    client = OAuthClient(audience=AUDIENCE, azp="org-b-a2a", issuer=ISSUER, policy_id="org-b")
    assert identity.client == client
    assert identity.groups == ("partner/org-b/docs",)
    assert identity.allowed_classifications == ("public",)
    assert (identity.iat, identity.exp) == (NOW, NOW + 600)
    assert re.fullmatch(r"[0-9a-f]{64}", identity.delegation_id)
    assert user == contract.oauth_user_id(client)
    assert re.fullmatch(r"oidc:org-b:[0-9a-f]{64}", user)


def test_public_delegation_ids_are_fresh_random_values() -> None:
    projector = Projector(config())
    ids = set()
    for _ in range(20):
        identity, _ = projected(projector.public(public_headers(), now=NOW))
        ids.add(identity.delegation_id)
    assert len(ids) == 20


def test_public_groups_are_sorted_and_classifications_come_from_the_entry() -> None:
    partners = [{"azp": "org-b-a2a", "policyId": "org-b", "groups": ["zeta", "docs", "alpha"],
                 "allowedClassifications": ["approved_non_public"]}]
    cfg = config(publicRoute={**example("RetrievalBinding")["spec"]["publicRoute"],
                              "partners": partners})
    identity, _ = projected(decide_public(public_headers(), cfg))
    assert isinstance(identity, OAuthProjection)
    assert identity.groups == ("partner/org-b/alpha", "partner/org-b/docs", "partner/org-b/zeta")
    assert identity.allowed_classifications == ("approved_non_public", "public")


@pytest.mark.parametrize(("remaining", "allowed", "exp_offset"), [
    (3600, True, 600), (601, True, 600), (600, True, 600), (200, True, 200), (61, True, 61),
    (60, False, 0), (30, False, 0), (0, False, 0), (-10, False, 0)])
def test_public_token_lifetime_must_exceed_timeout_plus_skew_and_caps_exp(
    remaining: int, allowed: bool, exp_offset: int
) -> None:
    decision = decide_public(public_headers(token_exp=NOW + remaining))
    assert decision.allowed is allowed
    if allowed:
        identity, _ = projected(decision)
        assert identity.exp == NOW + exp_offset  # min(iat + 600, token exp)
    else:
        assert decision.reason is ProjectorReason.TOKEN_NEAR_EXPIRY


@pytest.mark.parametrize("value", ["", "1.7e9", "-1", "+5", " 1784120000", "0x10",
                                   "99999999999999999"])
def test_public_token_expiry_must_be_a_plain_integer(value: str) -> None:
    decision = decide_public(public_headers(changes={n.CHECK_TOKEN_EXP: [value]}))
    assert decision.reason is ProjectorReason.TOKEN_EXPIRY_INVALID


@pytest.mark.parametrize(("name", "value", "reason"), [
    (n.CHECK_ISSUER, "https://issuer.example/", ProjectorReason.ISSUER_MISMATCH),
    (n.CHECK_ISSUER, "https://evil.example", ProjectorReason.ISSUER_MISMATCH),
    (n.CHECK_AUDIENCE, "other", ProjectorReason.AUDIENCE_MISMATCH),
    (n.CHECK_AZP, "org-c-a2a", ProjectorReason.PARTNER_UNKNOWN),
    (n.CHECK_AZP, "ORG-B-A2A", ProjectorReason.PARTNER_UNKNOWN),
    (n.CHECK_TIMEOUT, "60", ProjectorReason.TIMEOUT_MISMATCH),
    (n.CHECK_AGENT, "kagent/docs-agent", ProjectorReason.AGENT_MISMATCH),
    (n.CHECK_A2A_METHOD, "tasks/get", ProjectorReason.A2A_METHOD_MISMATCH),
    (n.CHECK_A2A_METHOD, "tasks/cancel", ProjectorReason.A2A_METHOD_MISMATCH),
])
def test_public_validated_metadata_must_match_exactly(name: str, value: str,
                                                      reason: ProjectorReason) -> None:
    assert decide_public(public_headers(changes={name: [value]})).reason is reason


@pytest.mark.parametrize("name", [n.CHECK_ISSUER, n.CHECK_AUDIENCE, n.CHECK_AZP,
                                  n.CHECK_TOKEN_EXP, n.CHECK_TIMEOUT])
def test_public_missing_jwt_metadata_denies(name: str) -> None:
    assert decide_public(public_headers(changes={name: None})).reason is (
        ProjectorReason.CHECK_HEADER_MISSING)


@pytest.mark.parametrize("name", [n.USER_ID, n.ROOM_CONTEXT, n.IDENTITY, "authorization",
                                  "cookie"])
def test_public_caller_identity_headers_have_no_authority(name: str) -> None:
    decision = decide_public(public_headers(changes={name: [ALICE]}))
    assert decision.reason is ProjectorReason.CHECK_HEADER_FORBIDDEN


def test_public_route_absent_from_the_binding_denies() -> None:
    cfg = config(publicRoute=None)
    assert decide_public(public_headers(), cfg).reason is ProjectorReason.ROUTE_NOT_CONFIGURED


def test_public_ambiguous_registry_denies_even_if_loading_was_bypassed() -> None:
    cfg = config()
    assert cfg.public is not None
    twice = PublicRoute.model_construct(**{**dict(cfg.public),
                                           "partners": cfg.public.partners * 2})
    forged = ProjectorConfig.model_construct(**{**dict(cfg), "public": twice})
    assert decide_public(public_headers(), forged).reason is ProjectorReason.PARTNER_AMBIGUOUS


# -- content-free codes ------------------------------------------------------------------


def test_denial_codes_never_carry_header_content() -> None:
    secret = "@secret-user:org-a.example"
    decisions = [
        decide_local(local_headers(user=secret)),
        decide_local(local_headers(changes={n.ROOM_CONTEXT: [secret]})),
        decide_local(local_headers(changes={n.CHECK_WORKLOAD: [secret]})),
        decide_public(public_headers(azp=secret)),
        decide_public(public_headers(changes={n.CHECK_ISSUER: [secret]})),
    ]
    for decision in decisions:
        assert not decision.allowed and not decision.headers
        assert CODE_TEXT.fullmatch(decision.code), decision.code
        assert "secret" not in repr(decision)


# -- each A2A wire: its own operation and A2A-Version rule --------------------------------------


@pytest.mark.parametrize(("wire", "version", "allowed"), [
    (A2aWire.V0_3, None, True), (A2aWire.V0_3, "0.3", True), (A2aWire.V0_3, "1.0", False),
    (A2aWire.V0_3, "", False), (A2aWire.V1_0, "1.0", True), (A2aWire.V1_0, None, False),
    (A2aWire.V1_0, "0.3", False), (A2aWire.V1_0, "1.0.0", False),
], ids=str)
def test_each_wire_admits_its_own_a2a_version_rule(wire: A2aWire, version: str | None,
                                                   allowed: bool) -> None:
    change = {n.A2A_VERSION_HEADER: None if version is None else [version]}
    for decide, headers in ((decide_local, local_headers(changes=change, wire=wire)),
                            (decide_public, public_headers(changes=change, wire=wire))):
        decision = decide(headers, wire_config(wire))
        if allowed:
            assert decision.reason is ProjectorReason.ALLOWED
        elif version is None:  # a required check header the route did not send
            assert decision.reason is ProjectorReason.CHECK_HEADER_MISSING
        else:
            assert decision.reason is ProjectorReason.A2A_VERSION_MISMATCH


@pytest.mark.parametrize("wire", list(A2aWire))
def test_each_wire_projects_only_for_its_own_send_operation(wire: A2aWire) -> None:
    config = wire_config(wire)
    assert decide_local(local_headers(wire=wire), config).reason is ProjectorReason.ALLOWED
    for other in A2aWire:
        for method in (n.WIRES[other].send, n.WIRES[other].get, n.WIRES[other].cancel):
            if method == n.WIRES[wire].send:
                continue
            headers = local_headers(wire=wire, changes={n.CHECK_A2A_METHOD: [method]})
            assert decide_local(headers, config).reason is ProjectorReason.A2A_METHOD_MISMATCH


def test_a_repeated_version_header_is_a_duplicate() -> None:
    headers = local_headers(changes={n.A2A_VERSION_HEADER: ["0.3", "0.3"]})
    assert decide_local(headers).reason is ProjectorReason.CHECK_HEADER_DUPLICATE
