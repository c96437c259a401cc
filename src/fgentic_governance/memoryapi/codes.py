"""Bounded, content-free codes of the memory API and its one exception.

Store refusals keep their :class:`~fgentic_governance.reasons.Reason` (LEASE_MISSING,
SCOPE_DISABLED, COST_CEILING_REACHED, ...); what exists only at this boundary - the workload's
identity, the request's shape, the upstream - is an :class:`ApiReason`. The error body is
``{"error": <code>}``, kagent's error shape: the runtime logs error bodies, so nothing else may
be in them.
"""

from __future__ import annotations

from enum import StrEnum
from types import MappingProxyType
from typing import Final

from fgentic_governance.reasons import Coded, Reason


class ApiReason(StrEnum):
    UNAUTHENTICATED = "UNAUTHENTICATED"
    """No Bearer token, or TokenReview did not authenticate it for audience ``kagent``."""
    AGENT_UNRESOLVED = "AGENT_UNRESOLVED"
    """The token's service account runs no memory-enabled Agent, or more than one."""
    AGENT_MISMATCH = "AGENT_MISMATCH"
    """``X-Agent-Name`` or a body ``agent_name`` is not the token's Agent."""
    USER_MISSING = "USER_MISSING"
    """No ``X-User-Id``: the runtime's anonymous ``A2A_USER_<context>`` never gets memory."""
    USER_MISMATCH = "USER_MISMATCH"
    """A body ``user_id`` differs from ``X-User-Id``."""
    REQUEST_MALFORMED = "REQUEST_MALFORMED"
    REQUEST_TOO_LARGE = "REQUEST_TOO_LARGE"
    METHOD_NOT_ALLOWED = "METHOD_NOT_ALLOWED"
    ERASURE_NOT_HERE = "ERASURE_NOT_HERE"
    """``GET``/``DELETE /api/memories``: listing and erasure are the control API's."""
    PATH_REFUSED = "PATH_REFUSED"
    """A path that could name the controller's memory routes in another spelling."""
    TARGET_REFUSED = "TARGET_REFUSED"
    """A request target that is not origin-form (``CONNECT``'s authority, ``*``, an absolute
    URL) or that carries a fragment: nothing but a path and query is ever passed through."""
    CLIENT_BUSY = "CLIENT_BUSY"
    """The source address already has its share of pass-through requests in flight."""
    IDENTITY_UNAVAILABLE = "IDENTITY_UNAVAILABLE"
    """The Kubernetes API (TokenReview, Agent lookup) did not answer in time."""
    UPSTREAM_UNAVAILABLE = "UPSTREAM_UNAVAILABLE"
    UPSTREAM_BUSY = "UPSTREAM_BUSY"
    """Readiness: every upstream connection is held, so a pass-through request would wait."""


Code = Reason | ApiReason


class ApiError(Coded[Code]):
    """A refused request; ``str()`` is only the code."""


STATUS: Final = MappingProxyType({
    ApiReason.UNAUTHENTICATED: 401,
    ApiReason.REQUEST_MALFORMED: 400,
    ApiReason.TARGET_REFUSED: 400,
    Reason.INVALID_SPEC: 400,
    Reason.FACT_TOO_LARGE: 400,
    Reason.SUMMARY_TOO_LARGE: 400,
    Reason.SUMMARY_INPUT_TOO_LARGE: 413,
    ApiReason.METHOD_NOT_ALLOWED: 405,
    ApiReason.REQUEST_TOO_LARGE: 413,
    Reason.RATE_LIMITED: 429,
    ApiReason.CLIENT_BUSY: 429,
    Reason.COST_CEILING_REACHED: 429,
    Reason.RECALL_LIMIT_REACHED: 429,
    Reason.SUMMARY_CADENCE_REACHED: 429,
    Reason.INTERNAL_ERROR: 500,
    ApiReason.UPSTREAM_UNAVAILABLE: 502,
    ApiReason.IDENTITY_UNAVAILABLE: 503,
    ApiReason.UPSTREAM_BUSY: 503,
    Reason.STORE_UNAVAILABLE: 503,
    Reason.STORE_RESTARTING: 503,
    Reason.STORE_LOCK_TIMEOUT: 503,
    Reason.STORE_SCHEMA_MISMATCH: 503,
})
"""Every other code (identity, lease, scope and fence refusals) is 403."""


def status_of(code: Code) -> int:
    return STATUS.get(code, 403)
