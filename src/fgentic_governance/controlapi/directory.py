"""Which MemoryScope a command is about, and the two durable facts the API records on it.

The scope is resolved from the MemoryScope objects (the API server is the source of truth for
the typed triple, purpose and last erasure), never from the request: the request only names
the sender, the Agent and the room, and must match one scope exactly.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from fgentic_governance.api.common import OriginKind
from fgentic_governance.api.memory import LastErasure, MemoryScopeSpec
from fgentic_governance.controlapi.codes import ControlError, ControlReason, Drift
from fgentic_governance.controlapi.wire import AgentKey
from fgentic_governance.memory import ScopeRecord
from fgentic_governance.reasons import Reason


@dataclass(frozen=True)
class DirectoryScope:
    """One MemoryScope as the API sees it: identity, spec and the last recorded erasure."""

    namespace: str
    name: str
    spec: MemoryScopeSpec
    last_erasure: LastErasure | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def record(self) -> ScopeRecord:
        return ScopeRecord.from_spec(self.namespace, self.name, self.spec)


class ScopeDirectory(Protocol):
    async def list_scopes(self) -> Sequence[DirectoryScope]: ...

    async def record_erasure(self, scope: DirectoryScope, erasure: LastErasure) -> None:
        """Publish a content-free erasure result as the scope's ``status.lastErasure``."""

    async def withdraw_consent(self, scope: DirectoryScope) -> None:
        """Durably withdraw the scope's consent, so the operator keeps it disabled."""


def select(scopes: Sequence[DirectoryScope], subject: str, agent: AgentKey,
           room: str) -> DirectoryScope:
    """The one scope of exactly (subject, Agent, room), or a refusal.

    No scope of this subject for this Agent is SCOPE_MISSING - the same answer whether the
    Agent has no scope at all or only another subject's, so the API is no oracle for other
    people's scopes. The subject's own scope in another room means the command did not come
    from its control room: ROOM_STATE_DRIFT/ROOM_ID_MISMATCH.
    """
    mine = [s for s in scopes if s.spec.subject.mxid == subject
            and (s.spec.agent.namespace, s.spec.agent.name) == (agent.namespace, agent.name)]
    if not mine:
        raise ControlError(Reason.SCOPE_MISSING)
    here = [s for s in mine if s.spec.control_room == room]
    if not here:
        raise ControlError(ControlReason.ROOM_STATE_DRIFT, (Drift.ROOM_ID_MISMATCH,))
    if len(here) > 1:
        raise ControlError(Reason.BINDING_CONFLICT)  # Two CRs claim one typed triple.
    scope = here[0]
    if scope.spec.subject.origin_kind is not OriginKind.NATIVE_LOCAL:
        raise ControlError(Reason.FEDERATION_DENIED)
    return scope


@dataclass
class StaticDirectory:
    """A fixed set of scopes (tests, or a deployment without API-server access)."""

    scopes: list[DirectoryScope] = field(default_factory=list)
    erasures: list[tuple[str, LastErasure]] = field(default_factory=list)
    withdrawals: list[str] = field(default_factory=list)

    async def list_scopes(self) -> Sequence[DirectoryScope]:
        return list(self.scopes)

    async def record_erasure(self, scope: DirectoryScope, erasure: LastErasure) -> None:
        self.erasures.append((scope.key, erasure))
        self.scopes = [DirectoryScope(s.namespace, s.name, s.spec, erasure) if s.key == scope.key
                       else s for s in self.scopes]

    async def withdraw_consent(self, scope: DirectoryScope) -> None:
        self.withdrawals.append(scope.key)
