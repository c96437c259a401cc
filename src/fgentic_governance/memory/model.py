"""Typed values of the content store: envelope enums, scope records, access contexts, receipts.

Every value that could hold memory content keeps it out of ``repr()``, so an accidental log of
an entry shows its opaque id and envelope only.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Final

from fgentic_governance.api import memory as api
from fgentic_governance.api.memory import ErasureResult, LastErasure, Posture, RecallPolicy
from fgentic_governance.memory.errors import StoreRefusal
from fgentic_governance.reasons import Reason

if TYPE_CHECKING:
    from fgentic_governance.api.memory import MemoryScopeSpec

EMBEDDING_DIMENSIONS = 768
"""kagent v0.9.11's memory.embedding is vector(768)."""
FLOAT4_MAX: Final = 3.4028235e38
"""The largest component magnitude pgvector stores: ``strtof`` rounds it to float4's maximum,
anything larger is infinite there and the whole statement fails ("out of range")."""


def storable(vector: Sequence[float]) -> bool:
    """Every component a finite number within float4's range. The norm bounds every component
    and is NaN or infinite when one is (one C-level pass, ~8 us for 768: less than the
    ``isfinite`` pass it replaces); only a vector whose norm is beyond it is checked one by
    one."""
    if math.hypot(*vector) <= FLOAT4_MAX:
        return True
    return all(map(math.isfinite, vector)) and max(map(abs, vector)) <= FLOAT4_MAX


# The envelope's enums are API types since a scope's recall policy names them (sql/0022);
# the store's code keeps naming them here, with its other typed values.
MemoryType = api.MemoryType
SourceKind = api.SourceKind
ConfirmationStatus = api.ConfirmationStatus
Sensitivity = api.Sensitivity


class WriteReason(StrEnum):
    EXPLICIT_USER_REQUEST = "explicit_user_request"
    USER_PREFERENCE_EXTRACTED = "user_preference_extracted"
    AUTOMATIC_SUMMARY = "automatic_summary"
    TASK_CHECKPOINT = "task_checkpoint"
    UNSPECIFIED = "unspecified"


class Lifecycle(StrEnum):
    ACTIVE = "active"
    STALE = "stale"
    SUPERSEDED = "superseded"
    SUPPRESSED = "suppressed"


class Operation(StrEnum):
    """Cost-admission operation types (ADR 0023 §42); each consumes the hourly ceiling."""

    SAVE = "save"
    LOAD = "load"
    PREFETCH = "prefetch"
    SUMMARIZE = "summarize"
    EMBEDDING = "embedding"


@dataclass(frozen=True, slots=True)
class Envelope:
    """Content-free description of a stored fact (type, provenance, confirmation, class)."""

    memory_type: MemoryType = MemoryType.FACT
    source_kind: SourceKind = SourceKind.UNKNOWN
    write_reason: WriteReason = WriteReason.UNSPECIFIED
    confirmation_status: ConfirmationStatus = ConfirmationStatus.UNKNOWN
    sensitivity: Sensitivity = Sensitivity.NORMAL


DEFAULT_ENVELOPE: Final = Envelope()


@dataclass(frozen=True, slots=True)
class ScopeRecord:
    """The durable scope record the operator keeps in the content store."""

    scope_key: str
    """``<namespace>/<name>`` of the MemoryScope."""
    subject_mxid: str
    origin_kind: str
    agent_namespace: str
    agent_name: str
    control_room: str
    entry_cap: int = 100
    max_fact_bytes: int = 512
    max_retention_days: int = 7
    hourly_operation_ceiling: int = 60
    explicit_per_minute: int = 6
    explicit_burst: int = 3
    max_recalls: int = 8
    """Searches one lease admits (policy.prefetch.maxSubqueries; sql/0011)."""
    max_summary_facts: int = 10
    """Facts one automatic save may carry (policy.automaticSave.maxFacts; sql/0011)."""
    min_user_turns: int = 5
    """Leases (turns) per automatic save (policy.automaticSave.minUserTurns; sql/0011)."""
    store_agent_name: str = ""
    """agent_name spelling of this Agent's rows in the store; empty means ``<ns>/<name>``."""
    recall: RecallPolicy = field(default_factory=RecallPolicy)
    """Which rows may enter recall (policy.recall; sql/0022 applies it in the read view)."""

    @property
    def effective_store_agent_name(self) -> str:
        return self.store_agent_name or f"{self.agent_namespace}/{self.agent_name}"

    @classmethod
    def from_spec(cls, namespace: str, name: str, spec: MemoryScopeSpec) -> ScopeRecord:
        policy = spec.policy
        return cls(
            scope_key=f"{namespace}/{name}",
            subject_mxid=spec.subject.mxid,
            origin_kind=spec.subject.origin_kind.value,
            agent_namespace=spec.agent.namespace,
            agent_name=spec.agent.name,
            control_room=spec.control_room,
            entry_cap=policy.entry_cap,
            max_fact_bytes=policy.max_fact_bytes,
            max_retention_days=policy.max_retention_days,
            hourly_operation_ceiling=policy.hourly_operation_ceiling,
            explicit_per_minute=policy.explicit_operations.per_minute,
            explicit_burst=policy.explicit_operations.burst,
            max_recalls=policy.prefetch.max_subqueries,
            max_summary_facts=policy.automatic_save.max_facts,
            min_user_turns=policy.automatic_save.min_user_turns,
            recall=policy.recall,
        )

    def recall_params(self) -> RecallColumns:
        """The scope's recall columns (sql/0022): each set as text, the age in seconds."""
        return recall_columns(self.recall)


RecallColumns = tuple[list[str] | None, list[str] | None, list[str] | None, list[str] | None,
                      int | None]


def recall_columns(policy: RecallPolicy) -> RecallColumns:
    """A recall policy as the store's five recall_* columns (a scope's, sql/0022, or a posture
    floor's, sql/0023): each set as text, the age in seconds; None does not narrow."""
    def values(chosen: Sequence[StrEnum] | None) -> list[str] | None:
        return None if chosen is None else [value.value for value in chosen]

    return (values(policy.memory_types), values(policy.source_kinds),
            values(policy.confirmation_statuses), values(policy.sensitivities),
            None if policy.max_age_hours is None else policy.max_age_hours * 3600)


@dataclass(frozen=True, slots=True)
class ScopeState:
    """Content-free state of a scope: consent, posture, generation, bounds and row count."""

    scope_key: str
    enabled: bool
    posture: Posture
    consent_generation: int
    entry_cap: int
    max_fact_bytes: int
    max_retention_days: int
    hourly_operation_ceiling: int
    entry_count: int
    held: bool = False
    """An erasure started and was not verified: every gate refuses the scope until it is."""
    recall_withheld: tuple[tuple[Reason, int], ...] = ()
    """Readable rows the recall policy withholds, by code (sql/0022 ``recall_withheld``)."""


@dataclass(frozen=True, slots=True)
class Access:
    """One request's claim: this principal, via this Agent, in this room, at this generation.

    The database compares every field with the scope record; any mismatch fails closed.
    """

    scope_key: str
    generation: int
    subject_mxid: str
    agent_namespace: str
    agent_name: str
    room: str

    @classmethod
    def for_scope(cls, record: ScopeRecord, generation: int) -> Access:
        return cls(record.scope_key, generation, record.subject_mxid, record.agent_namespace,
                   record.agent_name, record.control_room)

    def at(self, generation: int) -> Access:
        return Access(self.scope_key, generation, self.subject_mxid, self.agent_namespace,
                      self.agent_name, self.room)

    def params(self) -> tuple[str, int, str, str, str, str]:
        return (self.scope_key, self.generation, self.subject_mxid, self.agent_namespace,
                self.agent_name, self.room)


@dataclass(frozen=True, slots=True)
class Lease:
    """A delegation lease (sql/0008): one scope, one generation, at most 540 s."""

    id: str
    expires_at: datetime
    generation: int


MAX_LEASE_SECONDS: Final = 540
"""ADR 0023's delegation ceiling; the database refuses a longer lease too."""
MAX_LIVE_LEASES: Final = 8
"""Leases of one (subject, Agent) alive at once; the database's ``max_live_leases()`` (sql/0010)
refuses another with LEASE_LIMIT_REACHED (a test holds the two equal)."""
MAX_RECALLS_PER_LEASE: Final = 8
"""Searches one lease admits (ADR 0023 §43: at most eight prefetch subqueries per new session,
and a lease is one turn); the database's ``max_recalls_per_lease()`` (sql/0011) refuses the
next with RECALL_LIMIT_REACHED (a test holds the two equal)."""
MAX_NOTED_USERS: Final = 16
"""Users of one Agent a memory API replica keeps, and notes or counts in one call; the
database's ``max_noted_users()`` (sql/0019) refuses more (a test holds the two equal)."""
CONTEXT_ID: Final = r"^[A-Za-z0-9._:-]{1,128}$"
"""An A2A context id a lease and a note may name: the database's ``context_pattern()``
(sql/0021; a test holds the two equal). No ``/``: the runtime puts it in a path segment."""
MAX_TOOL_CALLS: Final = 16
"""Outstanding ``load_memory`` call ids one note carries, the database's ``max_tool_calls()``
(sql/0021; a test holds the two equal)."""



@dataclass(frozen=True, slots=True)
class Sighting:
    """What one runtime pass-through call says about A2A context ``context``, content-free
    (sql/0021's note; read by ``memoryapi.contexts``): it creates the session, appends
    ``user_events`` user events, reaches a final task state, appends ``load_memory`` calls
    (``called``) or their responses (``answered``), by id."""

    context: str
    created: bool = False
    user_events: int = 0
    final: bool = False
    called: tuple[str, ...] = ()
    answered: tuple[str, ...] = ()

@dataclass(frozen=True, slots=True)
class RecentUsers:
    """Whose turns an Agent's Pods served lately, as one memory API replica saw them: the
    users it saw within ``window`` seconds, and by how much a user's shared note may trail
    that user's last call (``slack``; sql/0019 counts the notes for the window plus it)."""

    users: tuple[str, ...]
    window: float
    slack: float


@dataclass(frozen=True, slots=True)
class Entry:
    """A readable memory entry. ``content`` is excluded from repr()."""

    id: str
    content: str = field(repr=False)
    envelope: Envelope
    created_at: datetime
    expires_at: datetime
    generation: int
    score: float | None = None


class ErasureKind(StrEnum):
    ENTRY = "entry"
    SCOPE = "scope"
    WITHDRAWAL = "withdrawal"


@dataclass(frozen=True, slots=True)
class ErasureReceipt:
    """Content-free evidence of an erasure: opaque id, generation, result, code, time."""

    id: str
    kind: ErasureKind
    generation: int
    result: ErasureResult
    reason: Reason
    time: datetime
    deleted: int

    @property
    def verified(self) -> bool:
        return self.result is ErasureResult.VERIFIED

    def last_erasure(self, cause: Reason = Reason.OK) -> LastErasure:
        """The MemoryScope status block this receipt fills. Its reason code says why the scope
        was erased (``cause``: CONSENT_WITHDRAWN, OFFBOARDING_IN_PROGRESS, ...; OK for a
        forget-all under standing consent) when verified, else what failed: ``result``
        already says whether it was verified."""
        code = cause if self.verified else self.reason
        return LastErasure(time=self.time, result=self.result, reason_code=code.value,
                           receipt_id=self.id)


_PLAIN_NUMBERS: Final = re.compile(r"\[[ \t\n\r0-9eE+\-.,]*\]")
"""What JSON numbers, commas and whitespace are made of (``float()`` would also take
``1_0``, ``nan`` or ``infinity``; ``strtof`` reads some of those otherwise)."""


@dataclass(frozen=True, slots=True)
class VectorText:
    """One embedding as pgvector text exactly as a request spelled its numbers, made by
    :meth:`of` or by the memory API's parser from the JSON number tokens it read, checked
    within float4 (``memoryapi.wire``): PostgreSQL reads the received digits itself (pgvector
    parses with ``strtof``) and 768 floats are neither parsed nor formatted again
    (``vector_literal``: ~0.4-0.8 ms; parsing 768 17-digit doubles: ~0.27 ms)."""

    text: str = field(repr=False)

    @classmethod
    def of(cls, text: str, vector: Sequence[float]) -> VectorText | None:
        """``text`` if it spells exactly ``vector``: brackets around number characters only,
        and every component parses to the same finite double as ``vector``'s; else None."""
        if len(vector) != EMBEDDING_DIMENSIONS or not _PLAIN_NUMBERS.fullmatch(text):
            return None
        try:
            spelled = list(map(float, text[1:-1].split(",")))
        except ValueError:
            return None
        if spelled != list(vector) or not storable(spelled):
            return None
        return cls(text)


Embedding = Sequence[float] | VectorText
"""A vector as a caller holds it: floats, or the checked text of a request."""


_FLOATS_ONLY: Final = frozenset({float})  # a set of the components' types: one C-level pass


def vector_literal(values: Embedding) -> str:
    """pgvector's text form; refuses a wrong shape, a non-number or a component that is not
    finite or beyond float4 (``storable``).
    A :class:`VectorText` was checked where it was parsed and is used as it is.

    A provider's malformed output may echo the fact or query it embedded, and Python's own
    error text would quote it: the refusal is raised outside the except block, so the
    original error is neither chained nor kept as context.
    """
    if isinstance(values, VectorText):
        return values.text
    parts: list[str] | None = None
    try:
        if len(values) == EMBEDDING_DIMENSIONS and not isinstance(values, str | bytes):
            if _FLOATS_ONLY.issuperset(map(type, values)):
                # The common case: two C-level passes and a plain join.
                if storable(values):
                    return "[" + ",".join(map(repr, values)) + "]"
            else:
                parts = [_component(value) for value in values]
    except (TypeError, ValueError, OverflowError):
        parts = None
    if parts is None:
        raise StoreRefusal(Reason.INVALID_SPEC)
    return "[" + ",".join(parts) + "]"


def _component(value: object) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError  # no text: strings that parse as numbers are refused too
    number = float(value)
    if not storable([number]):
        raise ValueError
    return repr(number)
