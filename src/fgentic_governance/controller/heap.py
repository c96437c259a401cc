"""Freed heap handed back to the system once a burst of reconciles has drained (issue 39).

A burst (a creation burst, a restart's first reconcile of every scope) allocates and then
frees the bodies, events and handler states of thousands of objects. glibc keeps the pages of
freed small blocks in its arenas (a heap that is not freed at its top is never shrunk) until
it is asked to return them, so the process would otherwise keep what the burst's peak took.
``malloc_trim(0)`` returns every whole free page of every arena. Where the C library has no
such call (musl, macOS) nothing is done. What it returns is in docs/scale.md ("The offboarding
on the erasure lane's own operator": 22-28 MiB after a 10,000-scope burst; first measured in
"10,000 scopes after the start-up fixes", before a restart listed one kind at a time).

Called when the MemoryScope work queue drains after at least ``BURST_RUNS`` runs: at rest a
queue drains after every run, and a trim per run would cost without returning anything.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
from collections.abc import Callable
from typing import Final, Protocol

log = logging.getLogger(__name__)

BURST_RUNS: Final = 1000
"""Runs since the last trim before a drained queue trims again (a start-up or creation burst,
not the occasional reconcile at rest)."""


def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        function = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):
        return None
    function.argtypes, function.restype = [ctypes.c_size_t], ctypes.c_int
    return function


_TRIM: Final = _malloc_trim()


def resident_mib() -> float:
    """This process's resident memory (0.0 where /proc is not there)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            pages = int(statm.read().split()[1])
    except (OSError, ValueError, IndexError):
        return 0.0
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def trim() -> bool:
    """Return the freed heap's whole pages to the system; False where the C library cannot."""
    return _TRIM is not None and bool(_TRIM(0))


class Counted(Protocol):
    """What counts its runs (``workqueue.WorkQueue.runs``): a count that only grows."""

    @property
    def runs(self) -> int: ...


class AfterBursts:
    """``drained()`` from ``queue``: trims once ``BURST_RUNS`` of its runs have ended since the
    last trim (or since this was made). The queue keeps the one count; this keeps where it
    stood at the last trim."""

    def __init__(self, queue: Counted) -> None:
        self._queue = queue
        self._trimmed_at = queue.runs

    def drained(self) -> None:
        runs = self._queue.runs - self._trimmed_at
        if runs < BURST_RUNS:
            return
        before = resident_mib()
        released = trim()
        log.info("work queue drained after %d runs: freed heap %s (resident %.0f -> %.0f MiB)",
                 runs, "returned" if released else "kept", before, resident_mib())
        self._trimmed_at += runs
