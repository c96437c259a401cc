"""Run our own console script as a child process in tests."""

from __future__ import annotations

import subprocess
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from fgentic_devenv import free_port, terminate, wait_until
from fgentic_devenv.up import port_open, spawn_cli

__all__ = ["free_port", "metric", "metric_total", "spawn_and_wait", "spawn_cli", "stop"]


def spawn_and_wait(args: Sequence[str], log: Path, port: int) -> subprocess.Popen[bytes]:
    proc = spawn_cli(args, log)
    wait_until(lambda: port_open(port), proc, what=args[0], log=log, timeout=60)
    return proc


def stop(proc: subprocess.Popen[bytes]) -> None:
    terminate(proc)


def _scrape(port: int) -> list[str] | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
            return response.read().decode().splitlines()
    except OSError:
        return None


def metric(port: int, series: str) -> float | None:
    """``series``'s value (a name, with its labels as exported: ``name{label="v"}``) on the
    process's /metrics at ``port``; None while the port is not serving or the series absent."""
    values = [line.split()[-1] for line in _scrape(port) or [] if line.startswith(series + " ")]
    return float(values[0]) if values else None


def metric_total(port: int, name: str) -> float | None:
    """The sum of every series of ``name`` (all its label values) at ``port``; None while the
    port is not serving."""
    lines = _scrape(port)
    if lines is None:
        return None
    return sum(float(line.split()[-1]) for line in lines
               if line.startswith((name + " ", name + "{")))


def spawn_operator(kubeconfig: Path, dsn_file: Path, namespaces: Sequence[str],
                   log: Path) -> subprocess.Popen[bytes]:
    """The operator watching ``namespaces``, with the store at the DSN in ``dsn_file``."""
    return spawn_cli(["operator", "--kubeconfig", str(kubeconfig),
                      *[arg for ns in namespaces for arg in ("--namespace", ns)],
                      "--local-homeserver", "fgentic.local", "--store-dsn-file", str(dsn_file)],
                     log)


def spawn_webhook(kubeconfig: Path, work: Path, *, audit_interval: int = 0,
                  memory_api_url: str = "", memory_api_ready_url: str = "",
                  memory_model_url: str = "", extra: Sequence[str] = ()
                  ) -> tuple[subprocess.Popen[bytes], int, bytes]:
    """The webhook on 127.0.0.1 with a fresh serving bundle in ``work/tls``: (process, review
    port, CA bundle). With ``memory_api_url`` it routes memory-enabled Agents' Pods there;
    with ``memory_model_url`` their ModelConfigs must use that governed model route."""
    from fgentic_governance.serving.tls import write_serving_bundle

    _, _, ca = write_serving_bundle(work / "tls", ["127.0.0.1"])
    port = free_port()
    routing = ["--memory-api-url", memory_api_url,
               "--memory-api-ready-url", memory_api_ready_url] if memory_api_url else []
    if memory_model_url:
        routing += ["--memory-model-url", memory_model_url]
    proc = spawn_and_wait(
        ["webhook", "--kubeconfig", str(kubeconfig), "--tls-dir", str(work / "tls"),
         "--host", "127.0.0.1", "--port", str(port), "--health-port", str(free_port()),
         "--local-homeserver", "fgentic.local", "--audit-interval", str(audit_interval),
         *routing, *extra],
        work / "webhook.log", port)
    return proc, port, ca.read_bytes()


def spawn_memory_api(kubeconfig: Path, dsn_file: Path, upstream: str, log: Path
                     ) -> tuple[subprocess.Popen[bytes], int]:
    """The memory API on 127.0.0.1 (the pool assumes the runtime role): (process, port)."""
    port = free_port()
    proc = spawn_and_wait(
        ["memory-api", "--kubeconfig", str(kubeconfig), "--store-dsn-file", str(dsn_file),
         "--upstream", upstream, "--local-homeserver", "fgentic.local",
         "--host", "127.0.0.1", "--port", str(port)], log, port)
    return proc, port
