"""The per-request gate and the three memory calls, independent of HTTP (pure core).

Order of every call: the caller is the token's Agent (``X-Agent-Name`` and every body
``agent_name`` must be its ``app_name``); the subject is ``X-User-Id``, a complete MXID of the
local homeserver that every body ``user_id`` repeats; the request's shape and the write
policy hold; cost is admitted and committed; only then the fenced read or write, which the
database runs only inside the one live lease of (subject, Agent). A refusal is a 4xx/5xx with
a bounded code; a search that is refused is never an empty 200 (the runtime would log the
query at WARNING when nothing is found).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from fgentic_governance.api.appservice import EMPTY, AppserviceRegistry
from fgentic_governance.api.kagent import AgentRef
from fgentic_governance.contract import limits
from fgentic_governance.memory.bounds import MAX_SUMMARY_FACTS
from fgentic_governance.memory.delegated import Caller, CheckedFact, Fact, Found, check_fact
from fgentic_governance.memory.errors import StoreRefusal
from fgentic_governance.memory.model import (
    ConfirmationStatus,
    Embedding,
    Envelope,
    Operation,
    RecentUsers,
    Sighting,
    SourceKind,
    WriteReason,
)
from fgentic_governance.memoryapi.codes import ApiError, ApiReason
from fgentic_governance.memoryapi.wire import SaveItem, Search
from fgentic_governance.reasons import Reason

_MXID = re.compile(limits.MXID)
TOOL_SAVE = Envelope(source_kind=SourceKind.SAVE_MEMORY_TOOL,
                     write_reason=WriteReason.EXPLICIT_USER_REQUEST,
                     confirmation_status=ConfirmationStatus.MODEL_INFERRED)
AUTOMATIC_SAVE = Envelope(source_kind=SourceKind.AUTOMATIC_SUMMARY,
                          write_reason=WriteReason.AUTOMATIC_SUMMARY,
                          confirmation_status=ConfirmationStatus.MODEL_INFERRED)


class Store(Protocol):
    """The part of ``DelegatedStore`` the API uses."""

    async def admit(self, caller: Caller, items: Mapping[Operation, int], *,
                    explicit: bool = ..., bound: bool = ...) -> bool: ...
    async def save_checked(self, caller: Caller, rows: Sequence[CheckedFact],
                           envelope: Envelope) -> list[str]: ...
    async def search(self, caller: Caller, vector: Embedding, *, limit: int,
                     min_score: float) -> list[Found]: ...
    async def admit_embedding(self, agent_namespace: str, agent_name: str,
                              seen: RecentUsers) -> None: ...
    async def admit_summary(self, agent_namespace: str, agent_name: str,
                            input_bytes: int, seen: RecentUsers) -> None: ...
    async def note_activity(self, agent_namespace: str, agent_name: str,
                            users: Sequence[str]) -> None: ...
    async def note_context(self, agent_namespace: str, agent_name: str, user: str,
                           seen: Sighting) -> None: ...


@dataclass(frozen=True)
class Reply:
    status: int
    body: Any


@dataclass(frozen=True)
class Request:
    """What the shell extracted: the token's Agent and the two runtime headers."""

    agent: AgentRef
    agent_header: str | None
    user_header: str | None


async def _store(work: Any) -> Any:
    try:
        return await work
    except StoreRefusal as refusal:
        reason = refusal.reason
    raise ApiError(reason)


class MemoryApi:
    def __init__(self, store: Store, local_server: str,
                 appservice: AppserviceRegistry = EMPTY) -> None:
        self.store = store
        self.local_server = local_server
        self.appservice = appservice
        """The appservice-namespace registry (--appservice-namespaces)."""

    def caller(self, request: Request, bodies: Sequence[SaveItem | Search]) -> Caller:
        """The gate before any work: same Agent everywhere, one local subject everywhere."""
        expected = request.agent.app_name
        if request.agent_header != expected or any(b.agent_name != expected for b in bodies):
            raise ApiError(ApiReason.AGENT_MISMATCH)
        subject = request.user_header
        if not subject:
            raise ApiError(ApiReason.USER_MISSING)
        if any(b.user_id != subject for b in bodies):
            raise ApiError(ApiReason.USER_MISMATCH)
        if not _MXID.fullmatch(subject):
            raise ApiError(ApiReason.USER_MISMATCH)
        if subject.split(":", 1)[1] != self.local_server:
            raise ApiError(Reason.FEDERATION_DENIED)  # ADR 0023 §30: native local only
        if self.appservice.holds(subject):  # a bridged puppet, even with a lease (§31)
            raise ApiError(Reason.APPSERVICE_IDENTITY_DENIED)
        return Caller(subject, request.agent.namespace, request.agent.name)

    async def save(self, request: Request, item: SaveItem) -> Reply:
        """``save_memory``: one explicit save (the sender/Agent bucket applies)."""
        caller = self.caller(request, [item])
        fact = _fact(item)
        await _store(self.store.admit(
            caller, {Operation.SAVE: 1, Operation.EMBEDDING: 1}, explicit=True, bound=True))
        [entry_id] = await _store(self.store.save_checked(caller, [fact], TOOL_SAVE))
        return Reply(201, {"id": entry_id})

    async def save_batch(self, request: Request, items: Sequence[SaveItem]) -> Reply:
        """The automatic save: one summarisation and one save and embedding per item."""
        caller = self.caller(request, items)
        if len(items) > MAX_SUMMARY_FACTS:  # ADR 0023 §43, before any cost
            raise ApiError(Reason.SUMMARY_TOO_LARGE)
        facts = [_fact(item) for item in items]
        n = len(facts)
        await _store(self.store.admit(
            caller, {Operation.SUMMARIZE: 1, Operation.SAVE: n, Operation.EMBEDDING: n},
            bound=True))
        ids = await _store(self.store.save_checked(caller, facts, AUTOMATIC_SAVE))
        return Reply(201, {"count": len(ids)})

    async def search(self, request: Request, query: Search) -> Reply:
        """``load_memory`` and the first turn's prefetch: each is one load and one embedding
        against the hourly ceiling and one of the lease's eight recalls. The request cannot
        tell them apart; bound to its lease's context (sql/0021), a search while that context
        has an outstanding ``load_memory`` call is the tool's and also takes §42's explicit
        token (six per minute, burst three, shared with explicit saves)."""
        caller = self.caller(request, [query])
        await _store(self.store.admit(caller, {Operation.LOAD: 1, Operation.EMBEDDING: 1},
                                      bound=True))
        found = await _store(self.store.search(caller, query.embedding, limit=query.limit,
                                               min_score=query.min_score))
        return Reply(200, [{"id": f.id, "content": f.content, "score": f.score,
                            "metadata": {}, "created_at": _rfc3339(f)} for f in found])


    async def admit_embedding(self, agent: AgentRef, seen: RecentUsers) -> None:
        """Before the runtime's embeddings request reaches the provider (ADR 0023 §42), charged
        to the live delegation of the one user the Agent's Pods served lately, or refused.
        The request names no user (kagent's embeddings client sends the provider's key and no
        X-User-Id): ``seen`` is what this replica saw (:mod:`activity`), and the store adds
        every replica's notes (sql/0019) before it charges (sql/0016, sql/0018). A refused
        embedding fails that memory call only: the runtime still answers the turn without
        memory."""
        await _store(self.store.admit_embedding(agent.namespace, agent.name, seen))

    async def admit_summary(self, agent: AgentRef, input_bytes: int,
                            seen: RecentUsers) -> None:
        """Before kagent's summarisation reaches the model (ADR 0023 §42-43): like an
        embedding, charged to the attributed user's live delegation or refused, its
        conversation at most 16 KiB (SUMMARY_INPUT_TOO_LARGE), at most one per
        ``minUserTurns`` leases (SUMMARY_CADENCE_REACHED, the automatic save that follows
        takes this turn). A refused summary fails the automatic save only; the store decides
        (sql/0013, sql/0016)."""
        await _store(self.store.admit_summary(agent.namespace, agent.name, input_bytes, seen))

    async def note_activity(self, agent: AgentRef, users: Sequence[str]) -> None:
        """Share with every replica that ``agent``'s Pods named ``users`` (sql/0019)."""
        await _store(self.store.note_activity(agent.namespace, agent.name, users))

    async def note_context(self, agent: AgentRef, user: str, seen: Sighting) -> None:
        """Share with every replica, before the call is relayed, what ``agent``'s Pod said
        about one of ``user``'s A2A contexts (sql/0021); a failure is the caller's refusal."""
        await _store(self.store.note_context(agent.namespace, agent.name, user, seen))


def _fact(item: SaveItem) -> CheckedFact:
    """The write policy, size and vector checks, before any budget is spent."""
    try:
        return check_fact(Fact(item.content, item.embedding, item.ttl_days))
    except StoreRefusal as refusal:
        reason = refusal.reason
    raise ApiError(reason)


def _rfc3339(found: Found) -> str:
    return found.created_at.isoformat().replace("+00:00", "Z")
