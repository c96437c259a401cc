"""A bounded name for why a call to the Kubernetes API (or anything else) failed (pure)."""

from __future__ import annotations


def failure_code(exc: BaseException) -> str:
    """The API server's HTTP status as ``API_STATUS_<status>`` (a 403 is a ClusterRole missing
    a verb) or the exception's class; never its message, which may quote the request."""
    status = getattr(exc, "status", None)
    if isinstance(status, int) and 100 <= status <= 599:
        return f"API_STATUS_{status}"
    return type(exc).__name__
