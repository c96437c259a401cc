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
    model_config = {"json_schema_extra": immutable("spec")}

    principal: Principal


class OffboardingPhase(StrEnum):
    PENDING = "Pending"
    DISABLING = "Disabling"
    ERASING = "Erasing"
    READY = "ReadyForDeactivation"
    FAILED = "Failed"


class ScopeResult(Model):
    """One content-free result per scope."""

    namespace: DnsLabel
    scope: Annotated[str, Field(max_length=253)]
    result: Annotated[str, Field(max_length=16, pattern=r"^(Verified|Failed)$")]
    reason_code: ReasonCode
    receipt_id: Annotated[str, Field(max_length=64)] = ""


class OffboardingStatus(Model):
    phase: OffboardingPhase = OffboardingPhase.PENDING
    scopes_found: Annotated[int, Field(ge=0)] = 0
    scopes_erased: Annotated[int, Field(ge=0)] = 0
    scopes_failed: Annotated[int, Field(ge=0)] = 0
    results: Annotated[list[ScopeResult], Field(max_length=1024)] = []
    reason_code: ReasonCode | None = None
    conditions: Conditions = []
    observed_generation: Annotated[int, Field(ge=0)] = 0
