"""Bounded words for why a call to the Kubernetes API (or anything else) failed (pure).

:func:`failure_code` is the metric/event label; :class:`RequestFailed` is the one line a
process prints when a request it cannot start without fails: the verb, the resource (and the
name our own flags gave it), the status, the API server's bounded reason and what it usually
means. Never the API server's message or body: they may quote the request.
"""

from __future__ import annotations

import http
import json
from typing import Final

STATUS_REASONS: Final = frozenset({
    "Unauthorized", "Forbidden", "NotFound", "AlreadyExists", "Conflict", "Gone", "Invalid",
    "ServerTimeout", "Timeout", "TooManyRequests", "BadRequest", "MethodNotAllowed",
    "NotAcceptable", "RequestEntityTooLarge", "UnsupportedMediaType", "InternalError",
    "Expired", "ServiceUnavailable"})
"""metav1.StatusReason: the only words of a Status body a line may carry."""
MEANINGS: Final = {
    401: "the credentials were not accepted",
    403: "the service account lacks this permission (the chart's Role or ClusterRole for "
         "this component; docs/troubleshooting.md)",
    404: "the object or its kind does not exist",
    409: "another writer changed it first",
    429: "the API server is throttling this client",
}


def failure_code(exc: BaseException) -> str:
    """The API server's HTTP status as ``API_STATUS_<status>`` (a 403 is a ClusterRole missing
    a verb) or the exception's class; never its message, which may quote the request."""
    status = _status(exc)
    return f"API_STATUS_{status}" if status is not None else type(exc).__name__


def _status(exc: BaseException) -> int | None:
    status = getattr(exc, "status", None)
    return status if isinstance(status, int) and 100 <= status <= 599 else None


def status_reason(exc: BaseException) -> str:
    """The Status body's ``reason`` when it is one of STATUS_REASONS, else the HTTP phrase."""
    body = getattr(exc, "body", None)
    try:
        reason = json.loads(body).get("reason") if body else None
    except (ValueError, TypeError, AttributeError):
        reason = None
    if isinstance(reason, str) and reason in STATUS_REASONS:
        return reason
    status = _status(exc)
    try:
        return http.HTTPStatus(status).phrase if status is not None else "Unknown"
    except ValueError:
        return "Unknown"


def describe(verb: str, resource: str, exc: BaseException) -> str:
    """``Kubernetes request `get secrets/ns/name` failed: status 403 Forbidden: <meaning>``,
    or the class of a failure without a status (the API server unreachable, a timeout)."""
    said = f"Kubernetes request `{verb} {resource}` failed"
    status = _status(exc)
    if status is None:
        return f"{said}: no answer from the API server ({type(exc).__name__})"
    said = f"{said}: status {status} {status_reason(exc)}"
    meaning = MEANINGS.get(status)
    return f"{said}: {meaning}" if meaning else said


class RequestFailed(RuntimeError):
    """A Kubernetes request failed; its message is :func:`describe`'s line."""

    def __init__(self, verb: str, resource: str, cause: BaseException) -> None:
        super().__init__(describe(verb, resource, cause))
        self.status = _status(cause)
        self.code = failure_code(cause)


def named(plural: str, name: str, namespace: str = "") -> str:
    """``secrets/fgentic-system/fg-webhook-tls``, ``mutatingwebhookconfigurations/fg``: names
    our own flags give, never an object's content."""
    return "/".join(part for part in (plural, namespace, name) if part)
