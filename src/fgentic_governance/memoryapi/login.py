"""Whether the memory API's store login is least privilege, said in its readiness.

The pool assumes ``fgentic_memory_delegate`` at connect, whatever its login. A login that is a
superuser or a member of the store's owner could leave that role (SET ROLE NONE) and act as the
owner. With the chart's ``memoryApi.dsnSecret`` (``--require-delegate-login``) the memory API
is not ready on such a login (STORE_LOGIN_PRIVILEGED); either way the gauge says which it is.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, Final

from prometheus_client import Gauge

from fgentic_governance.memory.readiness import login_privileged, reason_of
from fgentic_governance.reasons import Reason

LOGIN_PRIVILEGED: Final = Gauge(
    "fgentic_memory_api_store_login_privileged",
    "1 when the memory API's store login could act as the store's owner (a superuser or a "
    "member of the owner role), 0 when it holds only what it was granted; checked with each "
    "readiness probe while the store answers.")


class LoginReadiness:
    """``store_ready``, then, while the store answers, whether the login is privileged:
    STORE_LOGIN_PRIVILEGED when ``require`` (and STORE_SCHEMA_MISMATCH before the schema
    exists); otherwise only reported. Each change is logged once, as a bounded code."""

    def __init__(self, store_ready: Callable[[], Awaitable[Reason]], pool: Any,
                 log: logging.Logger, *, require: bool) -> None:
        self._store_ready, self._pool, self._log = store_ready, pool, log
        self._require = require
        self._privileged: bool | None = None

    async def __call__(self) -> Reason:
        reason = await self._store_ready()
        if reason is not Reason.OK:
            return reason
        try:
            privileged = await login_privileged(self._pool)
        except Exception as exc:  # only its class of failure is told, as a code
            return reason_of(exc)
        if privileged is None:  # nothing to say before the operator has migrated
            return Reason.STORE_SCHEMA_MISMATCH if self._require else Reason.OK
        LOGIN_PRIVILEGED.set(1 if privileged else 0)
        if privileged is not self._privileged:
            level = logging.WARNING if privileged else logging.INFO
            self._log.log(level, "store-login privileged=%s required=%s",
                          str(privileged).lower(), str(self._require).lower())
            self._privileged = privileged
        return Reason.STORE_LOGIN_PRIVILEGED if privileged and self._require else Reason.OK
