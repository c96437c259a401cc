"""The contract's two digests: the room-state snapshot and the OAuth attribution user ID.

Both hash RFC 8785 bytes from the reference `rfc8785` package, so any language with a JCS
implementation reproduces them (test vector: the ADR's snapshot hashes to 58e67efe…be17).
"""

from __future__ import annotations

import hashlib

from fgentic_governance.contract import jcs, semantics
from fgentic_governance.contract.shapes import (
    AnyIdentity,
    OAuthClient,
    OAuthProjection,
    RoomSnapshot,
)


def state_sha256(snapshot: RoomSnapshot) -> str:
    """Lowercase SHA-256 of the UTF-8 JCS of the snapshot (which must be in normal form)."""
    semantics.check_snapshot(snapshot)
    return hashlib.sha256(jcs.canonical(snapshot.model_dump(mode="json"))).hexdigest()


def oauth_user_id(client: OAuthClient) -> str:
    """X-User-Id for a partner client: oidc:<policy_id>:<sha256 of JCS {issuer,audience,azp}>.

    policy_id is deliberately outside the hash: the hash names the verified token tuple, the
    prefix the registry entry that tuple mapped to.
    """
    tuple_ = {"audience": client.audience, "azp": client.azp, "issuer": client.issuer}
    return f"oidc:{client.policy_id}:{hashlib.sha256(jcs.canonical(tuple_)).hexdigest()}"


def user_id(identity: AnyIdentity) -> str:
    """The X-User-Id a projector writes beside the projection (attribution, not authority)."""
    if isinstance(identity, OAuthProjection):
        return oauth_user_id(identity.client)
    return identity.principal
