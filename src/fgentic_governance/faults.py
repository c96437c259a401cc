"""Fault injection for the crash tests (tests/faults): die at one named step of a flow.

``FGENTIC_FAULT_KILL_AT=<step>`` is read once, at import. When the running flow reaches the
``point(<step>)`` of that name, the process sends itself SIGKILL: no cleanup, no finally
blocks, no status written, exactly like an OOM kill or a node loss. Unset (production), every
``point`` is one comparison against None. An unknown step name is refused at start-up, so a
typo cannot silently turn a crash test into a plain run.

The steps form a closed set (``STEPS``); each is called at one boundary of
``consent.flow`` (grant, consent withdrawal / erasure), the store's erasure (withdrawals
only) or ``offboarding.flow``:

withdraw.before_fence
    the gates said "disable" and the scope has something to erase; the store is unchanged.
withdraw.after_fence
    inside the store's erasure: the fence (disabled + generation advanced) is committed on its
    own; no row is deleted yet.
withdraw.after_delete
    inside the store's erasure: fenced and the DELETE committed; not verified yet.
withdraw.after_verify
    the store fenced (disabled + generation advanced, so every older read/write is refused),
    deleted and verified; nothing is recorded yet (no status, event or consent receipt).
grant.after_store
    the store enabled the scope at a new generation; nothing is recorded yet (no status,
    event or consent receipt).
offboard.after_enumerate
    the principal's scopes were enumerated (CRs + store); none is disabled yet.
offboard.after_disable
    the first scope is disabled and advanced; the others are not.
offboard.after_disable_all
    every scope is disabled; none is erased.
offboard.after_erase
    the first scope is erased and verified; the others are not.
offboard.before_record
    every scope is erased and verified; the result is not recorded on the offboarding yet.
"""

from __future__ import annotations

import os
import signal
from typing import Final

ENV: Final = "FGENTIC_FAULT_KILL_AT"
STEPS: Final = frozenset({
    "grant.after_store",
    "withdraw.before_fence",
    "withdraw.after_fence",
    "withdraw.after_delete",
    "withdraw.after_verify",
    "offboard.after_enumerate",
    "offboard.after_disable",
    "offboard.after_disable_all",
    "offboard.after_erase",
    "offboard.before_record",
})


def _armed() -> str | None:
    step = os.environ.get(ENV) or None
    if step is not None and step not in STEPS:
        raise ValueError(f"{ENV}: unknown step; expected one of {sorted(STEPS)}")
    return step


_KILL_AT: Final = _armed()
_kin: list[int] = []


def kill_with(pid: int) -> None:
    """A process of ours that this one serves (the operator, for its erasure process): killed
    first at an armed point, so the crash is the whole operator's, as an OOM kill of its Pod."""
    _kin.append(pid)


def point(step: str) -> None:
    """A step boundary: SIGKILL this process (and its kin) if the fault is armed at ``step``."""
    if _KILL_AT is not None and step == _KILL_AT:
        for pid in (*_kin, os.getpid()):
            os.kill(pid, signal.SIGKILL)
