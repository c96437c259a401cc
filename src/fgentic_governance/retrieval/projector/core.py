"""The identity projector's decisions (ADR 0017 §3-§8, §12): pure functions of the check request.

agentgateway's HTTP ext-authz sends the projector only an allowlist of caller headers and the
values its route computed with CEL (`x-fgentic-authz-*`, see `retrieval.vocabulary`). Those computed
values are trusted: the gateway overwrites any caller header of the same name and the caller
cannot reach the projector directly (NetworkPolicy). From them the projector either answers
2xx with exactly two headers, X-Fgentic-Identity and X-User-Id, which the gateway writes over
every incoming value, or denies with a bounded code. Nothing here reads a clock, a random
source or the network: the server passes `now` and a delegation-ID source in.

Denials never carry or log header content; `Decision` holds only an enum code and, for a
contract failure, the contract's own enum code.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from pydantic import ValidationError

from fgentic_governance.contract import (
    IDENTITY_HEADER,
    AgentRef,
    BridgedPrincipal,
    Code,
    ContractError,
    OAuthProjection,
    Principal,
    RoomContext,
    decode_room_context,
    encode_identity,
    oauth_user_id,
    stamp_matrix,
)
from fgentic_governance.contract import limits as contract_limits
from fgentic_governance.retrieval import vocabulary as n
from fgentic_governance.retrieval.projector_config import (
    APPROVED,
    LocalRoute,
    Partner,
    ProjectorConfig,
    PublicRoute,
    contract_agent,
    oauth_client,
    partner_groups,
)

USER_ID_HEADER = "X-User-Id"
Headers = Mapping[str, Sequence[str]]
"""Every value of every check-request header, keyed by lowercase name."""


class ProjectorReason(StrEnum):
    """Why a check request was answered as it was (a metrics label and the denial body)."""

    ALLOWED = "ALLOWED"
    ROUTE_NOT_CONFIGURED = "ROUTE_NOT_CONFIGURED"
    CHECK_HEADER_MISSING = "CHECK_HEADER_MISSING"
    CHECK_HEADER_DUPLICATE = "CHECK_HEADER_DUPLICATE"
    CHECK_HEADER_FORBIDDEN = "CHECK_HEADER_FORBIDDEN"
    WORKLOAD_MISMATCH = "WORKLOAD_MISMATCH"
    AGENT_MISMATCH = "AGENT_MISMATCH"
    HTTP_METHOD_MISMATCH = "HTTP_METHOD_MISMATCH"
    PATH_MISMATCH = "PATH_MISMATCH"
    A2A_METHOD_MISMATCH = "A2A_METHOD_MISMATCH"
    A2A_VERSION_MISMATCH = "A2A_VERSION_MISMATCH"
    USER_ID_COUNT = "USER_ID_COUNT"
    ROOM_CONTEXT_COUNT = "ROOM_CONTEXT_COUNT"
    ROOM_CONTEXT_INVALID = "ROOM_CONTEXT_INVALID"
    SENDER_KIND_INVALID = "SENDER_KIND_INVALID"
    CLASSIFICATION_ABOVE_CEILING = "CLASSIFICATION_ABOVE_CEILING"
    ISSUER_MISMATCH = "ISSUER_MISMATCH"
    AUDIENCE_MISMATCH = "AUDIENCE_MISMATCH"
    TIMEOUT_MISMATCH = "TIMEOUT_MISMATCH"
    PARTNER_UNKNOWN = "PARTNER_UNKNOWN"
    PARTNER_AMBIGUOUS = "PARTNER_AMBIGUOUS"
    TOKEN_EXPIRY_INVALID = "TOKEN_EXPIRY_INVALID"
    TOKEN_NEAR_EXPIRY = "TOKEN_NEAR_EXPIRY"
    PROJECTION_FAILED = "PROJECTION_FAILED"


@dataclass(frozen=True)
class Decision:
    reason: ProjectorReason
    detail: Code | None = None
    """The contract's code when the room context (or the projection) failed its rules."""
    headers: tuple[tuple[str, str], ...] = field(default=())
    """The response headers of an allowed request: X-Fgentic-Identity, X-User-Id."""

    @property
    def allowed(self) -> bool:
        return self.reason is ProjectorReason.ALLOWED

    @property
    def code(self) -> str:
        """Content-free text for the denial body and logs: REASON or REASON/DETAIL."""
        return f"{self.reason.value}/{self.detail.value}" if self.detail else self.reason.value


class _Denied(Exception):  # control flow inside this module; never escapes it
    def __init__(self, reason: ProjectorReason, detail: Code | None = None) -> None:
        super().__init__(reason.value)
        self.reason = reason
        self.detail = detail


# Headers the HTTP check must never carry (ADR 0017 §7): seeing one means the gateway's
# includeRequestHeaders allowlist was widened, so the request is refused, not just ignored.
_NEVER_FORWARDED = ("authorization", "proxy-authorization", "cookie", n.IDENTITY)
# On the public route caller-supplied MXIDs and rooms have no authority (§6): never an input.
_PUBLIC_FORBIDDEN = (*_NEVER_FORWARDED, n.USER_ID, n.ROOM_CONTEXT)
_TOKEN_EXP = re.compile(r"[0-9]{1,16}")  # string(jwt.exp) of an integer claim


def _get(headers: Headers, name: str) -> str:
    """The one value of a check header. The gateway sends each at most once, so a repeat means
    the request did not come from the configured route."""
    values = headers.get(name, ())
    if not values:
        raise _Denied(ProjectorReason.CHECK_HEADER_MISSING)
    if len(values) > 1:
        raise _Denied(ProjectorReason.CHECK_HEADER_DUPLICATE)
    return values[0]


def _expect(headers: Headers, name: str, want: str, reason: ProjectorReason) -> None:
    if _get(headers, name) != want:
        raise _Denied(reason)


def _refuse(headers: Headers, names: Sequence[str]) -> None:
    if any(name in headers for name in names):
        raise _Denied(ProjectorReason.CHECK_HEADER_FORBIDDEN)


def _count_is_one(headers: Headers, name: str, reason: ProjectorReason) -> None:
    """A CEL-computed count of the original request's values must be exactly "1": extAuthz
    forwards only the first value of a repeated header, so this is the only proof of one."""
    values = headers.get(name, ())
    if len(values) > 1:
        raise _Denied(ProjectorReason.CHECK_HEADER_DUPLICATE)
    count = values[0] if values else "0"  # CEL fails (header absent) when there is no value
    if count == "1":
        return
    if count == "0":
        raise _Denied(reason, Code.HEADER_MISSING)
    if count.isdecimal():
        raise _Denied(reason, Code.HEADER_DUPLICATE)
    raise _Denied(reason, Code.SHAPE_INVALID)  # not a count: the route config is not ours


def _route_shape(headers: Headers, agent: AgentRef, path: str, wire: n.Wire) -> None:
    """The exact Agent, HTTP method, path, A2A operation and A2A-Version the route was
    configured for (the wire's; where it is optional, absent is fine, empty is not)."""
    _expect(headers, n.CHECK_AGENT, f"{agent.namespace}/{agent.name}",
            ProjectorReason.AGENT_MISMATCH)
    _expect(headers, n.CHECK_HTTP_METHOD, "POST", ProjectorReason.HTTP_METHOD_MISMATCH)
    _expect(headers, n.CHECK_PATH, path, ProjectorReason.PATH_MISMATCH)
    _expect(headers, n.CHECK_A2A_METHOD, wire.send, ProjectorReason.A2A_METHOD_MISMATCH)
    if n.A2A_VERSION_HEADER not in headers and wire.version_optional:
        return
    if _get(headers, n.A2A_VERSION_HEADER) not in wire.versions:
        raise _Denied(ProjectorReason.A2A_VERSION_MISMATCH)


def _allow(identity_value: str, user: str) -> Decision:
    return Decision(ProjectorReason.ALLOWED, headers=((IDENTITY_HEADER, identity_value),
                                             (USER_ID_HEADER, user)))


@dataclass(frozen=True)
class _PartnerIndex:
    partner: Partner
    groups: tuple[str, ...]
    user_id: str


class Projector:
    """A configuration compiled for per-request use (regexes, partner index, user IDs)."""

    def __init__(self, config: ProjectorConfig,
                 delegation_id: Callable[[], str] = lambda: secrets.token_hex(32)) -> None:
        self.config = config
        self._wire = n.WIRES[config.a2a_version]
        self._delegation_id = delegation_id
        local = config.local
        self._local_agent = contract_agent(local.agent)
        self._namespaces = local.registry()  # the memory path's registry (api/appservice)
        self._approved = config.classification_ceiling.value == "approved_non_public"
        self._partners: dict[str, list[_PartnerIndex]] = {}
        public = config.public
        self._public_agent = contract_agent(public.agent) if public else None
        for partner in public.partners if public else ():
            assert public is not None
            entry = _PartnerIndex(partner, partner_groups(partner),
                                  oauth_user_id(oauth_client(public, partner)))
            self._partners.setdefault(partner.azp, []).append(entry)

    # -- local route -------------------------------------------------------------------

    def local(self, headers: Headers, *, now: int) -> Decision:
        try:
            return self._local(self.config.local, headers, now)
        except _Denied as denied:
            return Decision(denied.reason, denied.detail)

    def _local(self, route: LocalRoute, headers: Headers, now: int) -> Decision:
        _refuse(headers, _NEVER_FORWARDED)
        _expect(headers, n.CHECK_WORKLOAD, route.workload, ProjectorReason.WORKLOAD_MISMATCH)
        _route_shape(headers, self._local_agent, route.path, self._wire)
        _count_is_one(headers, n.CHECK_USER_ID_COUNT, ProjectorReason.USER_ID_COUNT)
        _count_is_one(headers, n.CHECK_ROOM_CONTEXT_COUNT, ProjectorReason.ROOM_CONTEXT_COUNT)
        user = _get(headers, n.USER_ID)
        context_values = headers.get(n.ROOM_CONTEXT, ())
        failure: ContractError | None = None
        try:
            context = decode_room_context(context_values, user_id=user)
        except ContractError as exc:
            failure = exc
        if failure is not None:  # outside the except block: nothing chained, nothing echoed
            raise _Denied(ProjectorReason.ROOM_CONTEXT_INVALID, failure.code)
        if context.allowed_classifications == APPROVED and not self._approved:
            raise _Denied(ProjectorReason.CLASSIFICATION_ABOVE_CEILING)
        self._check_kinds(context)
        return self._encode_matrix(context, now)

    def _check_kinds(self, context: RoomContext) -> None:
        """Sender kinds against the bridge's trusted appservice namespaces (if configured):
        a localpart or room state cannot move an MXID between kinds or networks."""
        if not self._namespaces:
            return
        for principal in (context.caller, *context.audience):
            if not self._kind_consistent(principal):
                raise _Denied(ProjectorReason.SENDER_KIND_INVALID)

    def _kind_consistent(self, principal: Principal) -> bool:
        networks = self._namespaces.networks(principal.principal)
        if isinstance(principal, BridgedPrincipal):
            return principal.network in networks
        return not networks

    def _encode_matrix(self, context: RoomContext, now: int) -> Decision:
        failure: ContractError | None = None
        try:
            projection = stamp_matrix(context, agent=self._local_agent, iat=now)
            value = encode_identity(projection)
        except ContractError as exc:
            failure = exc
        if failure is not None:
            raise _Denied(ProjectorReason.PROJECTION_FAILED, failure.code)
        # The validated principal overwrites the downstream X-User-Id (attribution only).
        return _allow(value, projection.principal)

    # -- public route ------------------------------------------------------------------

    def public(self, headers: Headers, *, now: int) -> Decision:
        route = self.config.public
        if route is None or self._public_agent is None:
            return Decision(ProjectorReason.ROUTE_NOT_CONFIGURED)
        try:
            return self._public(route, self._public_agent, headers, now)
        except _Denied as denied:
            return Decision(denied.reason, denied.detail)

    def _public(self, route: PublicRoute, agent: AgentRef, headers: Headers,
                now: int) -> Decision:
        _refuse(headers, _PUBLIC_FORBIDDEN)
        _route_shape(headers, agent, route.path, self._wire)
        # Validated JWT metadata (jwtAuth ran first); compared exactly, never normalised.
        _expect(headers, n.CHECK_ISSUER, route.issuer, ProjectorReason.ISSUER_MISMATCH)
        _expect(headers, n.CHECK_AUDIENCE, route.audience, ProjectorReason.AUDIENCE_MISMATCH)
        # The gateway's rendered timeout must be the one this projector checks lifetimes for.
        _expect(headers, n.CHECK_TIMEOUT, str(route.timeout_seconds),
                ProjectorReason.TIMEOUT_MISMATCH)
        entry = self._partner(_get(headers, n.CHECK_AZP))
        token_exp = self._token_exp(_get(headers, n.CHECK_TOKEN_EXP))
        # Admit only a token that outlives the gateway's request timeout plus the 30 s skew
        # allowance, so the route's timeout ends delivery before the projection expires.
        if token_exp - now <= route.timeout_seconds + contract_limits.CLOCK_SKEW_SECONDS:
            raise _Denied(ProjectorReason.TOKEN_NEAR_EXPIRY)
        exp = min(now + contract_limits.MAX_LIFETIME_SECONDS, token_exp)
        return self._encode_oauth(route, agent, entry, now, exp)

    def _partner(self, azp: str) -> _PartnerIndex:
        entries = self._partners.get(azp, [])
        if not entries:
            raise _Denied(ProjectorReason.PARTNER_UNKNOWN)
        if len(entries) > 1:  # refused at load; kept so the rule holds here on its own
            raise _Denied(ProjectorReason.PARTNER_AMBIGUOUS)
        return entries[0]

    @staticmethod
    def _token_exp(text: str) -> int:
        if not _TOKEN_EXP.fullmatch(text):
            raise _Denied(ProjectorReason.TOKEN_EXPIRY_INVALID)
        value = int(text)
        if value > contract_limits.MAX_SAFE_INTEGER:
            raise _Denied(ProjectorReason.TOKEN_EXPIRY_INVALID)
        return value

    def _encode_oauth(self, route: PublicRoute, agent: AgentRef, entry: _PartnerIndex,
                      iat: int, exp: int) -> Decision:
        partner = entry.partner
        failure: Code | None = None
        value = ""
        try:
            value = encode_identity(OAuthProjection(
                agent=agent, allowed_classifications=partner.allowed_classifications,
                client=oauth_client(route, partner), delegation_id=self._delegation_id(),
                exp=exp, groups=entry.groups, iat=iat, kind="oidc_client", v=1))
        except ContractError as exc:
            failure = exc.code
        except ValidationError:
            failure = Code.SHAPE_INVALID
        if failure is not None:
            raise _Denied(ProjectorReason.PROJECTION_FAILED, failure)
        return _allow(value, entry.user_id)
