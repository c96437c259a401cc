"""Request shapes of the memory control API (JSON, camelCase, strict, unknown fields refused).

Values whose *difference* from the allowed control-room state is a drift (room version, join
rule, history visibility, ACL entries, remote members) are accepted as bounded strings here
and judged in ``room``, so that drift is reported as drift and not as a malformed request.
Parsing never echoes input: ``hide_input_in_errors`` plus callers that drop the
``ValidationError`` and answer REQUEST_MALFORMED. Before pydantic sees a body, the strict JSON
reader (``strict_json.loads``) refuses what pydantic would silently accept: a duplicate name
(pydantic keeps the last one, so ``{"subject": "@bob…", …, "subject": "@alice…"}`` was served
as Alice), invalid UTF-8, non-finite numbers and deep nesting.
"""

from __future__ import annotations

from typing import Annotated, Final, Literal, TypeVar

import pydantic
from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from fgentic_governance.api.common import DNS1123_LABEL, MXID_PATTERN, ROOM_ID_PATTERN
from fgentic_governance.contract import limits
from fgentic_governance.controlapi.codes import ControlError, ControlReason
from fgentic_governance.memory.model import CONTEXT_ID, MAX_LEASE_SECONDS
from fgentic_governance.serving import strict_json

MAX_BODY_BYTES: Final = 64 * 1024
"""The largest command the models admit (64 members and 2 x 64 ACL entries, every string at
its maximum length, ASCII by pattern) is about 53 KB."""
MAX_JSON_DEPTH: Final = 8
"""The deepest command nests 4 levels (body, room, members or serverAcl, member or entry
list); anything deeper is malformed without a closer look."""
MAX_MEMBERS: Final = 64
MAX_ACL_ENTRIES: Final = 64
MAX_PAGE_SIZE: Final = 20
MAX_OFFSET: Final = 100
"""Offsets past the largest possible entry cap (100) can never name an entry."""
TOKEN_PATTERN: Final = r"^[A-Za-z0-9_-]{43}$"
"""``secrets.token_urlsafe(32)``: 32 random bytes, unpadded base64url."""
ENTRY_ID_PATTERN: Final = r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"

Subject = Annotated[str, Field(min_length=3, max_length=255, pattern=MXID_PATTERN)]
# Members may be any syntactically valid MXID (IPv6 servers included) so that a remote one is
# reported as REMOTE_MEMBER rather than as a malformed snapshot.
MemberId = Annotated[str, Field(min_length=4, max_length=255, pattern=limits.MXID)]
RoomId = Annotated[str, Field(min_length=2, max_length=255, pattern=ROOM_ID_PATTERN)]
Label = Annotated[str, Field(min_length=1, max_length=63, pattern=DNS1123_LABEL)]
Short = Annotated[str, Field(max_length=64)]
AclEntry = Annotated[str, Field(min_length=1, max_length=255, pattern=limits.ACL_ENTRY)]


class _Wire(BaseModel):
    model_config = ConfigDict(
        strict=True, extra="forbid", frozen=True, alias_generator=to_camel,
        populate_by_name=False, hide_input_in_errors=True)


class AgentKey(_Wire):
    namespace: Label
    name: Label


class Member(_Wire):
    user_id: MemberId
    membership: Literal["join", "invite", "knock", "leave", "ban"]


class ServerAcl(_Wire):
    """``m.room.server_acl`` content; absent fields must be sent explicitly (no defaults)."""

    allow: Annotated[tuple[AclEntry, ...], Field(max_length=MAX_ACL_ENTRIES)]
    deny: Annotated[tuple[AclEntry, ...], Field(max_length=MAX_ACL_ENTRIES)]
    allow_ip_literals: bool


class RoomState(_Wire):
    """The bridge's fresh snapshot of the control room's current state.

    Every field is required, ``serverAcl`` included (``null`` when the room has none), so an
    omission can never pass as the allowed value.
    """

    room_id: RoomId
    observed_at: Annotated[int, Field(ge=0, le=limits.MAX_SAFE_INTEGER)]
    """Unix seconds when the bridge read the state."""
    room_version: Short
    """``m.room.create`` content.room_version (``"1"`` when absent, as the spec says)."""
    join_rule: Short
    history_visibility: Short
    encrypted: bool
    """Whether an ``m.room.encryption`` state event exists."""
    members: Annotated[tuple[Member, ...], Field(min_length=1, max_length=MAX_MEMBERS)]
    """Every ``m.room.member`` state event (at least the joined and invited ones)."""
    server_acl: ServerAcl | None


class Command(_Wire):
    """What every call carries: the authenticated sender, the Agent and the room state."""

    subject: Subject
    """The complete MXID the bridge authenticated as the command's sender."""
    agent: AgentKey
    room: RoomState


C = TypeVar("C", bound=Command)


class InspectCommand(Command):
    # Bounded only loosely here: out-of-range values are PAGE_OUT_OF_RANGE, not malformed.
    offset: Annotated[int, Field(ge=-(2**31), le=2**31)] = 0
    limit: Annotated[int, Field(ge=-(2**31), le=2**31)] = MAX_PAGE_SIZE


class ForgetCommand(Command):
    entry_id: Annotated[str, Field(min_length=36, max_length=36, pattern=ENTRY_ID_PATTERN)]


class ConfirmableCommand(Command):
    """``forget all`` and ``off``: without a token the call only issues one."""

    confirmation_token: Annotated[str | None, Field(pattern=TOKEN_PATTERN)] = None


class LeaseCommand(Command):
    """Open a delegation lease before a turn is dispatched to a memory-enabled Agent."""

    seconds: Annotated[int, Field(ge=1, le=MAX_LEASE_SECONDS)] = MAX_LEASE_SECONDS
    delegation_id: Annotated[str | None, Field(min_length=36, max_length=36,
                                               pattern=ENTRY_ID_PATTERN)] = None
    """The bridge's id of this delegation (a lower-case UUID, one per turn): a replay of the
    body returns the same live lease instead of opening another. Optional (the first wire
    shape had none); without it every call opens a new lease, within the live-lease cap."""
    context_id: Annotated[str, Field(min_length=1, max_length=128, pattern=CONTEXT_ID)]
    """The A2A ``contextId`` the bridge sends the turn with: its one context per (room,
    ghost). Required: the memory API admits the lease's memory calls only while this context
    alone of the (subject, Agent) is in progress (sql/0021, CONTEXT_CONFLICT), so a turn of
    the same person in another room gets none of it. A replay must name the same one."""


class LeaseCloseCommand(_Wire):
    """Close a lease when the delegation ends. No room snapshot: closing only takes away, so
    it must work even after the room drifted."""

    subject: Subject
    agent: AgentKey
    room_id: RoomId
    lease_id: Annotated[str, Field(min_length=36, max_length=36, pattern=ENTRY_ID_PATTERN)]


W = TypeVar("W", bound=_Wire)


def parse(model: type[W], body: bytes) -> W:
    """The validated command, or REQUEST_MALFORMED.

    Raised after the ``except`` block, so the refusal carries no ``__context__``: the
    validation error (whose location list names the offending field) is dropped entirely.
    """
    try:
        strict_json.loads(body, max_depth=MAX_JSON_DEPTH)  # Strict syntax first (module doc).
        return model.model_validate_json(body)
    except (strict_json.Refused, pydantic.ValidationError, ValueError):
        pass
    raise ControlError(ControlReason.REQUEST_MALFORMED)
