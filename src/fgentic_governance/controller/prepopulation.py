"""Kopf's index pre-population barrier in linear time (issue 39, a restart holding 10,000 scopes).

Before any handler runs, Kopf indexes every listed object: each object's worker drops its own
toggle from the operator-wide ``ToggleSet`` once it has indexed the object, then waits on the
set's one ``asyncio.Condition`` until every toggle is gone (kopf/_core/reactor/queueing.py,
processing.py). Every toggle made (by the watcher) or dropped (by a worker) calls
``notify_all``, which wakes every worker already waiting, each to take the lock in turn and
re-check: O(waiting) per object, O(n²) per start. At 20,000 objects (10,000 scopes and their
ConsentRecords) that was five silent minutes before the first handler; at 2,000 objects ~8 s.

The fix keeps Kopf's semantics (return once the set is in the wanted state) but lets one task
per set and state wait on the condition; every other caller awaits that task, so a
notification wakes at most one waiter per state. Kopf 1.45 has no setting for it; the one
hook point is ``aiotoggles.ToggleSet.wait_for``, checked by tests/unit/test_prepopulation.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, Final

from kopf._cogs.aiokits import aiotoggles

_INSTALLED: Final = "_fgentic_shared_wait"
_WAITS: Final = "_fgentic_waits"


Wait = Callable[[aiotoggles.ToggleSet, bool], Coroutine[Any, Any, None]]


def _shared(original: Wait) -> Wait:
    async def wait_for(self: aiotoggles.ToggleSet, state: bool, /) -> None:
        wanted = bool(state)
        while self.is_on() != wanted:
            waits: dict[bool, asyncio.Future[None]] = self.__dict__.setdefault(_WAITS, {})
            waiter = waits.get(wanted)
            if waiter is None or waiter.done():
                waiter = waits[wanted] = asyncio.ensure_future(original(self, wanted))
            # Shielded: one caller cancelled (its object deleted, the operator stopping)
            # does not cancel the others' wait.
            await asyncio.shield(waiter)

    setattr(wait_for, _INSTALLED, True)
    return wait_for


def share_barrier_waits() -> None:
    """Install the shared wait once per process (idempotent), before Kopf starts."""
    original = getattr(aiotoggles.ToggleSet, "wait_for", None)
    if original is None or not callable(original):  # a Kopf without the hook point
        raise SystemExit("kopf: no aiotoggles.ToggleSet.wait_for to share; "
                         "this operator needs kopf 1.45")
    if not getattr(original, _INSTALLED, False):
        setattr(aiotoggles.ToggleSet, "wait_for", _shared(original))  # noqa: B010


def installed() -> bool:
    return bool(getattr(aiotoggles.ToggleSet.wait_for, _INSTALLED, False))
