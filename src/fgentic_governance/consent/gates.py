"""Every gate a MemoryScope must pass before memory is enabled (ADR 0023), as pure functions.

The verdict is computed from the scope, its ConsentRecords and facts about the environment.
Anything missing, ambiguous or mismatched yields a disabled verdict with one reason code.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from fgentic_governance.api.appservice import EMPTY, AppserviceRegistry
from fgentic_governance.api.common import OriginKind
from fgentic_governance.api.memory import (
    ConsentDecision,
    ConsentRecordSpec,
    MemoryScopeSpec,
    Posture,
    Profile,
)
from fgentic_governance.reasons import Reason


@dataclass(frozen=True)
class Environment:
    """Facts outside the scope that gate it."""

    local_homeserver: str
    store_ready: bool
    offboarding: bool = False
    appservice: AppserviceRegistry = EMPTY
    """The appservice-namespace registry (--appservice-namespaces)."""


@dataclass(frozen=True)
class Verdict:
    posture: Posture
    reason: Reason

    @property
    def enabled(self) -> bool:
        return self.posture is not Posture.FULLY_DISABLED


DISABLED = Posture.FULLY_DISABLED


def server_name(mxid: str) -> str:
    """The server part of a complete MXID (everything after the first ':')."""
    return mxid.split(":", 1)[1]


def identity_gate(scope: MemoryScopeSpec, env: Environment) -> Reason:
    """Only a native-local principal of the configured local homeserver (federation denied)."""
    if scope.subject.origin_kind is not OriginKind.NATIVE_LOCAL:
        return Reason.FEDERATION_DENIED
    if not env.local_homeserver or server_name(scope.subject.mxid) != env.local_homeserver:
        return Reason.FEDERATION_DENIED
    if env.appservice.holds(scope.subject.mxid):  # a puppet declared native (ADR 0023 §31)
        return Reason.APPSERVICE_IDENTITY_DENIED
    return Reason.OK


def consent_gate(scope: MemoryScopeSpec, consents: Sequence[ConsentRecordSpec]) -> Reason:
    """The newest record decides; every record must name the scope's exact subject.

    ``consents`` are the scope's ConsentRecords, oldest first: a new grant is a new record,
    so a re-grant after a withdrawal is simply a newer record.
    """
    if not consents:
        return Reason.CONSENT_MISSING
    if any(c.subject != scope.subject for c in consents):
        return Reason.CONSENT_SUBJECT_MISMATCH
    latest = consents[-1]
    if latest.decision is ConsentDecision.WITHDRAWN:
        return Reason.CONSENT_WITHDRAWN
    if latest.purpose != scope.purpose:
        return Reason.CONSENT_PURPOSE_MISMATCH
    if latest.policy_version != scope.policy_version:
        return Reason.CONSENT_POLICY_VERSION_MISMATCH
    return Reason.OK


def consent_standing(
    scope: MemoryScopeSpec, consents: Sequence[ConsentRecordSpec], env: Environment
) -> Reason:
    """What consent alone says of the scope now (its ConsentGated condition's reason): OK
    while it is granted, else the consent gate's code; an offboarding of the principal
    overrides every record."""
    return Reason.OFFBOARDING_IN_PROGRESS if env.offboarding else consent_gate(scope, consents)


def evaluate(
    scope: MemoryScopeSpec, consents: Sequence[ConsentRecordSpec], env: Environment
) -> Verdict:
    """The effective posture of a scope; the first failing gate names the reason."""
    checks = (
        identity_gate(scope, env),
        Reason.OK if scope.profile is Profile.DEMO else Reason.PROFILE_NOT_DEMO,
        consent_standing(scope, consents, env),
        Reason.OK if env.store_ready else Reason.STORE_UNAVAILABLE,
        Reason.OK if scope.posture is not Posture.FULLY_DISABLED else Reason.POSTURE_DISABLED,
    )
    for reason in checks:
        if reason is not Reason.OK:
            return Verdict(DISABLED, reason)
    return Verdict(scope.posture, Reason.OK)
