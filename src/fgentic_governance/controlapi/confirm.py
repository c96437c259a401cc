"""Single-use confirmation tokens for ``!memory forget all`` and ``!memory off`` (ADR 0023 §17).

The first call issues a token bound to everything the confirmation is about: scope, action,
subject, Agent, control room and the consent generation the user was shown. The second call
must present it within the lifetime; presenting it - successfully or not - consumes it, so a
replay, a token used for the other action, or one raced by a second caller never runs twice.

Pending tokens are kept in the store (``memory.confirmations``, sql/0012), so the two calls may
reach different replicas of the control API. Only a SHA-256 of each token is kept: a database
dump hands out no usable token. Expiry is wall-clock time (``time.time``) of the replica
that issued or redeems, so replicas' clocks should agree to well within the lifetime (NTP).
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Protocol

from fgentic_governance.controlapi.codes import ControlError, ControlReason
from fgentic_governance.memory.confirmations import Action, Binding
from fgentic_governance.reasons import Reason

DEFAULT_TTL: Final = 120.0
MAX_PENDING: Final = 1024

__all__ = ["DEFAULT_TTL", "MAX_PENDING", "Action", "Binding", "ConfirmationBook", "Issued",
           "Ledger"]


class Ledger(Protocol):
    """Where pending tokens live (``memory.confirmations.StoreLedger`` in the product)."""

    async def put(self, digest: bytes, binding: Binding, expires: float, *, now: float,
                  most: int) -> bool: ...
    async def take(self, digest: bytes) -> tuple[Binding, float] | None: ...


@dataclass(frozen=True, slots=True)
class Issued:
    token: str
    expires_at: float


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


class ConfirmationBook:
    """Issues and redeems tokens; ``clock`` is wall-clock seconds (injectable for tests)."""

    def __init__(self, ledger: Ledger, ttl: float = DEFAULT_TTL,
                 clock: Callable[[], float] = time.time, max_pending: int = MAX_PENDING) -> None:
        if not 0 < ttl <= 600:
            raise ValueError("confirmation lifetime must be within (0, 600] seconds")
        self.ttl = ttl
        self._ledger = ledger
        self._clock = clock
        self._max = max_pending

    async def issue(self, binding: Binding) -> Issued:
        """A fresh token for ``binding``; an older pending one for the same binding is void."""
        now = self._clock()
        token = secrets.token_urlsafe(32)
        expires = now + self.ttl
        if not await self._ledger.put(_digest(token), binding, expires, now=now,
                                      most=self._max):
            raise ControlError(Reason.RATE_LIMITED)
        return Issued(token, expires)

    async def redeem(self, token: str, binding: Binding) -> None:
        """Consume ``token``; raises unless it is pending, unexpired and bound to ``binding``."""
        entry = await self._ledger.take(_digest(token))
        if entry is None:
            raise ControlError(ControlReason.CONFIRMATION_INVALID)
        bound, expires = entry
        if self._clock() >= expires:
            raise ControlError(ControlReason.CONFIRMATION_EXPIRED)
        # Constant-time is not needed here: the token itself was matched by its digest.
        if bound != binding:
            raise ControlError(ControlReason.CONFIRMATION_INVALID)
