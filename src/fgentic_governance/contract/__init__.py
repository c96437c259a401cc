"""The ADR 0017 projection contract: shapes, strict JCS codec, semantic checks and digests.

Public surface (everything raises ContractError, whose str() is a bounded Code):

* `decode_identity(values, now=, agent=)` / `encode_identity(identity)`: X-Fgentic-Identity.
* `decode_verified_identity(values, now=, agent=)`: the same decode, returning a
  `VerifiedIdentity`, the type only a successful decode produces (what the prefilter takes).
* `decode_room_context(values, user_id=)` / `encode_room_context(context)`.
* `stamp_matrix(context, agent=, iat=)`: the projector's room context -> projection step.
* `state_sha256(snapshot)`, `oauth_user_id(client)`, `user_id(identity)`.
* `load_identity`, `load_room_context`, `load_snapshot`: the same rules for JSON documents
  that are not header values (no canonical-form or clock requirement).
"""

from fgentic_governance.contract.codec import (
    IDENTITY_HEADER,
    ROOM_CONTEXT_HEADER,
    VerifiedIdentity,
    decode_identity,
    decode_room_context,
    decode_verified_identity,
    encode_identity,
    encode_room_context,
    load_identity,
    load_room_context,
    load_snapshot,
    single_value,
)
from fgentic_governance.contract.digests import oauth_user_id, state_sha256, user_id
from fgentic_governance.contract.errors import Code, ContractError
from fgentic_governance.contract.semantics import (
    audience_from_snapshot,
    check_identity,
    check_room_context,
    check_snapshot,
)
from fgentic_governance.contract.shapes import (
    AgentRef,
    AnyIdentity,
    BridgedMatrixProjection,
    BridgedPrincipal,
    MatrixPrincipal,
    MatrixProjection,
    OAuthClient,
    OAuthProjection,
    Principal,
    RoomContext,
    RoomRef,
    RoomSnapshot,
)
from fgentic_governance.contract.stamp import stamp_matrix

__all__ = [
    "IDENTITY_HEADER",
    "ROOM_CONTEXT_HEADER",
    "AgentRef",
    "AnyIdentity",
    "BridgedMatrixProjection",
    "BridgedPrincipal",
    "Code",
    "ContractError",
    "MatrixPrincipal",
    "MatrixProjection",
    "OAuthClient",
    "OAuthProjection",
    "Principal",
    "RoomContext",
    "RoomRef",
    "RoomSnapshot",
    "VerifiedIdentity",
    "audience_from_snapshot",
    "check_identity",
    "check_room_context",
    "check_snapshot",
    "decode_identity",
    "decode_room_context",
    "decode_verified_identity",
    "encode_identity",
    "encode_room_context",
    "load_identity",
    "load_room_context",
    "load_snapshot",
    "oauth_user_id",
    "single_value",
    "stamp_matrix",
    "state_sha256",
    "user_id",
]
