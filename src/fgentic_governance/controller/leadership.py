"""Leader election for the operator's replicas: one coordination.k8s.io Lease, as
cert-manager's and Kyverno's controllers hold theirs (Kopf's peering only suppresses a
lower-priority operator; it elects nobody).

A replica waits as a standby until it holds the Lease, then runs the handlers and renews the
Lease every RENEW_SECONDS. It stops itself when the Lease is seen held by another replica, or
when RENEW_DEADLINE passes without a renewal; that deadline is a third of the Lease shorter
than the Lease, so the old holder has stopped (STOP_GRACE_SECONDS at most for Kopf to wind
down, then the process exits) before a standby can see the Lease expire and take it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable
from typing import Final

from fgentic_governance.kube.lease import LEASE_SECONDS, LeaseElector

log = logging.getLogger("fgentic_governance.controller.leadership")
RETRY_SECONDS: Final = 2.0
RENEW_SECONDS: Final = LEASE_SECONDS / 6
RENEW_DEADLINE: Final = LEASE_SECONDS * 2 / 3
STOP_GRACE_SECONDS: Final = 5.0


async def acquire(elector: LeaseElector, stop: asyncio.Event) -> bool:
    """Wait as a standby until this replica holds the Lease (each attempt's API calls are
    bounded; the standby itself waits as long as another replica leads), or until ``stop``
    (SIGTERM): False then."""
    log.info("operator standby: waiting for lease %s/%s", elector.namespace, elector.name)
    while not stop.is_set():
        if await asyncio.to_thread(elector.try_acquire):
            log.info("operator leading")
            return True
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), RETRY_SECONDS)
    return False


async def keep(elector: LeaseElector, stop: asyncio.Event,
               clock: Callable[[], float] = time.monotonic) -> None:
    """Renew the Lease until ``stop``; set ``stop`` when leadership is lost or unconfirmed."""
    renewed = clock()
    while not stop.is_set():
        await asyncio.sleep(RENEW_SECONDS)
        if await asyncio.to_thread(elector.try_acquire):
            renewed = clock()
            continue
        if elector.held_by_other or clock() - renewed >= RENEW_DEADLINE:
            log.error("operator lease lost (%s); stopping",
                      "held by another replica" if elector.held_by_other else "not renewed")
            stop.set()
            _exit_after(STOP_GRACE_SECONDS)
            return


def _exit_after(seconds: float) -> None:
    """Bound Kopf's wind-down: a handler still running after the grace must not overlap the
    next leader's, so the process ends (exit 1: restarted as a standby)."""
    asyncio.get_running_loop().call_later(seconds, os._exit, 1)
