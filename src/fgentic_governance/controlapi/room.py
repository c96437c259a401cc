"""The control-room state check (ADR 0023 §19-20), as a pure function of one fresh snapshot.

Strict reading, chosen deliberately:

* room version exactly ``"12"``, join rule exactly ``invite``, history visibility exactly
  ``joined``, and no ``m.room.encryption`` state (the contract is a plaintext room);
* the identities with a ``join``, ``invite`` or ``knock`` membership are exactly the subject,
  the bridge bot and the selected Agent ghost - and all three are *joined* (an invited-only
  ghost cannot answer, an invited-only subject did not send the command);
* a server ACL must exist, allow exactly ``[<local homeserver>]`` and set
  ``allow_ip_literals`` to false. The looser reading ("no ACL while every member is local")
  is refused: an ACL-less room admits any server the moment one member invites a remote user,
  and the check here is only as fresh as its snapshot.

Every failing check is reported as one :class:`Drift` subcode; nothing from the snapshot is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from fgentic_governance.api.appservice import EMPTY, AppserviceRegistry
from fgentic_governance.contract import limits
from fgentic_governance.controlapi.codes import Drift
from fgentic_governance.controlapi.wire import AgentKey, RoomState

ROOM_VERSION = "12"
JOIN_RULE = "invite"
HISTORY_VISIBILITY = "joined"
DEFAULT_SNAPSHOT_AGE = 30.0
"""Seconds a snapshot may be old (or ahead, for clock skew); ADR 0017's skew bound."""
_PRESENT = frozenset({"join", "invite", "knock"})
_EXTRA = {"join": Drift.EXTRA_JOINED, "invite": Drift.EXTRA_INVITED,
          "knock": Drift.EXTRA_KNOCKING}
_MXID = re.compile(limits.MXID)


def server_of(mxid: str) -> str:
    """The server name of a complete MXID (everything after the first ':')."""
    return mxid.split(":", 1)[1]


@dataclass(frozen=True)
class RoomPolicy:
    """Who may be in a control room besides its subject, and how fresh a snapshot must be."""

    local_server: str
    bot_mxid: str
    ghost_template: str
    """e.g. ``@agent-{namespace}-{name}:{server}``: the bridge's ghost for an Agent."""
    max_snapshot_age: float = DEFAULT_SNAPSHOT_AGE
    appservice: AppserviceRegistry = EMPTY
    """The appservice-namespace registry (--appservice-namespaces): its MXIDs are never a
    control room's native-local subject."""

    def __post_init__(self) -> None:
        # Misconfiguration must stop the server at start-up, not weaken the check later.
        if not self.local_server or not self._local(self.bot_mxid):
            raise ValueError("bot MXID must be a complete MXID of the local homeserver")
        if not self._local(self.ghost(AgentKey(namespace="ns", name="agent"))):
            raise ValueError("ghost template must yield an MXID of the local homeserver")

    def _local(self, mxid: str) -> bool:
        return bool(_MXID.match(mxid)) and server_of(mxid) == self.local_server

    def ghost(self, agent: AgentKey) -> str:
        return self.ghost_template.format(namespace=agent.namespace, name=agent.name,
                                          server=self.local_server)


def check_room(
    state: RoomState, *, policy: RoomPolicy, subject: str, agent: AgentKey,
    control_room: str, now: float,
) -> tuple[Drift, ...]:
    """Every drift of ``state`` from the allowed control-room state; empty means allowed."""
    found: set[Drift] = set()
    if state.room_id != control_room:
        found.add(Drift.ROOM_ID_MISMATCH)
    if abs(now - state.observed_at) > policy.max_snapshot_age:
        found.add(Drift.SNAPSHOT_STALE)
    if state.room_version != ROOM_VERSION:
        found.add(Drift.ROOM_VERSION)
    if state.join_rule != JOIN_RULE:
        found.add(Drift.JOIN_RULE)
    if state.history_visibility != HISTORY_VISIBILITY:
        found.add(Drift.HISTORY_VISIBILITY)
    if state.encrypted:
        found.add(Drift.ENCRYPTED)
    found.update(_acl_drift(state, policy.local_server))
    found.update(_member_drift(state, policy, subject, policy.ghost(agent)))
    return tuple(d for d in Drift if d in found)  # Declaration order: deterministic.


def _acl_drift(state: RoomState, local: str) -> set[Drift]:
    acl = state.server_acl
    if acl is None:
        return {Drift.SERVER_ACL_MISSING}
    found: set[Drift] = set()
    if acl.allow != (local,):  # No globs, no second server: the exact local name only.
        found.add(Drift.SERVER_ACL_ALLOW)
    if acl.allow_ip_literals:
        found.add(Drift.SERVER_ACL_IP_LITERALS)
    return found


def _member_drift(state: RoomState, policy: RoomPolicy, subject: str, ghost: str) -> set[Drift]:
    found: set[Drift] = set()
    membership: dict[str, str] = {}
    for member in state.members:
        if member.user_id in membership:
            found.add(Drift.MEMBER_DUPLICATE)  # Two state events for one user: ambiguous.
        membership[member.user_id] = member.membership
    allowed = {subject, policy.bot_mxid, ghost}
    if len(allowed) < 3:  # The subject posing as the bot or ghost: no distinct human present.
        found.add(Drift.MISSING_SUBJECT)
    for user, kind in membership.items():
        if kind not in _PRESENT:
            continue
        if server_of(user) != policy.local_server:
            found.add(Drift.REMOTE_MEMBER)
        if user not in allowed or kind == "knock":
            found.add(_EXTRA[kind])
    for user, missing in ((subject, Drift.MISSING_SUBJECT), (policy.bot_mxid, Drift.MISSING_BOT),
                          (ghost, Drift.MISSING_GHOST)):
        if membership.get(user) != "join":
            found.add(missing)
    return found
