"""The one exception of the content store boundary, and the SQLSTATE table behind it.

Every refusal the database raises carries a custom SQLSTATE of class ``FG`` and a MESSAGE that
is exactly a reason code. Python turns those (and every other driver error) into
:class:`StoreRefusal`, whose text is only the code: no query, fact, parameter or server DETAIL
can reach an exception message, a log line or a traceback through this boundary.
"""

from __future__ import annotations

from collections.abc import Awaitable
from types import MappingProxyType
from typing import Final, TypeVar

import asyncpg

from fgentic_governance.reasons import Coded, Reason

T = TypeVar("T")

# Mirrors the store's refusal table (sql/functions/refuse_listed.sql and refuse.sql); a test
# asserts they agree.
SQLSTATE_REASONS: Final = MappingProxyType({
    "FG001": Reason.SCOPE_MISSING,
    "FG002": Reason.SCOPE_DISABLED,
    "FG003": Reason.CAPTURE_DISABLED,
    "FG004": Reason.STALE_GENERATION,
    "FG005": Reason.ENTRY_CAP_REACHED,
    "FG006": Reason.FACT_TOO_LARGE,
    "FG007": Reason.RETENTION_EXCEEDED,
    "FG008": Reason.EXPIRY_EXTENSION_DENIED,
    "FG009": Reason.CONSENT_SUBJECT_MISMATCH,
    "FG010": Reason.FEDERATION_DENIED,
    "FG011": Reason.BINDING_CONFLICT,
    "FG012": Reason.INVALID_SPEC,
    "FG013": Reason.COST_CEILING_REACHED,
    "FG014": Reason.RATE_LIMITED,
    "FG015": Reason.CREDENTIAL_CONTENT,
    "FG016": Reason.HIGH_RISK_INSTRUCTION_CONTENT,
    "FG017": Reason.LEASE_MISSING,
    "FG018": Reason.SCOPE_AMBIGUOUS,
    "FG019": Reason.ISOLATION_REFUSED,
    "FG020": Reason.LEASE_LIMIT_REACHED,
    "FG021": Reason.RECALL_LIMIT_REACHED,
    "FG022": Reason.SUMMARY_TOO_LARGE,
    "FG023": Reason.SUMMARY_CADENCE_REACHED,
    "FG024": Reason.SUMMARY_INPUT_TOO_LARGE,
    "FG025": Reason.CONTEXT_CONFLICT,
    # refuse() itself raises the posture floors' two codes; refuse_listed() every other.
    "FG040": Reason.POSTURE_FLOOR_DISABLED,
    "FG041": Reason.POSTURE_FLOOR_CAPTURE_DISABLED,
    "FG999": Reason.INTERNAL_ERROR,
})

# Transient server states: the caller may retry; nothing was applied.
_UNAVAILABLE_STATES: Final = frozenset({"40001", "40P01", "57014", "57P01", "57P02",
                                        "57P03", "53300"})
# lock_not_available: a bounded lock wait (lock_timeout, memory/bounds.py) ran out.
_LOCK_STATES: Final = frozenset({"55P03"})
_UNAVAILABLE_CLASSES: Final = ("08", "53", "58")
# The schema is absent or older than this code.
_SCHEMA_STATES: Final = frozenset({"3F000", "42P01", "42883", "42703", "42704"})
# A duplicate binding or a scope dropped while rows still reference it.
_BINDING_STATES: Final = frozenset({"23505", "23503"})


class StoreRefusal(Coded[Reason]):
    """A refused or failed content-store operation; ``str()`` is only the reason code."""

    @property
    def reason(self) -> Reason:
        return self.code


def _reason_for_state(state: str) -> Reason:
    if state in SQLSTATE_REASONS:
        return SQLSTATE_REASONS[state]
    if state in _LOCK_STATES:
        return Reason.STORE_LOCK_TIMEOUT
    if state in _UNAVAILABLE_STATES or state.startswith(_UNAVAILABLE_CLASSES):
        return Reason.STORE_UNAVAILABLE
    if state in _SCHEMA_STATES:
        return Reason.STORE_SCHEMA_MISMATCH
    if state in _BINDING_STATES:
        return Reason.BINDING_CONFLICT
    return Reason.INTERNAL_ERROR


def reason_for(exc: BaseException) -> Reason | None:
    """The reason code for a store-boundary error, or None if it is not one (a bug)."""
    if isinstance(exc, StoreRefusal):
        return exc.reason
    if isinstance(exc, asyncpg.PostgresError):
        return _reason_for_state(str(getattr(exc, "sqlstate", "") or ""))
    # asyncpg.InterfaceError covers DataError, whose text can quote a bound parameter.
    # InternalClientError is what the driver raises when the primary dies under it and no
    # other class fits: a connection reset that finds the protocol mid-operation ("cannot
    # switch to state"; tests/ha), or TargetServerAttributeNotMatched, every host answered and
    # none is the primary (a failover's gap). Unavailable, not a bug; the pool drops that
    # connection. Whether a commit sent just before landed is unknown: the caller retries.
    if isinstance(exc, asyncpg.InterfaceError | OSError | TimeoutError
                  | asyncpg.exceptions.InternalClientError):
        return Reason.STORE_UNAVAILABLE
    return None


async def guarded(work: Awaitable[T]) -> T:
    """Await ``work``; re-raise any store-boundary error as a context-free StoreRefusal.

    The refusal is raised after the ``except`` block has finished, so it carries no
    ``__context__``: the original driver exception (whose DETAIL may quote a row) is dropped,
    not merely hidden from tracebacks.
    """
    try:
        return await work
    except Exception as exc:
        reason = reason_for(exc)
        if reason is None:
            raise
    raise StoreRefusal(reason)
