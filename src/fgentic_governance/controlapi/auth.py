"""Workload authentication of the control API: a bearer token read from a mounted file.

The API is cluster-internal. Two layers admit a caller: the NetworkPolicy (only the bridge's
pods reach the port) and this token, which the bridge reads from the same Secret. Either alone
is not enough: a NetworkPolicy is not enforced by every CNI, and a token can leak; together
they are the workload authentication ADR 0023 §28 asks for.

The file is re-read when its size or modification time changes, so a rotated Secret takes
effect without a restart. A missing, unreadable or too-short token refuses every request.
"""

from __future__ import annotations

import hmac
import os
from pathlib import Path
from typing import Final

MIN_TOKEN_BYTES: Final = 32
_SCHEME: Final = b"bearer "


class BearerTokenFile:
    def __init__(self, path: Path) -> None:
        self._path = path
        self._stamp: tuple[int, int] | None = None
        self._token: bytes = b""

    def _current(self) -> bytes:
        try:
            info = os.stat(self._path)
            stamp = (info.st_mtime_ns, info.st_size)
            if stamp != self._stamp:
                self._token = self._path.read_bytes().strip()
                self._stamp = stamp
        except OSError:
            self._stamp, self._token = None, b""
        return self._token if len(self._token) >= MIN_TOKEN_BYTES else b""

    def ready(self) -> bool:
        return bool(self._current())

    def admits(self, authorization: str | None) -> bool:
        """Whether an ``Authorization`` header value carries the current token."""
        expected = self._current()
        if not expected or authorization is None:
            return False
        presented = authorization.encode("utf-8", "replace")
        if presented[:len(_SCHEME)].lower() != _SCHEME:
            return False
        # compare_digest: the time taken does not depend on how much of the token matched.
        return hmac.compare_digest(presented[len(_SCHEME):].strip(), expected)
