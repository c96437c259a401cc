"""Single-use confirmation tokens for ``!memory forget all`` and ``!memory off`` (ADR 0023 §17).

The first call issues a token bound to everything the confirmation is about: scope, action,
subject, Agent, control room and the consent generation the user was shown. The second call
must present it within the lifetime; presenting it - successfully or not - consumes it, so a
replay, a token used for the other action, or one raced by a second caller never runs twice.

Tokens live in this process only (the API runs as a single replica): a restart drops every
pending confirmation, which fails safe - the user simply confirms again. Only a SHA-256 of each
token is kept, so a memory dump does not hand out usable tokens.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from fgentic_governance.control.codes import ControlError, ControlReason
from fgentic_governance.reasons import Reason

DEFAULT_TTL: Final = 120.0
MAX_PENDING: Final = 1024


class Action(StrEnum):
    FORGET_ALL = "forget_all"
    OFF = "off"


@dataclass(frozen=True, slots=True)
class Binding:
    """What a token authorizes; equality of every field is required to redeem it."""

    scope_key: str
    action: Action
    subject: str
    agent: str
    room: str
    generation: int


@dataclass(frozen=True, slots=True)
class Issued:
    token: str
    expires_at: float


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


class ConfirmationBook:
    """Pending confirmations; ``clock`` is monotonic seconds (injectable for tests)."""

    def __init__(self, ttl: float = DEFAULT_TTL, clock: Callable[[], float] | None = None,
                 max_pending: int = MAX_PENDING) -> None:
        if not 0 < ttl <= 600:
            raise ValueError("confirmation lifetime must be within (0, 600] seconds")
        self.ttl = ttl
        self._clock = clock or time.monotonic
        self._max = max_pending
        self._pending: dict[bytes, tuple[Binding, float]] = {}

    def __len__(self) -> int:
        return len(self._pending)

    def issue(self, binding: Binding) -> Issued:
        """A fresh token for ``binding``; an older pending one for the same binding is void."""
        now = self._clock()
        self._pending = {k: v for k, v in self._pending.items()
                         if v[1] > now and v[0] != binding}
        if len(self._pending) >= self._max:
            raise ControlError(Reason.RATE_LIMITED)
        token = secrets.token_urlsafe(32)
        expires = now + self.ttl
        self._pending[_digest(token)] = (binding, expires)
        return Issued(token, expires)

    def redeem(self, token: str, binding: Binding) -> None:
        """Consume ``token``; raises unless it is pending, unexpired and bound to ``binding``."""
        entry = self._pending.pop(_digest(token), None)
        if entry is None:
            raise ControlError(ControlReason.CONFIRMATION_INVALID)
        bound, expires = entry
        if self._clock() >= expires:
            raise ControlError(ControlReason.CONFIRMATION_EXPIRED)
        # Constant-time is not needed here: the token itself was matched by its digest.
        if bound != binding:
            raise ControlError(ControlReason.CONFIRMATION_INVALID)
