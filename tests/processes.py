"""Run our own console script as a child process in tests."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

from fgentic_governance.devenv import free_port, terminate, wait_until
from fgentic_governance.devenv.up import port_open, spawn_cli

__all__ = ["free_port", "spawn_and_wait", "spawn_cli", "stop"]


def spawn_and_wait(args: Sequence[str], log: Path, port: int) -> subprocess.Popen[bytes]:
    proc = spawn_cli(args, log)
    wait_until(lambda: port_open(port), proc, what=args[0], log=log, timeout=60)
    return proc


def stop(proc: subprocess.Popen[bytes]) -> None:
    terminate(proc)
