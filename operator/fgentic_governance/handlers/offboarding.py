"""PrincipalOffboarding registrations: validate and report; the erasure flow lands with issue 6."""

from __future__ import annotations

from typing import Any

import kopf

from fgentic_governance.api.common import GROUP, VERSION
from fgentic_governance.api.offboarding import OffboardingPhase, OffboardingSpec
from fgentic_governance.handlers.common import condition, merge_conditions, parse
from fgentic_governance.reasons import Reason


@kopf.on.resume(GROUP, VERSION, "principaloffboardings")
@kopf.on.create(GROUP, VERSION, "principaloffboardings")
def reconcile_offboarding(
    spec: kopf.Spec, status: kopf.Status, meta: kopf.Meta, patch: kopf.Patch, **_: Any
) -> None:
    generation = int(meta.get("generation", 0))
    previous = status.get("conditions")
    valid = parse(OffboardingSpec, spec) is not None
    reason = Reason.OK if valid else Reason.INVALID_SPEC
    patch.status["observedGeneration"] = generation
    if not valid:
        patch.status["phase"] = OffboardingPhase.FAILED.value
        patch.status["reasonCode"] = reason.value
    elif "phase" not in status:
        patch.status["phase"] = OffboardingPhase.PENDING.value
    patch.status["conditions"] = merge_conditions(
        previous, condition("Valid", valid, reason, generation, previous))
