"""MemoryScope and ConsentRecord (ADR 0023): memory is off until every gate holds."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, TypeVar

from pydantic import AfterValidator, Field, StrictInt

from fgentic_governance.api.common import (
    AgentRef,
    Conditions,
    LocalObjectRef,
    Model,
    Principal,
    ReasonCode,
    RoomId,
    Token,
    cel,
    immutable,
    validations,
)


class Profile(StrEnum):
    """Deployment profile; only `demo` may enable memory (ADR 0023 §39)."""

    DEMO = "demo"
    DEFAULT = "default"
    FEDERATION = "federation"
    PRODUCTION = "production"


class Posture(StrEnum):
    """Requested posture; anything short of consent behaves as fully_disabled."""

    ENABLED = "enabled"
    CAPTURE_DISABLED = "capture_disabled"
    FULLY_DISABLED = "fully_disabled"


class MemoryType(StrEnum):
    """What a stored fact is (its envelope's type)."""

    PREFERENCE = "preference"
    FACT = "fact"
    DECISION = "decision"
    INSTRUCTION = "instruction"
    RELATIONSHIP = "relationship"
    TASK_STATE = "task_state"
    WORKING_NOTE = "working_note"


class SourceKind(StrEnum):
    """Where a stored fact came from."""

    USER_MESSAGE = "user_message"
    ASSISTANT_RESPONSE = "assistant_response"
    AUTOMATIC_SUMMARY = "automatic_summary"
    SAVE_MEMORY_TOOL = "save_memory_tool"
    UNKNOWN = "unknown"


class ConfirmationStatus(StrEnum):
    """Who confirmed a stored fact. There is no operator_confirmed: an operator never sees,
    so never confirms, personal memory."""

    USER_CONFIRMED = "user_confirmed"
    MODEL_INFERRED = "model_inferred"
    UNKNOWN = "unknown"


class Sensitivity(StrEnum):
    """How sensitive a stored fact is."""

    NORMAL = "normal"
    PERSONAL = "personal"
    SENSITIVE = "sensitive"


E = TypeVar("E", bound=StrEnum)


def _distinct(values: list[E]) -> list[E]:
    # The API server enforces it too (list-type set); a duplicate is a mistake, not a no-op.
    if len(set(values)) != len(values):
        raise ValueError("values must be distinct")
    return values


def _recall_set(kind: type[StrEnum]) -> Any:
    """A set of ``kind``'s values that may enter recall: 1..all of them, each once."""
    return Field(min_length=1, max_length=len(kind),
                 json_schema_extra={"x-kubernetes-list-type": "set"})


MemoryTypes = Annotated[list[MemoryType], AfterValidator(_distinct), _recall_set(MemoryType)]
SourceKinds = Annotated[list[SourceKind], AfterValidator(_distinct), _recall_set(SourceKind)]
ConfirmationStatuses = Annotated[list[ConfirmationStatus], AfterValidator(_distinct),
                                 _recall_set(ConfirmationStatus)]
Sensitivities = Annotated[list[Sensitivity], AfterValidator(_distinct),
                          _recall_set(Sensitivity)]

MAX_RECALL_AGE_HOURS = 7 * 24
"""The maximum retention (7 days): an age limit beyond it would narrow nothing."""


class RecallPolicy(Model):
    """Which stored facts may enter recall (prefetch, load_memory, inspect), by their
    content-free envelope and age. Each field narrows; an absent field does not. The store
    applies it inside its fenced read view, so a withheld fact is never read, and counts what
    it withholds (status.recallWithheld)."""

    memory_types: MemoryTypes | None = None
    """Memory types that may enter recall; absent: every type."""
    source_kinds: SourceKinds | None = None
    """Sources that may enter recall (e.g. save_memory_tool, automatic_summary); absent:
    every source."""
    confirmation_statuses: ConfirmationStatuses | None = None
    """Confirmation states that may enter recall; absent: every state."""
    sensitivities: Sensitivities | None = None
    """Sensitivity levels that may enter recall; absent: every level."""
    max_age_hours: Annotated[StrictInt | None, Field(ge=1, le=MAX_RECALL_AGE_HOURS)] = None
    """A fact older than this many hours (1..168) is withheld; absent: no age limit beyond
    retention."""


class PrefetchPolicy(Model):
    """Bounds on recall: the searches a new session's prefetch may issue."""

    max_subqueries: Annotated[StrictInt, Field(ge=0, le=8)] = 8
    """Prefetch subqueries per new session (at most 8)."""
    max_subquery_bytes: Annotated[StrictInt, Field(ge=1, le=512)] = 512
    """UTF-8 bytes per prefetch subquery (at most 512)."""


class ExplicitOperationsPolicy(Model):
    """Rate limit of explicit load/save operations: a token bucket per sender and Agent."""

    per_minute: Annotated[StrictInt, Field(ge=1, le=6)] = 6
    """Explicit load/save operations per minute per sender and Agent (at most 6)."""
    burst: Annotated[StrictInt, Field(ge=1, le=3)] = 3
    """Burst size of the explicit-operation bucket (at most 3)."""


class AutomaticSavePolicy(Model):
    """Cadence and size bounds of the runtime's automatic save (a session summary)."""

    min_user_turns: Annotated[StrictInt, Field(ge=5, le=1000)] = 5
    """User turns between automatic saves (at least 5)."""
    max_input_bytes: Annotated[StrictInt, Field(ge=1, le=16384)] = 16384
    """Summarizer input ceiling in bytes (at most 16 KiB)."""
    max_facts: Annotated[StrictInt, Field(ge=0, le=10)] = 10
    """Facts one automatic save may store (at most 10)."""


class MemoryPolicy(Model):
    """Hard caps and cost ceilings; each bound is a ceiling the scope cannot raise."""

    max_retention_days: Annotated[
        StrictInt, Field(ge=1, le=7, json_schema_extra=immutable("maxRetentionDays"))
    ] = 7
    """Strict maximum retention in days (at most 7); immutable once set."""
    entry_cap: Annotated[StrictInt, Field(ge=1, le=100)] = 100
    """Hard per-scope entry cap (at most 100)."""
    max_fact_bytes: Annotated[StrictInt, Field(ge=1, le=512)] = 512
    """UTF-8 bytes per stored fact (at most 512)."""
    prefetch: PrefetchPolicy = PrefetchPolicy()
    """Bounds on a new session's prefetch searches."""
    explicit_operations: ExplicitOperationsPolicy = ExplicitOperationsPolicy()
    """Rate limit of explicit load/save operations per sender and Agent."""
    hourly_operation_ceiling: Annotated[StrictInt, Field(ge=1, le=60)] = 60
    """Memory operations per scope per hour, all kinds together (at most 60)."""
    automatic_save: AutomaticSavePolicy = AutomaticSavePolicy()
    """Cadence and size bounds of automatic saves."""
    recall: RecallPolicy = RecallPolicy()
    """Which stored facts may enter recall; the default lets every one."""


_SCOPE_RULES = validations(
    cel("self.subject.originKind == 'native-local'",
        "FEDERATION_DENIED: only a native-local principal may hold memory in v1",
        fieldPath=".subject.originKind", reason="FieldValueForbidden"),
    cel("self.posture == 'fully_disabled' || self.profile == 'demo'",
        "PROFILE_NOT_DEMO: only the demo profile may enable memory",
        fieldPath=".posture", reason="FieldValueForbidden"),
)


class MemoryScopeSpec(Model):
    """The typed triple (principal, Agent, control room) plus purpose and policy."""

    model_config = {"json_schema_extra": _SCOPE_RULES}

    subject: Annotated[Principal, Field(json_schema_extra=immutable("subject"))]
    """The one person whose memory this is (native-local only in v1); immutable."""
    agent: Annotated[AgentRef, Field(json_schema_extra=immutable("agent"))]
    """The one kagent Agent that may use this memory; immutable."""
    control_room: Annotated[RoomId, Field(json_schema_extra=immutable("controlRoom"))]
    """Room ID of the single-subject control room; immutable."""
    purpose: Token
    """Purpose the consent must name exactly."""
    policy_version: Token
    """Policy version the consent must name exactly."""
    profile: Profile = Profile.DEFAULT
    policy: MemoryPolicy = MemoryPolicy()
    posture: Posture = Posture.FULLY_DISABLED
    """Requested posture: enabled, capture_disabled (recall only) or fully_disabled (the
    default). Memory works only while consent and every other gate also hold."""


class ScopePhase(StrEnum):
    """Phase of a MemoryScope."""

    DISABLED = "Disabled"
    ENABLED = "Enabled"
    WITHDRAWING = "Withdrawing"
    ERASING = "Erasing"
    FAILED = "Failed"


class ErasureResult(StrEnum):
    """Outcome of an erasure: Verified (no row of the scope left) or Failed."""

    VERIFIED = "Verified"
    FAILED = "Failed"


class LastErasure(Model):
    """Content-free receipt of an erasure."""

    time: datetime
    """When the erasure ran (RFC 3339)."""
    result: ErasureResult
    """Verified (no row of the scope left) or Failed (the operator retries)."""
    reason_code: ReasonCode
    """Why the scope was erased when Verified: CONSENT_WITHDRAWN, OFFBOARDING_IN_PROGRESS or
    another gate's code (OK: a forget-all under standing consent); when Failed, the failure's
    code, e.g. ERASURE_VERIFY_FAILED."""
    receipt_id: Annotated[str, Field(max_length=64)] = ""
    """Opaque id of the erasure receipt."""


class RecallWithheld(Model):
    """How many of the scope's facts the recall policy withholds for one reason."""

    reason_code: ReasonCode
    """RECALL_TYPE_WITHHELD, RECALL_SOURCE_WITHHELD, RECALL_CONFIRMATION_WITHHELD,
    RECALL_SENSITIVITY_WITHHELD or RECALL_AGE_WITHHELD: the first dimension (in this order) a
    fact fails, so each withheld fact is counted once."""
    count: Annotated[int, Field(ge=1)]
    """Facts withheld for this reason at the operator's last reconcile."""


class MemoryScopeStatus(Model):
    """Content-free status: counts, generations, times and bounded codes only."""

    phase: ScopePhase = ScopePhase.DISABLED
    """Enabled (memory on), Disabled (memory off: a gate fails, see reasonCode) or Failed (the
    store refused or an erasure failed; the scope stays disabled and the operator retries)."""
    consent_generation: Annotated[int, Field(ge=0)] = 0
    """The store's consent generation: 0 for a new scope, advanced by every grant, withdrawal
    and erasure; it never decreases."""
    hard_expiry: datetime | None = None
    """When the scope's last unexpired entry expires; absent when none is left."""
    entry_count: Annotated[int, Field(ge=0)] = 0
    """Entries the store held at the operator's last reconcile of the scope: 0 as soon as an
    erasure (a withdrawal, an offboarding) is recorded; entries that runtimes save or that
    expire show at the next resync (FGENTIC_SCOPE_RESYNC_SECONDS, 30 s by default)."""
    store_schema_version: Annotated[int, Field(ge=0)] = 0
    """Content store schema version the operator migrated to; the webhook admits a
    memory-enabled Agent only at this release's version."""
    last_erasure: LastErasure | None = None
    """Receipt of the scope's latest erasure; absent until one ran."""
    recall_withheld: Annotated[list[RecallWithheld], Field(max_length=8)] = []
    """Facts that are stored and readable by consent, expiry and lifecycle but that
    spec.policy.recall withholds from recall, counted by reason at the operator's last
    reconcile (content-free: codes and counts); empty when it withholds none."""
    reason_code: ReasonCode | None = None
    """Reason code of the phase: OK when enabled, else the first failing gate or the store's
    refusal."""
    conditions: Conditions = []
    """Conditions Ready, Enabled, StoreReady, ConsentGated, ModelRouteGoverned and ExpiryCleanup.
    ConsentGated is True once the store's consent fence holds the scope (every read and write is
    checked against the current consent generation), with what consent says now as its reason:
    OK while granted, else e.g. CONSENT_MISSING, CONSENT_WITHDRAWN or OFFBOARDING_IN_PROGRESS."""
    observed_generation: Annotated[int, Field(ge=0)] = 0
    """The metadata.generation the operator last reconciled."""


class ConsentDecision(StrEnum):
    """A consent decision: granted, or withdrawn (one-way)."""

    GRANTED = "granted"
    WITHDRAWN = "withdrawn"


# Immutable after creation except the one-way granted -> withdrawn change.
_CONSENT_RULES = validations(
    cel("self.scopeRef == oldSelf.scopeRef && self.subject == oldSelf.subject"
        " && self.purpose == oldSelf.purpose && self.policyVersion == oldSelf.policyVersion",
        "a ConsentRecord is immutable; a new grant is a new record"),
    cel("self.decision == oldSelf.decision"
        " || (oldSelf.decision == 'granted' && self.decision == 'withdrawn')",
        "decision may only change from granted to withdrawn", fieldPath=".decision"),
)


class ConsentRecordSpec(Model):
    """Explicit, purpose-specific, versioned consent for one MemoryScope."""

    model_config = {"json_schema_extra": _CONSENT_RULES}

    scope_ref: LocalObjectRef
    """The MemoryScope in this namespace."""
    subject: Principal
    """Must equal the scope's subject exactly."""
    purpose: Token
    """Purpose consented to; must equal the scope's spec.purpose exactly."""
    policy_version: Token
    """Policy version consented to; must equal the scope's spec.policyVersion exactly."""
    decision: ConsentDecision
    """granted or withdrawn; may change only from granted to withdrawn (a re-grant is a new
    record). The scope's newest record decides."""


class ReceiptResult(StrEnum):
    """Outcome of the change a ConsentRecord caused."""

    APPLIED = "Applied"
    REFUSED = "Refused"
    PENDING = "Pending"


class Receipt(Model):
    """Content-free consent receipt."""

    id: Annotated[str, Field(max_length=64)]
    """Opaque receipt id: the erasure receipt's id for an erasure, else a random one."""
    generation: Annotated[int, Field(ge=0)]
    """The scope's consent generation after the change."""
    result: ReceiptResult
    """Applied, or Refused when the scope failed (see reasonCode)."""
    reason_code: ReasonCode
    """Reason code of the scope's outcome (OK for a grant, else the gate or store code)."""
    time: datetime
    """When the receipt was written (RFC 3339)."""


class ConsentRecordStatus(Model):
    """Content-free status: the receipt of the change this record caused, and conditions."""

    receipt: Receipt | None = None
    """Receipt of the grant or erasure this record caused; absent until the scope acted."""
    conditions: Conditions = []
    """Conditions Valid (the spec parses) and Ready (set with the receipt)."""
    observed_generation: Annotated[int, Field(ge=0)] = 0
    """The metadata.generation the operator last reconciled."""
