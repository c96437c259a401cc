"""The ``!memory`` contract (ADR 0023 §13-20) over the fenced store, independent of HTTP.

Every command is admitted the same way, in this order: the subject is a local MXID; exactly
one MemoryScope has (subject, Agent, room); the room snapshot shows the allowed control-room
state; the store's durable scope record supplies the current consent generation. Only then
does a store operation run, and the store's own fence checks subject, Agent, room and
generation once more. Content leaves only in ``inspect``'s ``entries[].text``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol, TypeVar

from fgentic_governance.api.memory import LastErasure, Posture
from fgentic_governance.controlapi.codes import ControlError, ControlReason
from fgentic_governance.controlapi.confirm import Action, Binding, ConfirmationBook
from fgentic_governance.controlapi.directory import DirectoryScope, ScopeDirectory, select
from fgentic_governance.controlapi.room import RoomPolicy, check_room, server_of
from fgentic_governance.controlapi.wire import (
    MAX_OFFSET,
    MAX_PAGE_SIZE,
    Command,
    ConfirmableCommand,
    ForgetCommand,
    InspectCommand,
    LeaseCloseCommand,
    LeaseCommand,
)
from fgentic_governance.memory import (
    Access,
    Entry,
    ErasureReceipt,
    Lease,
    ScopeState,
    StoreRefusal,
)
from fgentic_governance.reasons import Reason

log = logging.getLogger("fgentic_governance.controlapi")
T = TypeVar("T")


class ControlStore(Protocol):
    """The part of ``MemoryStore`` the control API uses."""

    async def scope_state(self, scope_key: str) -> ScopeState: ...
    async def latest_expiry(self, scope_key: str) -> datetime | None: ...
    async def list_entries(self, access: Access, *, limit: int = ...,
                           offset: int = ...) -> list[Entry]: ...
    async def readable_count(self, access: Access) -> int: ...
    async def forget_entry(self, access: Access, entry_id: str) -> ErasureReceipt: ...
    async def erase_scope(self, scope_key: str) -> ErasureReceipt: ...
    async def withdraw(self, scope_key: str) -> ErasureReceipt: ...
    async def open_lease(self, access: Access, seconds: int,
                         delegation_id: str | None = None, *,
                         context_id: str) -> Lease: ...
    async def close_lease(self, scope_key: str, lease_id: str) -> bool: ...


@dataclass(frozen=True)
class Reply:
    """An HTTP-independent answer: status, JSON body, and opaque ids for the log line."""

    status: int
    body: dict[str, Any]
    receipt_id: str = ""


@dataclass(frozen=True)
class Admitted:
    scope: DirectoryScope
    state: ScopeState
    access: Access


def iso(value: datetime | None) -> str | None:
    if value is None:
        return None
    return value.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _receipt(receipt: ErasureReceipt) -> dict[str, Any]:
    return {"id": receipt.id, "kind": receipt.kind.value, "generation": receipt.generation,
            "result": receipt.result.value, "reasonCode": receipt.reason.value,
            "time": iso(receipt.time), "deleted": receipt.deleted}


def _last_erasure(value: LastErasure | None) -> dict[str, Any] | None:
    if value is None:
        return None
    return {"time": iso(value.time), "result": value.result.value,
            "reasonCode": value.reason_code, "receiptId": value.receipt_id}


async def _store(work: Awaitable[T]) -> T:
    """Await a store call; a refusal becomes a ControlError with the same bare code."""
    try:
        return await work
    except StoreRefusal as refusal:
        reason = refusal.reason
    raise ControlError(reason)


class ControlService:
    def __init__(
        self, store: ControlStore, directory: ScopeDirectory, policy: RoomPolicy,
        confirmations: ConfirmationBook,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.directory = directory
        self.policy = policy
        self.confirmations = confirmations
        self._now = wall_clock

    async def admit(self, command: Command) -> Admitted:
        if server_of(command.subject) != self.policy.local_server:
            raise ControlError(Reason.FEDERATION_DENIED)  # ADR 0023 §30: native local only.
        if self.policy.appservice.holds(command.subject):  # a bridged puppet (ADR 0023 §31)
            raise ControlError(Reason.APPSERVICE_IDENTITY_DENIED)
        scopes: Sequence[DirectoryScope] = await self.directory.list_scopes()
        scope = select(scopes, command.subject, command.agent, command.room.room_id)
        drift = check_room(command.room, policy=self.policy, subject=command.subject,
                           agent=command.agent, control_room=scope.spec.control_room,
                           now=self._now())
        if drift:
            raise ControlError(ControlReason.ROOM_STATE_DRIFT, drift)
        state = await _store(self.store.scope_state(scope.key))
        return Admitted(scope, state, _access(scope, state))

    # -- content-free ----------------------------------------------------------------------

    async def status(self, command: Command) -> Reply:
        adm = await self.admit(command)
        spec, state = adm.scope.spec, adm.state
        expiry = await _store(self.store.latest_expiry(adm.scope.key))
        return Reply(200, {"reason": Reason.OK.value, "status": {
            "enabled": state.enabled and state.posture is not Posture.FULLY_DISABLED,
            "posture": state.posture.value,
            "purpose": spec.purpose,
            "policyVersion": spec.policy_version,
            "consentGeneration": state.consent_generation,
            "hardExpiry": iso(expiry),
            "maxRetentionDays": state.max_retention_days,
            "entryCap": state.entry_cap,
            "entryCount": state.entry_count,
            "lastErasure": _last_erasure(adm.scope.last_erasure),
        }})

    # -- content-bearing -------------------------------------------------------------------

    async def inspect(self, command: InspectCommand) -> Reply:
        if not (1 <= command.limit <= MAX_PAGE_SIZE and 0 <= command.offset < MAX_OFFSET):
            raise ControlError(ControlReason.PAGE_OUT_OF_RANGE)
        adm = await self.admit(command)
        total = await _store(self.store.readable_count(adm.access))
        # One extra row says whether a next page exists without a second count.
        rows = await _store(self.store.list_entries(
            adm.access, limit=command.limit + 1, offset=command.offset))
        page, more = rows[:command.limit], len(rows) > command.limit
        following = command.offset + command.limit
        return Reply(200, {
            "reason": Reason.OK.value,
            "entries": [{"id": e.id, "text": e.content, "sourceScope": adm.scope.key,
                         "createdAt": iso(e.created_at), "expiresAt": iso(e.expires_at)}
                        for e in page],
            "offset": command.offset,
            "limit": command.limit,
            "total": total,
            "nextOffset": following if more and following < MAX_OFFSET else None,
        })

    # -- delegation leases: the memory API serves a scope only under a live one ------------

    async def open_lease(self, command: LeaseCommand) -> Reply:
        """A lease on the sender's scope, after the same room-state check as every command;
        the memory API serves the runtime's calls for (subject, Agent) only while it lives."""
        adm = await self.admit(command)
        lease = await _store(self.store.open_lease(adm.access, command.seconds,
                                                   command.delegation_id,
                                                   context_id=command.context_id))
        return Reply(201, {"reason": Reason.OK.value, "lease": {
            "id": lease.id, "expiresAt": iso(lease.expires_at),
            "consentGeneration": lease.generation}})

    async def close_lease(self, command: LeaseCloseCommand) -> Reply:
        """Idempotent; no room-state check (closing only takes away)."""
        scopes = await self.directory.list_scopes()
        scope = select(scopes, command.subject, command.agent, command.room_id)
        closed = await _store(self.store.close_lease(scope.key, command.lease_id))
        return Reply(200, {"reason": Reason.OK.value, "closed": closed})

    # -- erasure ---------------------------------------------------------------------------

    async def forget(self, command: ForgetCommand) -> Reply:
        adm = await self.admit(command)
        receipt = await _store(self.store.forget_entry(adm.access, command.entry_id))
        return await self._erased(adm.scope, receipt)

    async def forget_all(self, command: ConfirmableCommand) -> Reply:
        return await self._confirmed(command, Action.FORGET_ALL)

    async def off(self, command: ConfirmableCommand) -> Reply:
        return await self._confirmed(command, Action.OFF)

    async def _confirmed(self, command: ConfirmableCommand, action: Action) -> Reply:
        adm = await self.admit(command)
        binding = Binding(adm.scope.key, action, command.subject,
                          f"{command.agent.namespace}/{command.agent.name}",
                          command.room.room_id, adm.state.consent_generation)
        if command.confirmation_token is None:
            issued = await _store(self.confirmations.issue(binding))
            return Reply(202, {"reason": ControlReason.CONFIRMATION_REQUIRED.value,
                               "confirmation": {"action": action.value, "token": issued.token,
                                                "expiresInSeconds": self.confirmations.ttl}})
        await _store(self.confirmations.redeem(command.confirmation_token, binding))
        if action is Action.OFF:
            # Durable first: the operator obeys the ConsentRecord, so withdrawing only in the
            # store would be undone by its next reconcile. Then fence, delete and verify now.
            await self.directory.withdraw_consent(adm.scope)
            receipt = await _store(self.store.withdraw(adm.scope.key))
            return await self._erased(adm.scope, receipt, Reason.CONSENT_WITHDRAWN)
        receipt = await _store(self.store.erase_scope(adm.scope.key))
        return await self._erased(adm.scope, receipt)

    async def _erased(self, scope: DirectoryScope, receipt: ErasureReceipt,
                      cause: Reason = Reason.OK) -> Reply:
        """``cause``: why the scope was erased, for its status (docs/crd-reference.md): OK
        for a forget under standing consent, CONSENT_WITHDRAWN for ``off``."""
        try:
            await self.directory.record_erasure(scope, receipt.last_erasure(cause))
        except ControlError as refused:
            # The erasure happened and its receipt is returned; only the status echo failed.
            log.warning("control erasure_status_unrecorded reason=%s receipt=%s",
                        refused.code.value, receipt.id)
        ok = receipt.verified
        return Reply(200 if ok else 500, {
            "reason": (Reason.OK if ok else receipt.reason).value, "receipt": _receipt(receipt),
        }, receipt_id=receipt.id)


def _access(scope: DirectoryScope, state: ScopeState) -> Access:
    return Access.for_scope(scope.record(), state.consent_generation)
