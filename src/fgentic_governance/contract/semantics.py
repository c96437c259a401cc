"""Cross-field rules of ADR 0017 that JSON Schema cannot express, checked on validated models.

Together with the generated schemas (per-field rules) these are the whole contract: a document
is valid exactly when its schema accepts it and these checks pass. All raise ContractError.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from typing import Any, Protocol, TypeVar

from fgentic_governance.contract import limits
from fgentic_governance.contract.errors import Code, ContractError
from fgentic_governance.contract.shapes import (
    AnyIdentity,
    BridgedMatrixProjection,
    BridgedPrincipal,
    JoinedBridged,
    JoinedBridgeService,
    JoinedMatrix,
    MatrixPrincipal,
    MatrixProjection,
    OAuthClient,
    OAuthProjection,
    Principal,
    RoomContext,
    RoomSnapshot,
)

SortKey = tuple[bytes, bytes, bytes]


class _Ordered(Protocol):
    def __lt__(self, other: Any, /) -> bool: ...


_K = TypeVar("_K", bound=_Ordered)


def sort_key(entry: Principal | JoinedMatrix | JoinedBridged | JoinedBridgeService) -> SortKey:
    """UTF-8 bytes of (kind, network-or-empty, principal): the audience and joined order."""
    network = entry.network if isinstance(entry, BridgedPrincipal | JoinedBridged) else ""
    return entry.kind.encode(), network.encode(), entry.principal.encode()


def _strictly_increasing(keys: Sequence[_K]) -> bool:
    # Sorted and free of duplicates in one pass; keys are bytes or tuples of bytes.
    return all(a < b for a, b in itertools.pairwise(keys))


def caller_of(identity: MatrixProjection | BridgedMatrixProjection) -> Principal:
    """The top-level caller of a Matrix projection as a typed audience entry."""
    # model_construct: the values come from an already validated model, and a semantic check
    # must never raise pydantic's own error type.
    if isinstance(identity, BridgedMatrixProjection):
        return BridgedPrincipal.model_construct(
            kind="bridged_matrix", network=identity.network, principal=identity.principal)
    return MatrixPrincipal.model_construct(kind="matrix", principal=identity.principal)


def _caller_key(identity: MatrixProjection | BridgedMatrixProjection) -> SortKey:
    # The caller's sort key without building a model: this runs on every retrieval call.
    network = identity.network if isinstance(identity, BridgedMatrixProjection) else ""
    return identity.kind.encode(), network.encode(), identity.principal.encode()


def check_audience(audience: Sequence[Principal], caller: Principal | SortKey) -> None:
    """1-16 entries, byte-sorted, unique, one kind per MXID, and the caller among them."""
    keys = [sort_key(e) for e in audience]
    if not 1 <= len(keys) <= limits.MAX_AUDIENCE or not _strictly_increasing(keys):
        raise ContractError(Code.AUDIENCE_INVALID, "audience")
    # An MXID resolves to exactly one kind; two typed entries for it would be contradictory.
    if len({key[2] for key in keys}) != len(keys):
        raise ContractError(Code.AUDIENCE_INVALID, "audience")
    if (caller if isinstance(caller, tuple) else sort_key(caller)) not in keys:
        raise ContractError(Code.AUDIENCE_INVALID, "audience")


def check_lifetime(iat: int, exp: int) -> None:
    if not 1 <= exp - iat <= limits.MAX_LIFETIME_SECONDS:
        raise ContractError(Code.LIFETIME_INVALID, "exp")


def check_window(iat: int, exp: int, *, now: int) -> None:
    """Lifetime, then at most 30 s of positive skew, then expiry (now >= exp fails)."""
    check_lifetime(iat, exp)
    if iat > now + limits.CLOCK_SKEW_SECONDS:
        raise ContractError(Code.NOT_YET_VALID, "iat")
    if now >= exp:
        raise ContractError(Code.EXPIRED, "exp")


def _check_utf8_bytes(client: OAuthClient) -> None:
    # The schema bounds characters; the ADR bounds UTF-8 bytes, which only Python can count.
    for name, limit in (("audience", limits.MAX_ID_BYTES), ("azp", limits.MAX_ID_BYTES),
                        ("issuer", limits.MAX_ISSUER_BYTES)):
        if len(getattr(client, name).encode("utf-8", "surrogatepass")) > limit:
            raise ContractError(Code.SHAPE_INVALID, f"client.{name}")


def check_partner_groups(groups: Sequence[str], policy_id: str) -> None:
    """ASCII-sorted, unique, and every group in this client's own partner/<policy_id>/ space."""
    if not _strictly_increasing([g.encode() for g in groups]):
        raise ContractError(Code.GROUPS_INVALID, "groups")
    prefix = f"partner/{policy_id}/"
    if not all(g.startswith(prefix) for g in groups):
        raise ContractError(Code.GROUPS_INVALID, "groups")


def check_static(identity: AnyIdentity) -> None:
    """Every cross-field rule except the clock: what a projector must hold before encoding."""
    check_lifetime(identity.iat, identity.exp)
    if isinstance(identity, OAuthProjection):
        _check_utf8_bytes(identity.client)
        check_partner_groups(identity.groups, identity.client.policy_id)
    else:
        check_audience(identity.audience, _caller_key(identity))


def check_identity(identity: AnyIdentity, *, now: int) -> None:
    """All cross-field rules of a projection, including its validity window at `now`."""
    check_static(identity)
    check_window(identity.iat, identity.exp, now=now)


def check_room_context(context: RoomContext, *, user_id: str | None = None) -> None:
    """Audience rules with the caller; the caller must be the incoming X-User-Id if given."""
    check_audience(context.audience, context.caller)
    if user_id is not None and context.caller.principal != user_id:
        raise ContractError(Code.CALLER_MISMATCH, "caller.principal")


def _sorted_unique(values: Iterable[str]) -> bool:
    return _strictly_increasing([v.encode() for v in values])


def check_snapshot(snapshot: RoomSnapshot, *, local_server: str | None = None) -> None:
    """Joined order and uniqueness, ACL normal form, and (given the local homeserver name)
    the rule that a null ACL is allowed only while every native member is local."""
    if not _strictly_increasing([sort_key(m) for m in snapshot.joined]):
        raise ContractError(Code.SNAPSHOT_INVALID, "joined")
    if len({m.principal for m in snapshot.joined}) != len(snapshot.joined):
        raise ContractError(Code.SNAPSHOT_INVALID, "joined")
    acl = snapshot.server_acl
    if acl is not None:
        if not _sorted_unique(acl.allow):
            raise ContractError(Code.SNAPSHOT_INVALID, "server_acl.allow")
        if not _sorted_unique(acl.deny):
            raise ContractError(Code.SNAPSHOT_INVALID, "server_acl.deny")
    elif local_server is not None:
        for member in snapshot.joined:
            if isinstance(member, JoinedMatrix) and _server(member.principal) != local_server:
                raise ContractError(Code.SNAPSHOT_INVALID, "server_acl")


def _server(mxid: str) -> str:
    return mxid.split(":", 1)[1]


def audience_from_snapshot(snapshot: RoomSnapshot) -> tuple[Principal, ...]:
    """The effective output audience: every joined identity except bridge services.

    The bridge recomputes this before every delivery and compares it with the projection's
    audience; joined order is audience order, so filtering keeps it sorted.
    """
    check_snapshot(snapshot)
    audience: list[Principal] = []
    for member in snapshot.joined:
        # model_construct: a joined entry and an audience entry share their field types, so
        # these values are already validated (and no pydantic error can escape from here).
        if isinstance(member, JoinedBridged):
            audience.append(BridgedPrincipal.model_construct(
                kind="bridged_matrix", network=member.network, principal=member.principal))
        elif isinstance(member, JoinedMatrix):
            audience.append(MatrixPrincipal.model_construct(
                kind="matrix", principal=member.principal))
    if not 1 <= len(audience) <= limits.MAX_AUDIENCE:
        raise ContractError(Code.AUDIENCE_INVALID, "audience")
    return tuple(audience)
