"""PrincipalOffboarding: erase every memory scope of one exact principal before deactivation."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import Field

from fgentic_governance.api.common import (
    Conditions,
    DnsLabel,
    Model,
    Principal,
    ReasonCode,
    immutable,
)


class OffboardingSpec(Model):
    """Erase every memory scope of one exact principal before the account is deactivated.

    The whole spec is immutable.
    """

    model_config = {"json_schema_extra": immutable("spec")}

    principal: Principal
    """The principal whose scopes are erased: matched by exact MXID and origin kind."""


class OffboardingPhase(StrEnum):
    """Phase of a PrincipalOffboarding."""

    PENDING = "Pending"
    DISABLING = "Disabling"
    ERASING = "Erasing"
    READY = "ReadyForDeactivation"
    FAILED = "Failed"


class ScopeResult(Model):
    """One content-free result per scope."""

    namespace: DnsLabel
    """Namespace of the MemoryScope."""
    scope: Annotated[str, Field(max_length=253)]
    """Name of the MemoryScope."""
    result: Annotated[str, Field(max_length=16, pattern=r"^(Verified|Failed)$")]
    """Verified (no row of the scope left) or Failed."""
    reason_code: ReasonCode
    """Reason code of the result (OK when verified)."""
    receipt_id: Annotated[str, Field(max_length=64)] = ""
    """Opaque id of the erasure receipt; empty when no erasure ran."""


class OffboardingStatus(Model):
    """Content-free status: counts, one result per scope, conditions."""

    phase: OffboardingPhase = OffboardingPhase.PENDING
    """ReadyForDeactivation once every scope is erased and verified, else Failed with
    reasonCode (the operator retries store failures)."""
    scopes_found: Annotated[int, Field(ge=0)] = 0
    """Scopes of the principal found, in MemoryScopes and in the store."""
    scopes_erased: Annotated[int, Field(ge=0)] = 0
    """Scopes erased and verified."""
    scopes_failed: Annotated[int, Field(ge=0)] = 0
    """Scopes whose erasure failed."""
    results: Annotated[list[ScopeResult], Field(max_length=1024)] = []
    """One result per scope found (at most 1024)."""
    reason_code: ReasonCode | None = None
    """OK when ready for deactivation, else the code of the failure."""
    conditions: Conditions = []
    """Conditions ReadyForDeactivation and Ready."""
    observed_generation: Annotated[int, Field(ge=0)] = 0
    """The metadata.generation the operator last reconciled."""
