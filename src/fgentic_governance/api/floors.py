"""MemoryPostureFloor (issue 38 §7): an administrator's memory posture for a whole Agent, a
namespace or the cluster, set once, with a scoped purge.

The effective posture of a MemoryScope is the most restrictive of its own and of every floor
that covers its Agent; the store enforces it inside its fence (sql/0023), so nothing below a
floor, neither another floor nor a scope, can loosen it.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated

from pydantic import Field

from fgentic_governance.api.common import (
    Conditions,
    DnsLabel,
    Model,
    ReasonCode,
    Token,
    cel,
    immutable,
    validations,
)
from fgentic_governance.api.memory import ErasureResult, Posture, RecallPolicy


class FloorLevel(StrEnum):
    """What a floor covers: every Agent, every Agent of one namespace, or one Agent."""

    CLUSTER = "Cluster"
    NAMESPACE = "Namespace"
    AGENT = "Agent"


_TARGET_RULES = validations(
    cel("self.level != 'Cluster' || (!has(self.__namespace__) && !has(self.agent))",
        "INVALID_SPEC: a Cluster floor names no namespace and no Agent"),
    cel("self.level != 'Namespace' || (has(self.__namespace__) && !has(self.agent))",
        "INVALID_SPEC: a Namespace floor names its namespace and no Agent"),
    cel("self.level != 'Agent' || (has(self.__namespace__) && has(self.agent))",
        "INVALID_SPEC: an Agent floor names the Agent's namespace and name"),
)


class FloorTarget(Model):
    """The Agents a floor covers; immutable (a new target is a new floor)."""

    model_config = {"json_schema_extra": _TARGET_RULES}

    level: FloorLevel
    """Cluster (every Agent), Namespace (every Agent of `namespace`) or Agent (one Agent)."""
    namespace: DnsLabel | None = None
    """Namespace of the Agents (Namespace and Agent levels only)."""
    agent: DnsLabel | None = None
    """Name of the kagent Agent (Agent level only)."""


class PurgeRequest(Model):
    """An explicit request to erase every memory scope under this floor."""

    request_id: Token
    """Opaque id of this purge request. The operator erases and verifies every scope once per
    id; re-applying the same id re-reports it, a new id asks for a new purge."""


_FLOOR_RULES = validations(
    cel("!has(self.purge) || self.posture == 'fully_disabled'",
        "INVALID_SPEC: a purge runs only under a fully_disabled floor",
        fieldPath=".purge", reason="FieldValueForbidden"),
)


class MemoryPostureFloorSpec(Model):
    """A posture floor: the most restrictive posture any memory scope of the covered Agents
    may have, and optionally a purge of them all."""

    model_config = {"json_schema_extra": _FLOOR_RULES}

    target: Annotated[FloorTarget, Field(json_schema_extra=immutable("target"))]
    """The Agents this floor covers (cluster, namespace or one Agent); immutable."""
    posture: Posture = Posture.FULLY_DISABLED
    """The floor: capture_disabled stops every save, fully_disabled every save and recall.
    A scope's own posture, or another floor, can only make it stricter; enabled sets no
    floor."""
    recall: RecallPolicy = RecallPolicy()
    """What may enter recall in every scope under this floor: each field narrows each scope's
    own policy.recall (the sets are intersected, the shorter age wins), so a floor withholds
    and nothing below it readmits. Absent fields narrow nothing."""
    purge: PurgeRequest | None = None
    """Erase and verify every scope under this floor (only with posture fully_disabled)."""


class FloorPhase(StrEnum):
    """Phase of a MemoryPostureFloor."""

    PENDING = "Pending"
    ENFORCED = "Enforced"
    FAILED = "Failed"


class PurgeReceipt(Model):
    """One content-free receipt per scope a purge erased: ids, counts and codes only."""

    namespace: DnsLabel
    """Namespace of the MemoryScope."""
    scope: Annotated[str, Field(max_length=253)]
    """Name of the MemoryScope."""
    result: ErasureResult
    """Verified (no row of the scope left, read back after every earlier entrant ended) or
    Failed."""
    reason_code: ReasonCode
    """OK when verified, else the code of the failure."""
    receipt_id: Annotated[str, Field(max_length=64)] = ""
    """Opaque id of the erasure receipt; empty when no erasure ran."""
    generation: Annotated[int, Field(ge=0)] = 0
    """The scope's consent generation after the erasure's fence."""
    deleted: Annotated[int, Field(ge=0)] = 0
    """Rows deleted by this erasure."""


class PurgeStatus(Model):
    """The content-free outcome of the last purge request."""

    request_id: Token
    """The request this outcome answers."""
    result: ErasureResult
    """Verified once every scope under the floor is erased and verified, else Failed (the
    operator retries)."""
    scopes_found: Annotated[int, Field(ge=0)] = 0
    """Scopes under the floor, found in MemoryScopes and in the store."""
    scopes_erased: Annotated[int, Field(ge=0)] = 0
    """Scopes erased and verified."""
    scopes_failed: Annotated[int, Field(ge=0)] = 0
    """Scopes whose erasure failed."""
    rows_deleted: Annotated[int, Field(ge=0)] = 0
    """Rows deleted, all scopes together."""
    digest: Annotated[str, Field(max_length=64, pattern=r"^[0-9a-f]{64}$")]
    """SHA-256 of the receipts (scope, result, code, receipt id, generation, count), to match
    this status against the operator's events and logs."""
    time: datetime
    """When the purge finished (RFC 3339)."""
    receipts: Annotated[list[PurgeReceipt], Field(max_length=1024)] = []
    """One receipt per scope (at most 1024)."""


class MemoryPostureFloorStatus(Model):
    """Content-free status: phase, the purge's receipts, conditions."""

    phase: FloorPhase = FloorPhase.PENDING
    """Enforced once the floor is in the store's fence, else Failed with reasonCode."""
    reason_code: ReasonCode | None = None
    """OK when enforced, else the code of the failure."""
    purge: PurgeStatus | None = None
    """Outcome of the last purge request."""
    conditions: Conditions = []
    """Conditions Enforced, Purged (with a purge request) and Ready."""
    observed_generation: Annotated[int, Field(ge=0)] = 0
    """The metadata.generation the operator last reconciled."""
