"""The consent gates of a MemoryScope, as pure functions."""

from __future__ import annotations

from typing import Any

import pytest

from fgentic_governance.api.memory import ConsentRecordSpec, MemoryScopeSpec, Posture
from fgentic_governance.consent.gates import Environment, evaluate
from fgentic_governance.reasons import Reason
from tests.support.appservice import puppet, telegram
from tests.support.objects import example

ENV = Environment(local_homeserver="fgentic.local", store_ready=True)


def _scope(**changes: Any) -> MemoryScopeSpec:
    spec = example("MemoryScope")["spec"] | changes
    return MemoryScopeSpec.model_validate(spec)


def _consent(**changes: Any) -> ConsentRecordSpec:
    return ConsentRecordSpec.model_validate(example("ConsentRecord")["spec"] | changes)


def test_all_gates_hold() -> None:
    verdict = evaluate(_scope(), [_consent()], ENV)
    assert verdict.enabled and verdict.posture is Posture.ENABLED and verdict.reason is Reason.OK


def test_capture_disabled_posture_is_kept() -> None:
    verdict = evaluate(_scope(posture="capture_disabled"), [_consent()], ENV)
    assert verdict.posture is Posture.CAPTURE_DISABLED


@pytest.mark.parametrize(("scope", "consents", "env", "reason"), [
    ({}, [], ENV, Reason.CONSENT_MISSING),
    ({"subject": {"mxid": "@alice:remote.example", "originKind": "native-local"}},
     None, ENV, Reason.FEDERATION_DENIED),
    ({"subject": {"mxid": "@alice:fgentic.local", "originKind": "external-appservice"}},
     None, ENV, Reason.FEDERATION_DENIED),
    ({}, None, Environment("", True), Reason.FEDERATION_DENIED),
    # A bridged puppet declared native-local (ADR 0023 §31): the registry decides, not the kind.
    ({"subject": {"mxid": puppet("fgentic.local"), "originKind": "native-local"}},
     [{"subject": {"mxid": puppet("fgentic.local"), "originKind": "native-local"}}],
     Environment("fgentic.local", True, appservice=telegram("fgentic.local")),
     Reason.APPSERVICE_IDENTITY_DENIED),
    ({"profile": "production"}, None, ENV, Reason.PROFILE_NOT_DEMO),
    ({}, None, Environment("fgentic.local", False), Reason.STORE_UNAVAILABLE),
    ({}, None, Environment("fgentic.local", True, offboarding=True),
     Reason.OFFBOARDING_IN_PROGRESS),
    ({"posture": "fully_disabled"}, None, ENV, Reason.POSTURE_DISABLED),
    ({}, [{"decision": "withdrawn"}], ENV, Reason.CONSENT_WITHDRAWN),
    ({}, [{"purpose": "marketing"}], ENV, Reason.CONSENT_PURPOSE_MISMATCH),
    ({}, [{"policyVersion": "2025-01"}], ENV, Reason.CONSENT_POLICY_VERSION_MISMATCH),
    ({}, [{}, {"subject": {"mxid": "@bob:fgentic.local", "originKind": "native-local"}}], ENV,
     Reason.CONSENT_SUBJECT_MISMATCH),
])
def test_each_gate_fails_closed(
    scope: dict[str, Any], consents: list[dict[str, Any]] | None, env: Environment,
    reason: Reason,
) -> None:
    records = [_consent()] if consents is None else [_consent(**c) for c in consents]
    verdict = evaluate(_scope(**scope), records, env)
    assert not verdict.enabled
    assert verdict.posture is Posture.FULLY_DISABLED
    assert verdict.reason is reason


def test_newest_record_decides_regrant_after_withdrawal() -> None:
    withdrawn, regranted = _consent(decision="withdrawn"), _consent()
    assert evaluate(_scope(), [withdrawn, regranted], ENV).enabled
    assert not evaluate(_scope(), [regranted, withdrawn], ENV).enabled
