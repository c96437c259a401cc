"""Leader election for the operator's replicas: one coordination.k8s.io Lease, as
cert-manager's and Kyverno's controllers hold theirs (Kopf's peering only suppresses a
lower-priority operator; it elects nobody).

A replica waits as a standby until it holds the Lease, then runs the handlers and renews the
Lease every RENEW_SECONDS. It stops itself when the Lease is seen held by another replica, or
when RENEW_DEADLINE passes without a renewal; that deadline is a third of the Lease shorter
than the Lease, so the old holder has stopped (STOP_GRACE_SECONDS at most for Kopf to wind
down, then the process exits) before a standby can see the Lease expire and take it.

Stopping is not enough for a process that was frozen (SIGSTOP, a starved node) past the
Lease: on resume its handlers, timers and in-flight calls run before the renewal loop can
notice (review R4-5). So, as client-go's leader election, the deadline is also a gate: it is
measured on this process's own clock from the start of the last successful renewal, and
:func:`ensure_leading` is checked before every handler runs and returns, before every write
to the API server (Kopf's session and ours) and before every store connection is handed out;
past the deadline the process exits at once, having done nothing more.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import functools
import logging
import math
import mmap
import os
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any, Final, ParamSpec, TypeVar

import asyncpg

from fgentic_governance.kube.lease import LEASE_SECONDS, LeaseElector
from fgentic_governance.memory import bounds

log = logging.getLogger("fgentic_governance.controller.leadership")
RETRY_SECONDS: Final = 2.0
RENEW_SECONDS: Final = LEASE_SECONDS / 6
RENEW_DEADLINE: Final = LEASE_SECONDS * 2 / 3
STOP_GRACE_SECONDS: Final = 5.0
P = ParamSpec("P")
T = TypeVar("T")
_shared = mmap.mmap(-1, 8)  # anonymous and shared: no file (an image may have no /dev/shm)
_deadline: Any = ctypes.c_double.from_buffer(_shared)
"""The renew deadline, in shared memory: the erasure process (forked by ``main``) reads the
same one. Until this process leads under a Lease: NaN (no --leader-lease: it runs alone,
ungated); -inf once leadership is lost."""
_deadline.value = math.nan


def now() -> float:
    """The clock the deadline is kept on. Monotonic (a wall-clock step cannot extend it), and
    on Linux CLOCK_BOOTTIME, which also counts time the whole host was suspended (a paused VM);
    a frozen process is counted by either."""
    if sys.platform == "linux":
        return time.clock_gettime(time.CLOCK_BOOTTIME)
    return time.monotonic()


def confirm(started: float) -> None:
    """A renewal (or the acquisition) that began at ``started`` succeeded: this replica may act
    until ``started + RENEW_DEADLINE``. From the start, not the answer: the Lease's renewTime
    is read from the clock before the request is sent, so the standbys count from no earlier."""
    _deadline.value = started + RENEW_DEADLINE


def revoke() -> None:
    """Leadership is lost: nothing more may be done."""
    _deadline.value = -math.inf


def _within(moment: float) -> bool:
    deadline = float(_deadline.value)  # one aligned 8-byte read: never torn
    return math.isnan(deadline) or moment < deadline


async def _leading_setup(_conn: Any) -> None:
    """asyncpg's hook as each connection is handed out: no store work once the leader's renew
    deadline has passed (review R4-5), an erasure's or a cleanup's alike, in either process."""
    ensure_leading()


async def gated_pool(dsn: str, size: int, *, server_settings: Mapping[str, str] | None = None,
                     **options: Any) -> Any:
    """Every store pool of the operator and its erasure process: up to ``size`` connections
    with the operator's bounds (``bounds.pool_kwargs``), each handed out only while this
    replica leads (``_leading_setup``), on the running loop (asyncpg's pools belong to the loop
    that made them). ``server_settings`` extend the bounds' settings; ``options`` replace
    asyncpg's own."""
    kwargs = bounds.pool_kwargs(min_size=1, max_size=size)
    kwargs["server_settings"] = {**kwargs["server_settings"], **(server_settings or {})}
    return await asyncpg.create_pool(dsn, setup=_leading_setup, **{**kwargs, **options})


def ensure_leading() -> None:
    """Exit at once unless this replica's last renewal is within the renew deadline.

    An exception would not do: Kopf answers a failed handler by patching the object (a write)
    and retrying, and a thread's caller may be anywhere. The process exits 1 and restarts as a
    standby, as after any lost Lease. Thread-safe (one float read)."""
    if not _within(now()):
        log.error("operator lease not renewed within %.0f s; exiting before acting",
                  RENEW_DEADLINE)
        os._exit(1)


def gated(fn: Callable[P, Awaitable[T]]) -> Callable[P, Coroutine[Any, Any, T]]:
    """A handler that runs only while this replica leads, checked as it starts and before Kopf
    sees its result (whose patch and log follow at once)."""
    @functools.wraps(fn)
    async def run(*args: P.args, **kwargs: P.kwargs) -> T:
        ensure_leading()
        try:
            return await fn(*args, **kwargs)
        finally:
            ensure_leading()
    return run


async def acquire(elector: LeaseElector, stop: asyncio.Event) -> bool:
    """Wait as a standby until this replica holds the Lease (each attempt's API calls are
    bounded; the standby itself waits as long as another replica leads), or until ``stop``
    (SIGTERM): False then."""
    log.info("operator standby: waiting for lease %s/%s", elector.namespace, elector.name)
    while not stop.is_set():
        started = now()
        if await asyncio.to_thread(elector.try_acquire):
            confirm(started)
            log.info("operator leading")
            return True
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), RETRY_SECONDS)
    return False


async def keep(elector: LeaseElector, stop: asyncio.Event) -> None:
    """Renew the Lease until ``stop``; set ``stop`` when leadership is lost or unconfirmed.
    Past the deadline it does not try again: the gate is already shut, as client-go's."""
    while not stop.is_set():
        await asyncio.sleep(RENEW_SECONDS)
        started = now()
        if _within(started) and await asyncio.to_thread(elector.try_acquire):
            confirm(started)
            continue
        if elector.held_by_other or not _within(now()):
            revoke()
            log.error("operator lease lost (%s); stopping",
                      "held by another replica" if elector.held_by_other else "not renewed")
            stop.set()
            _exit_after(STOP_GRACE_SECONDS)
            return


def _exit_after(seconds: float) -> None:
    """Bound Kopf's wind-down: a handler still running after the grace must not overlap the
    next leader's, so the process ends (exit 1: restarted as a standby)."""
    asyncio.get_running_loop().call_later(seconds, os._exit, 1)
