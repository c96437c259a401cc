"""The operator's tuning read from the environment: one home, each setting bounded.

Every interval the operator takes from its environment is parsed here, by one parser, so a
value that is not a number of seconds within its bounds stops the operator at start-up with a
message naming the variable and its bounds (`check`), instead of meaning a busy loop (0), a
resync that never comes (1e9) or a crash deep inside Kopf later. The chart sets these from
``operator.tuning`` (docs/architecture.md, "Operator tuning").
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Final

HOUR: Final = 3600.0


@dataclass(frozen=True)
class Seconds:
    """An interval in seconds from the variable ``env``: ``default`` when unset, else a number
    from ``low`` to ``high``."""

    env: str
    default: float
    low: float
    high: float

    def parse(self, value: str | None) -> float:
        """``value`` (the variable's text; None: unset) as seconds; SystemExit when it is not a
        number within the bounds (NaN and infinities included)."""
        if value is None:
            return self.default
        try:
            seconds = float(value)
        except ValueError:
            seconds = math.nan
        if not self.low <= seconds <= self.high:  # (NaN fails too)
            # The operator's own configuration, not content; cut short all the same.
            raise SystemExit(f"{self.env}={value[:32]!r}: expected a number of seconds from "
                             f"{self.low:g} to {self.high:g}")
        return seconds

    def read(self) -> float:
        """The value in this process's environment (read each time: a few microseconds)."""
        return self.parse(os.environ.get(self.env))


SCOPE_RESYNC: Final = Seconds("FGENTIC_SCOPE_RESYNC_SECONDS", 30.0, 1.0, HOUR)
"""The one MemoryScope sweep's interval, and how long an Agent's model route is cached."""
BINDING_RESYNC: Final = Seconds("FGENTIC_BINDING_RESYNC_SECONDS", 60.0, 1.0, HOUR)
"""RetrievalBinding drift correction (a timer per binding)."""
STORE_CLEANUP: Final = Seconds("FGENTIC_STORE_CLEANUP_SECONDS", HOUR, 1.0, 6 * HOUR)
"""Deletion of expired rows (ADR 0023 §27: within 24 h; at most 6 h leaves most of the 24 h
for retries of a failed one)."""
STORE_SETTINGS: Final = Seconds("FGENTIC_STORE_SETTINGS_SECONDS", 60.0, 1.0, HOUR)
"""The store's pinned-settings and pgvector check (a DBA may loosen them at any time), and the
retry of a failed cleanup."""
ALL: Final = (SCOPE_RESYNC, BINDING_RESYNC, STORE_CLEANUP, STORE_SETTINGS)


def check() -> None:
    """Refuse to start on any setting out of bounds, naming every one (not just the first)."""
    problems = []
    for setting in ALL:
        try:
            setting.read()
        except SystemExit as refused:
            problems.append(str(refused))
    if problems:
        raise SystemExit("; ".join(problems))
