"""The wire shapes of ADR 0017: the single source of truth for models, schemas and the codec.

Each model is strict (no coercion: `1.0` is not `1`, `"1"` is not `1`, `true` is not `1`),
rejects unknown fields, is frozen, and has no defaults, so a model and its JSON object are in
one-to-one correspondence. Fields are declared in RFC 8785 key order (ASCII names, sorted): the
codec then re-serialises a decoded model straight to JCS bytes without a generic canonicaliser
(see `jcs.canonical_model`). `_Shape.__pydantic_init_subclass__` refuses any other order.

Only per-field rules live here (and therefore in the generated JSON Schemas). Cross-field rules
(sort order, uniqueness, caller in audience, group namespace, UTF-8 byte bounds of free-form
strings, the validity window) live beside them in `semantics.py`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from fgentic_governance.contract import limits


class _Shape(BaseModel):
    model_config = ConfigDict(
        strict=True,
        extra="forbid",
        frozen=True,
        use_attribute_docstrings=True,
        # Defence in depth: even a stray ValidationError never carries header content.
        hide_input_in_errors=True,
    )

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        names = list(cls.model_fields)
        if names != sorted(names) or not all(n.isascii() for n in names):
            raise TypeError(f"{cls.__name__}: fields must be declared in JCS (sorted) order")


DnsLabel = Annotated[str, Field(min_length=1, max_length=63, pattern=limits.DNS1123_LABEL)]
# Every character these patterns admit is ASCII, so maxLength is also the UTF-8 byte bound.
Mxid = Annotated[str, Field(min_length=4, max_length=limits.MAX_ID_BYTES, pattern=limits.MXID)]
RoomId = Annotated[
    str, Field(min_length=2, max_length=limits.MAX_ID_BYTES, pattern=limits.ROOM_ID)]
EventId = Annotated[
    str, Field(min_length=2, max_length=limits.MAX_ID_BYTES, pattern=limits.EVENT_ID)]
Sha256Hex = Annotated[str, Field(min_length=64, max_length=64, pattern=limits.LOWER_HEX_64)]
UnixSeconds = Annotated[int, Field(ge=0, le=limits.MAX_SAFE_INTEGER)]
# Not Literal[1]: pydantic matches literals by equality, so JSON `true` would pass as 1.
Version = Annotated[int, Field(ge=1, le=1, json_schema_extra={"const": 1})]
# Exactly ["public"] or the ASCII-sorted ["approved_non_public", "public"]; nothing can widen it.
Classifications = (
    tuple[Literal["public"]] | tuple[Literal["approved_non_public"], Literal["public"]]
)
PartnerGroup = Annotated[str, Field(
    min_length=1, max_length=limits.MAX_PARTNER_GROUP_CHARS, pattern=limits.PARTNER_GROUP)]
AclEntry = Annotated[str, Field(min_length=1, max_length=255, pattern=limits.ACL_ENTRY)]


class AgentRef(_Shape):
    """The retrieval Agent, derived from the exact gateway route."""

    name: DnsLabel
    namespace: DnsLabel


class MatrixPrincipal(_Shape):
    """A native (local or federated) Matrix user."""

    kind: Literal["matrix"]
    principal: Mxid
    """Complete Matrix user ID, at most 255 bytes."""


class BridgedPrincipal(_Shape):
    """A user of a bridged network or external appservice namespace, kept apart from natives."""

    kind: Literal["bridged_matrix"]
    network: DnsLabel
    """Which bridge or appservice namespace, from trusted bridge configuration."""
    principal: Mxid
    """Complete Matrix user ID, at most 255 bytes."""


# One typed reader: an audience entry, the room-context caller, an allowed_principals value.
Principal = Annotated[MatrixPrincipal | BridgedPrincipal, Field(discriminator="kind")]
Audience = Annotated[
    tuple[Principal, ...], Field(min_length=1, max_length=limits.MAX_AUDIENCE)]


class RoomRef(_Shape):
    """The invite-only, joined-history room the answer will be posted to."""

    event_id: EventId
    history_visibility: Literal["joined"]
    id: RoomId
    join_rule: Literal["invite"]
    state_sha256: Sha256Hex
    """Lowercase SHA-256 of the JCS room-state snapshot (`RoomSnapshot`)."""


class MatrixProjection(_Shape):
    """X-Fgentic-Identity for a native Matrix caller."""

    agent: AgentRef
    allowed_classifications: Classifications
    audience: Audience
    """Every effective reader, UTF-8 byte-sorted by (kind, network-or-empty, principal)."""
    delegation_id: Sha256Hex
    """The durable bridge job ID: correlation only."""
    exp: UnixSeconds
    groups: Annotated[tuple[str, ...], Field(max_length=0)]
    """Always empty in v1: Matrix authorization uses exact typed principals only."""
    iat: UnixSeconds
    kind: Literal["matrix"]
    principal: Mxid
    room: RoomRef
    v: Version


class BridgedMatrixProjection(_Shape):
    """X-Fgentic-Identity for a bridged or external-appservice caller."""

    agent: AgentRef
    allowed_classifications: Classifications
    audience: Audience
    """Every effective reader, UTF-8 byte-sorted by (kind, network-or-empty, principal)."""
    delegation_id: Sha256Hex
    exp: UnixSeconds
    groups: Annotated[tuple[str, ...], Field(max_length=0)]
    iat: UnixSeconds
    kind: Literal["bridged_matrix"]
    network: DnsLabel
    principal: Mxid
    room: RoomRef
    v: Version


class OAuthClient(_Shape):
    """The JWT-validated partner service client and its one registry entry."""

    audience: Annotated[str, Field(min_length=1, max_length=limits.MAX_ID_BYTES)]
    """Matched configured audience, at most 255 UTF-8 bytes."""
    azp: Annotated[str, Field(min_length=1, max_length=limits.MAX_ID_BYTES)]
    """Authorized party, at most 255 UTF-8 bytes."""
    issuer: Annotated[str, Field(min_length=1, max_length=limits.MAX_ISSUER_BYTES)]
    """Exact-match issuer, at most 512 UTF-8 bytes."""
    policy_id: DnsLabel


class OAuthProjection(_Shape):
    """X-Fgentic-Identity for a direct partner A2A client: no Matrix fields at all."""

    agent: AgentRef
    allowed_classifications: Classifications
    client: OAuthClient
    delegation_id: Sha256Hex
    """32 random bytes from the projector: correlation only."""
    exp: UnixSeconds
    groups: Annotated[
        tuple[PartnerGroup, ...], Field(min_length=1, max_length=limits.MAX_PARTNER_GROUPS)]
    """ASCII-sorted, unique partner/<policy_id>/<group-id> names."""
    iat: UnixSeconds
    kind: Literal["oidc_client"]
    v: Version


MatrixIdentity = Annotated[
    MatrixProjection | BridgedMatrixProjection, Field(discriminator="kind")]
Identity = Annotated[
    MatrixProjection | BridgedMatrixProjection | OAuthProjection, Field(discriminator="kind")]
AnyIdentity = MatrixProjection | BridgedMatrixProjection | OAuthProjection


class RoomContext(_Shape):
    """X-Fgentic-Room-Context: the bridge's raw room input to the local projector."""

    allowed_classifications: Classifications
    audience: Audience
    caller: Principal
    """The event sender; its principal equals the incoming X-User-Id."""
    delegation_id: Sha256Hex
    room: RoomRef
    v: Version


class CreateState(_Shape):
    event_id: EventId
    federate: bool
    """m.federate, normalised: true when absent."""


class HistoryVisibilityState(_Shape):
    event_id: EventId
    value: Literal["joined"]


class JoinRuleState(_Shape):
    event_id: EventId
    value: Literal["invite"]


class JoinedMatrix(_Shape):
    event_id: EventId
    kind: Literal["matrix"]
    principal: Mxid


class JoinedBridged(_Shape):
    event_id: EventId
    kind: Literal["bridged_matrix"]
    network: DnsLabel
    principal: Mxid


class JoinedBridgeService(_Shape):
    """A bridge-owned bot or ghost in the trusted delivery workload: never an audience entry."""

    event_id: EventId
    kind: Literal["bridge_service"]
    principal: Mxid


Joined = Annotated[
    JoinedMatrix | JoinedBridged | JoinedBridgeService, Field(discriminator="kind")]


class ServerAcl(_Shape):
    allow: Annotated[tuple[AclEntry, ...], Field(max_length=limits.MAX_ACL_ENTRIES)]
    """Sorted and deduplicated."""
    allow_ip_literals: bool
    deny: Annotated[tuple[AclEntry, ...], Field(max_length=limits.MAX_ACL_ENTRIES)]
    """Sorted and deduplicated."""
    event_id: EventId


class RoomSnapshot(_Shape):
    """The authorization-relevant room state whose JCS SHA-256 is room.state_sha256."""

    allowed_classifications: Classifications
    create: CreateState
    history_visibility: HistoryVisibilityState
    join_rule: JoinRuleState
    joined: Annotated[tuple[Joined, ...], Field(min_length=1, max_length=limits.MAX_JOINED)]
    """Every joined member, bridge services included, sorted like an audience."""
    room_id: RoomId
    server_acl: ServerAcl | None
    """Null only while every joined identity is local; never silently defaulted."""


# Validators for whole documents. Building them once keeps decoding off the schema-build path.
IDENTITY: TypeAdapter[AnyIdentity] = TypeAdapter(Identity)
MATRIX_IDENTITY: TypeAdapter[MatrixProjection | BridgedMatrixProjection] = TypeAdapter(
    MatrixIdentity)
OAUTH_IDENTITY: TypeAdapter[OAuthProjection] = TypeAdapter(OAuthProjection)
ROOM_CONTEXT: TypeAdapter[RoomContext] = TypeAdapter(RoomContext)
ROOM_SNAPSHOT: TypeAdapter[RoomSnapshot] = TypeAdapter(RoomSnapshot)

# Every name a path in a ContractError may contain (see errors._PATH and codec._path).
FIELD_NAMES: frozenset[str] = frozenset(
    name
    for model in (AgentRef, MatrixPrincipal, BridgedPrincipal, RoomRef, MatrixProjection,
                  BridgedMatrixProjection, OAuthClient, OAuthProjection, RoomContext,
                  CreateState, HistoryVisibilityState, JoinRuleState, JoinedMatrix,
                  JoinedBridged, JoinedBridgeService, ServerAcl, RoomSnapshot)
    for name in model.model_fields
)
