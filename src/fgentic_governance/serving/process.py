"""The one process shell of our servers: logging, the event loop, signals, bounded teardown.

The control API, the memory API, the projector and the admission webhook each hand
:func:`run` their async setup. The setup starts what the process serves and registers on the
:class:`Shell` it is given how to stop it: background tasks (cancelled first) and cleanups
(awaited in reverse order of registration, each within ``STOP_TIMEOUT``). :func:`run` logs in
the common format with aiohttp's and asyncio's records scrubbed, installs the SIGTERM/SIGINT
handlers once the setup has returned (a signal during the setup ends the process the default
way: nothing is served yet), serves until one arrives, tears down and returns 0. A setup that
raises is torn down the same way and its exception propagates.

:func:`add_serving_flags` declares the flags every server shares (``--host``, ``--port``,
``--metrics-port``); :func:`add_runtime_flags` and :func:`add_lease_flags` those the operator
and the webhook share. Importing this module is light (no aiohttp): the CLI parser uses it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    import ssl

    from aiohttp import web

    from fgentic_governance.serving.http import Bounds, Handler

log = logging.getLogger("fgentic_governance.serving")

LOG_FORMAT: Final = "%(asctime)s %(levelname)s %(name)s %(message)s"
STOP_TIMEOUT: Final = 20.0
"""Seconds one cleanup may take. A runner drains its connections for at most 15 s
(``serving.http.runner``), so this ends only a cleanup that hangs."""


def add_serving_flags(parser: argparse.ArgumentParser, *, port: int,
                      metrics: bool = False) -> None:
    """``--host`` (every address: a pod serves its own IP), ``--port`` with this process's
    default and, with ``metrics``, ``--metrics-port`` (0: none)."""
    parser.add_argument("--host", default="0.0.0.0")  # noqa: S104 (a pod serves its own IP)
    parser.add_argument("--port", type=int, default=port)
    if metrics:
        parser.add_argument("--metrics-port", type=int, default=0)


def add_runtime_flags(parser: argparse.ArgumentParser) -> None:
    """The operator's and the webhook's way to the cluster and the store: ``--kubeconfig``,
    ``--namespace``, ``--store-dsn-file``, ``--local-homeserver``, the appservice registry and
    ``--metrics-port``."""
    from fgentic_governance.api import appservice  # one flag, the same in every process

    parser.add_argument("--kubeconfig", type=Path, help="default: in-cluster or ~/.kube/config")
    parser.add_argument("--namespace", action="append", help="watch only these namespaces")
    parser.add_argument("--store-dsn-file", type=Path,
                        help="file holding the PostgreSQL DSN (mounted from a Secret)")
    parser.add_argument("--local-homeserver", default="",
                        help="server name of the local homeserver (federation boundary)")
    appservice.add_flag(parser)
    parser.add_argument("--metrics-port", type=int, default=0)


def add_lease_flags(parser: argparse.ArgumentParser, flag: str, role: str) -> None:
    """The Lease that elects one replica (kube/lease.py) and this replica's name in it."""
    parser.add_argument(flag, default="",
                        help=f"NAMESPACE/NAME of the coordination.k8s.io Lease that elects the "
                             f"one replica {role} (empty: this process does; required with "
                             f"several replicas)")
    parser.add_argument("--identity", default="",
                        help="this replica's name in the Lease (default: the host name, plus a "
                             "random suffix for the operator)")


def start_logging() -> None:
    """INFO records in the common format, the libraries' reduced to an exception type."""
    from fgentic_governance.serving import http

    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    http.scrub_library_logs()


class Shell:
    """What a setup registers: what to cancel and what to await when the process stops."""

    def __init__(self, stack: contextlib.AsyncExitStack) -> None:
        self._stack = stack
        self._tasks: list[asyncio.Task[Any]] = []

    def on_stop(self, cleanup: Callable[[], Awaitable[object]]) -> None:
        """Await ``cleanup`` at the stop, within STOP_TIMEOUT, before those registered earlier."""
        self._stack.push_async_callback(_bounded, cleanup)

    def background(self, work: Coroutine[Any, Any, object]) -> asyncio.Task[Any]:
        """Run ``work`` as a task, cancelled when the process stops (before any cleanup)."""
        task = asyncio.create_task(work)
        self._tasks.append(task)
        return task

    async def start(self, runner: web.ServerRunner, host: str, port: int,
                    tls: ssl.SSLContext | None = None) -> web.ServerRunner:
        """``runner`` listening on ``host:port`` (plain HTTP, or TLS with a bounded handshake
        given ``tls``), cleaned up at the stop."""
        from aiohttp import web

        from fgentic_governance.serving import http

        await runner.setup()
        self.on_stop(runner.cleanup)
        site = (web.TCPSite(runner, host, port) if tls is None
                else http.TLSSite(runner, host, port, tls))
        await site.start()
        return runner

    async def serve(self, handler: Handler, host: str, port: int, *,
                    bounds: Bounds | None = None,
                    tls: ssl.SSLContext | None = None) -> web.ServerRunner:
        """``handler`` on the shared content-free server (see :meth:`start`)."""
        from fgentic_governance.serving import http

        return await self.start(http.runner(handler, bounds or http.DEFAULT_BOUNDS),
                                host, port, tls)

    async def metrics(self, host: str, port: int) -> None:
        """Given a port, ``/healthz`` and ``/metrics`` (the default registry) there."""
        from fgentic_governance.serving import http

        if port:
            await self.serve(http.health_handler(), host, port)

    def cancel_background(self) -> None:
        for task in self._tasks:
            task.cancel()


Setup = Callable[[Shell], Awaitable[None]]


async def _bounded(cleanup: Callable[[], Awaitable[object]]) -> None:
    try:
        async with asyncio.timeout(STOP_TIMEOUT):
            await cleanup()
    except TimeoutError:
        log.warning("stop step unfinished after %.0f s", STOP_TIMEOUT)


async def serve_until_stopped(setup: Setup, stop: asyncio.Event | None = None) -> None:
    """Run ``setup``, wait for ``stop`` (default: SIGTERM or SIGINT), then tear down: the
    background tasks are cancelled, then the cleanups awaited, the last registered first."""
    from fgentic_governance.serving import http

    async with contextlib.AsyncExitStack() as stack:
        shell = Shell(stack)
        try:
            await setup(shell)
            await (stop or http.stop_on_signals()).wait()
        finally:
            shell.cancel_background()


def run(setup: Setup, *, fast_loop: bool = False) -> int:
    """The process: :func:`start_logging`, then :func:`serve_until_stopped` on a new event
    loop (uvloop's with ``fast_loop``, when it is installed); 0 once stopped."""
    start_logging()
    if fast_loop:
        try:
            import uvloop
        except ImportError:
            pass
        else:
            uvloop.run(serve_until_stopped(setup))
            return 0
    asyncio.run(serve_until_stopped(setup))
    return 0
