"""Bounded, content-free codes of the memory control API, and its one exception.

The control API answers with a :class:`fgentic_governance.reasons.Reason` where one fits (the
store's fence codes, SCOPE_MISSING, FEDERATION_DENIED, ...). Refusals that exist only at this
boundary - workload authentication, request shape, the control-room state check and the
two-step confirmation - use :class:`ControlReason`. A room-state refusal also names which
:class:`Drift` checks failed; those subcodes are a closed set too, so a response or log line can
carry them without ever echoing the snapshot that caused them.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from fgentic_governance.reasons import Coded, Reason


class ControlReason(StrEnum):
    """Refusals specific to the control API boundary."""

    UNAUTHENTICATED = "UNAUTHENTICATED"
    REQUEST_MALFORMED = "REQUEST_MALFORMED"
    REQUEST_TOO_LARGE = "REQUEST_TOO_LARGE"
    NOT_FOUND = "NOT_FOUND"
    METHOD_NOT_ALLOWED = "METHOD_NOT_ALLOWED"
    PAGE_OUT_OF_RANGE = "PAGE_OUT_OF_RANGE"
    ROOM_STATE_DRIFT = "ROOM_STATE_DRIFT"
    CONFIRMATION_REQUIRED = "CONFIRMATION_REQUIRED"
    """Not an error: the first step of ``forget all``/``off`` returns a token with this code."""
    CONFIRMATION_INVALID = "CONFIRMATION_INVALID"
    CONFIRMATION_EXPIRED = "CONFIRMATION_EXPIRED"
    DIRECTORY_UNAVAILABLE = "DIRECTORY_UNAVAILABLE"
    """The Kubernetes API (MemoryScope/ConsentRecord lookup or update) did not answer."""


class Drift(StrEnum):
    """Which part of the control-room state differs from the allowed state (ADR 0023 §19)."""

    ROOM_ID_MISMATCH = "ROOM_ID_MISMATCH"
    SNAPSHOT_STALE = "SNAPSHOT_STALE"
    ROOM_VERSION = "ROOM_VERSION"
    JOIN_RULE = "JOIN_RULE"
    HISTORY_VISIBILITY = "HISTORY_VISIBILITY"
    ENCRYPTED = "ENCRYPTED"
    SERVER_ACL_MISSING = "SERVER_ACL_MISSING"
    SERVER_ACL_ALLOW = "SERVER_ACL_ALLOW"
    SERVER_ACL_IP_LITERALS = "SERVER_ACL_IP_LITERALS"
    MEMBER_DUPLICATE = "MEMBER_DUPLICATE"
    REMOTE_MEMBER = "REMOTE_MEMBER"
    EXTRA_JOINED = "EXTRA_JOINED"
    EXTRA_INVITED = "EXTRA_INVITED"
    EXTRA_KNOCKING = "EXTRA_KNOCKING"
    MISSING_SUBJECT = "MISSING_SUBJECT"
    MISSING_BOT = "MISSING_BOT"
    MISSING_GHOST = "MISSING_GHOST"


Code = Reason | ControlReason
"""Every ``reason`` value a response or log line of the control API can carry."""


class ControlError(Coded[Code]):
    """A refused control request; ``str()`` is only the code (never request content), and
    ``drift`` the failed room-state checks (a closed set too)."""

    drift: tuple[Drift, ...]

    def __init__(self, code: Code, drift: tuple[Drift, ...] = ()) -> None:
        super().__init__(code)
        self.drift = drift

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.code, self.drift))
