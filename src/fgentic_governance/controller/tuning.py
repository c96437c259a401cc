"""The operator's tuning read from the environment: one home, each setting bounded.

Every interval and every count the operator takes from its environment is parsed here, by one
parser, so a value that is not a number within its bounds stops the operator at start-up with
a message naming the variable and its bounds (`check`), instead of meaning a busy loop (0), a
resync that never comes (1e9), a pool of no connections or a crash deep inside Kopf later. The
chart sets some of these from ``operator.tuning`` (docs/architecture.md, "Operator tuning").
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, ClassVar, Final, Generic, TypeVar

HOUR: Final = 3600.0


N = TypeVar("N", int, float)


@dataclass(frozen=True)
class Bounded(Generic[N]):
    """A number from the variable ``env``: ``default`` when unset, else one from ``low`` to
    ``high`` (`Seconds`, `Count`)."""

    env: str
    default: N
    low: N
    high: N
    expected: ClassVar[str]  # what the message says was expected

    def convert(self, text: str) -> N:
        raise NotImplementedError

    def parse(self, value: str | None) -> N:
        """``value`` (the variable's text; None: unset) as a number; SystemExit when it is not
        one within the bounds (NaN and infinities included)."""
        if value is None:
            return self.default
        try:
            number: N | None = self.convert(value)
        except ValueError:
            number = None
        if number is None or not self.low <= number <= self.high:  # (NaN fails too)
            # The operator's own configuration, not content; cut short all the same.
            raise SystemExit(f"{self.env}={value[:32]!r}: expected {self.expected} from "
                             f"{self.low:g} to {self.high:g}")
        return number

    def read(self) -> N:
        """The value in this process's environment (read each time: a few microseconds)."""
        return self.parse(os.environ.get(self.env))


@dataclass(frozen=True)
class Seconds(Bounded[float]):
    """An interval in seconds."""

    expected: ClassVar[str] = "a number of seconds"

    def convert(self, text: str) -> float:
        return float(text)


@dataclass(frozen=True)
class Count(Bounded[int]):
    """A whole number (decimal digits only: no "8.0", "1e1" or "0x8")."""

    expected: ClassVar[str] = "a whole number"

    def convert(self, text: str) -> int:
        if not text.strip().isdecimal():
            raise ValueError(text)
        return int(text)


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
RECONCILE_SLOTS: Final = Count("FGENTIC_RECONCILE_SLOTS", 8, 1, 64)
"""Reconcile slots, and as many connections of the scope pool (controller/lanes.py); at most
64: PostgreSQL's default max_connections is 100 for every process and replica together."""
API_CONNECTIONS: Final = Count("FGENTIC_API_CONNECTIONS", 16, 1, 256)
"""Connections to the API server shared by the handlers, on top of one per watch stream
(controller/login.py): at least one, or no handler's call could ever be sent."""
ALL: Final[tuple[Bounded[Any], ...]] = (SCOPE_RESYNC, BINDING_RESYNC, STORE_CLEANUP,
                                         STORE_SETTINGS, RECONCILE_SLOTS, API_CONNECTIONS)


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
