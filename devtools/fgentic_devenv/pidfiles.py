"""Pid files of the processes the dev environment starts, so `fgentic-dev down` (and the next
`fgentic-dev up`) can stop what a run that was killed outright (SIGKILL, OOM) left running.

Every process gets ``<name>.pid`` beside its ``<name>.log``: ``PID START SIGNAL [DIR]``, where
START is its start time in clock ticks since boot (/proc/PID/stat), so a pid the kernel has
since reused for another program is never signalled, SIGNAL is the one that stops it cleanly
(PostgreSQL: SIGINT, a fast shutdown) and DIR a directory of its own to remove once it is
stopped (PostgreSQL's data directory, under /tmp when run as root).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

STOP_TIMEOUT = 15.0
"""Seconds a process has to exit after its signal before SIGKILL (PostgreSQL's fast shutdown
checkpoints; the others stop in well under a second)."""
_KILL_TIMEOUT = 5.0


@dataclass(frozen=True)
class Recorded:
    path: Path
    pid: int
    start: int
    sig: int
    data: Path | None


def record(log: Path, proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM,
           data: Path | None = None) -> None:
    """Write ``proc``'s pid file beside ``log`` (nothing if it has already exited); ``data``
    is removed once the process is stopped."""
    start = _start_ticks(proc.pid)
    if start is not None:
        log.with_suffix(".pid").write_text(
            f"{proc.pid} {start} {int(sig)}{f' {data}' if data else ''}\n")


def stop_recorded(workdir: Path) -> int:
    """Stop every recorded process of ``workdir`` that still runs, the last started first
    (the servers before the store and the API server before etcd), and remove the pid files.
    Returns how many were running; 0 when there is nothing to stop (idempotent)."""
    found = _recorded(workdir)
    running = sorted((r for r in found if _start_ticks(r.pid) == r.start),
                     key=lambda r: r.start, reverse=True)
    for process in running:
        _stop(process)
    for process in found:
        if process.data is not None:
            shutil.rmtree(process.data, ignore_errors=True)
        process.path.unlink(missing_ok=True)
    return len(running)


def _recorded(workdir: Path) -> list[Recorded]:
    # The run's own files and its components' (controlplane/, postgres/); deeper lies
    # PostgreSQL's postmaster.pid, which is not ours.
    found = []
    for path in [*workdir.glob("*.pid"), *workdir.glob("*/*.pid")]:
        try:
            fields = path.read_text().rstrip("\n").split(" ", 3)
            pid, start, sig = (int(field) for field in fields[:3])
        except (OSError, ValueError):  # not a file of this format: not ours
            continue
        found.append(Recorded(path, pid, start, sig, Path(fields[3]) if fields[3:] else None))
    return found


def _stop(process: Recorded) -> None:
    for sig, timeout in ((process.sig, STOP_TIMEOUT), (signal.SIGKILL, _KILL_TIMEOUT)):
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, sig)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if _start_ticks(process.pid) != process.start:
                return
            time.sleep(0.1)


def _start_ticks(pid: int) -> int | None:
    """The start time of a live (not zombie) process ``pid``, or None."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # Fields after the command name (which may hold spaces): state is field 3, start field 22.
    fields = stat.rpartition(")")[2].split()
    if len(fields) < 20 or fields[0] == "Z":
        return None
    return int(fields[19])
