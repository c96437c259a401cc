"""MemoryScope and ConsentRecord (ADR 0023): memory is off until every gate holds."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated

from pydantic import Field, StrictInt

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


class PrefetchPolicy(Model):
    max_subqueries: Annotated[StrictInt, Field(ge=0, le=8)] = 8
    """Prefetch subqueries per new session (at most 8)."""
    max_subquery_bytes: Annotated[StrictInt, Field(ge=1, le=512)] = 512
    """UTF-8 bytes per prefetch subquery (at most 512)."""


class ExplicitOperationsPolicy(Model):
    per_minute: Annotated[StrictInt, Field(ge=1, le=6)] = 6
    """Explicit load/save operations per minute per sender and Agent (at most 6)."""
    burst: Annotated[StrictInt, Field(ge=1, le=3)] = 3
    """Burst size of the explicit-operation bucket (at most 3)."""


class AutomaticSavePolicy(Model):
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
    explicit_operations: ExplicitOperationsPolicy = ExplicitOperationsPolicy()
    hourly_operation_ceiling: Annotated[StrictInt, Field(ge=1, le=60)] = 60
    """Memory operations per scope per hour, all kinds together (at most 60)."""
    automatic_save: AutomaticSavePolicy = AutomaticSavePolicy()


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
    agent: Annotated[AgentRef, Field(json_schema_extra=immutable("agent"))]
    control_room: Annotated[RoomId, Field(json_schema_extra=immutable("controlRoom"))]
    """Room ID of the single-subject control room."""
    purpose: Token
    """Purpose the consent must name exactly."""
    policy_version: Token
    """Policy version the consent must name exactly."""
    profile: Profile = Profile.DEFAULT
    policy: MemoryPolicy = MemoryPolicy()
    posture: Posture = Posture.FULLY_DISABLED


class ScopePhase(StrEnum):
    DISABLED = "Disabled"
    ENABLED = "Enabled"
    WITHDRAWING = "Withdrawing"
    ERASING = "Erasing"
    FAILED = "Failed"


class ErasureResult(StrEnum):
    VERIFIED = "Verified"
    FAILED = "Failed"


class LastErasure(Model):
    time: datetime
    result: ErasureResult
    reason_code: ReasonCode
    receipt_id: Annotated[str, Field(max_length=64)] = ""


class MemoryScopeStatus(Model):
    """Content-free status: counts, generations, times and bounded codes only."""

    phase: ScopePhase = ScopePhase.DISABLED
    consent_generation: Annotated[int, Field(ge=0)] = 0
    hard_expiry: datetime | None = None
    entry_count: Annotated[int, Field(ge=0)] = 0
    store_schema_version: Annotated[int, Field(ge=0)] = 0
    last_erasure: LastErasure | None = None
    reason_code: ReasonCode | None = None
    conditions: Conditions = []
    observed_generation: Annotated[int, Field(ge=0)] = 0


class ConsentDecision(StrEnum):
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
    policy_version: Token
    decision: ConsentDecision


class ReceiptResult(StrEnum):
    APPLIED = "Applied"
    REFUSED = "Refused"
    PENDING = "Pending"


class Receipt(Model):
    """Content-free consent receipt."""

    id: Annotated[str, Field(max_length=64)]
    generation: Annotated[int, Field(ge=0)]
    result: ReceiptResult
    reason_code: ReasonCode
    time: datetime


class ConsentRecordStatus(Model):
    receipt: Receipt | None = None
    conditions: Conditions = []
    observed_generation: Annotated[int, Field(ge=0)] = 0
