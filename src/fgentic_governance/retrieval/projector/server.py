"""The identity projector as an agentgateway HTTP ext-authz service (aiohttp, low-level server).

Paths: `/v1/project/local` and `/v1/project/public` (the check paths the rendered gateway config
calls; any method, since the check request mirrors the caller's), `GET /healthz`,
`GET /metrics`. A 2xx answer carries exactly X-Fgentic-Identity and X-User-Id; a denial is 403
with a bounded code as its body. Every other request is 404, which agentgateway also treats as
a denial.

Nothing here logs or returns header content. agentgateway relays an ext-authz denial's status
and body to the caller verbatim, and aiohttp's own answer to a malformed request quotes the
offending header bytes, so the shared content-free server (`fgentic_governance.serving.http`)
answers `400 HTTP_REQUEST_REJECTED` and reduces the log record to an exception type. There is
no access log. A check never reads a body; header, keep-alive and linger times are bounded by
the same server.
"""

from __future__ import annotations

import argparse
import functools
import logging
import time
from collections.abc import Callable
from pathlib import Path

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, generate_latest

from fgentic_governance.retrieval import vocabulary as n
from fgentic_governance.retrieval.projector.core import Decision, Headers, Projector
from fgentic_governance.retrieval.projector_config import ProjectorConfigError, load_config
from fgentic_governance.serving import http as serving
from fgentic_governance.serving import process

log = logging.getLogger("fgentic_governance.projector")

# aiohttp's default 8,190-byte header field limit is below the contract's 8,192-byte carrier
# ceiling, so a valid X-Fgentic-Room-Context would be refused by the HTTP parser instead of the
# contract. Well above it, the contract (not the transport) decides (ADR 0017: "an incidental
# transport failure is not accepted as the policy control").
MAX_HEADER_BYTES = 65536
BOUNDS = serving.Bounds(max_field_bytes=MAX_HEADER_BYTES)


class _Metrics:
    """Decisions by route and code: both label sets are closed enums (no principal, no Agent)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.decisions = Counter(
            "fgentic_projector_decisions_total",
            "Identity projector decisions by route, reason and contract detail code.",
            ["route", "reason", "detail"], registry=registry)

    def record(self, route: str, decision: Decision) -> None:
        detail = decision.detail.value if decision.detail else ""
        self.decisions.labels(route, decision.reason.value, detail).inc()


def check_headers(request: web.BaseRequest) -> Headers:
    """All values of every header, by lowercase name (repeats kept, so they can be refused)."""
    headers: dict[str, list[str]] = {}
    for name, value in request.headers.items():
        headers.setdefault(name.lower(), []).append(value)
    return headers


class ProjectorService:
    """The request handler: a fixed table of four paths, no router needed."""

    def __init__(self, projector: Projector, *, clock: Callable[[], float] = time.time) -> None:
        self.projector = projector
        self.registry = CollectorRegistry()
        self._metrics = _Metrics(self.registry)
        self._clock = clock
        self._routes = {n.PROJECT_LOCAL_PATH: ("local", projector.local),
                        n.PROJECT_PUBLIC_PATH: ("public", projector.public)}

    async def __call__(self, request: web.BaseRequest) -> web.StreamResponse:
        check = self._routes.get(request.path)
        if check is not None:
            route, decide = check
            decision = decide(check_headers(request), now=int(self._clock()))
            self._metrics.record(route, decision)
            if decision.allowed:
                return web.Response(status=200, headers=dict(decision.headers))
            log.info("deny route=%s code=%s", route, decision.code)
            return web.Response(status=403, text=decision.code + "\n")
        if request.method == "GET" and request.path == "/healthz":
            return web.Response(text="ok\n")
        if request.method == "GET" and request.path == "/metrics":
            return web.Response(body=generate_latest(self.registry),
                                headers={"Content-Type": CONTENT_TYPE_LATEST})
        return web.Response(status=404, text="NOT_FOUND\n")


def projector_runner(projector: Projector, *,
                     clock: Callable[[], float] = time.time) -> web.ServerRunner:
    """The service on the shared server with the bounds it needs (header limits)."""
    serving.scrub_library_logs()
    return serving.runner(ProjectorService(projector, clock=clock), BOUNDS)


async def serve(shell: process.Shell, projector: Projector, host: str, port: int) -> None:
    """Listen on ``host:port`` until the process stops (:func:`process.run`)."""
    await shell.start(projector_runner(projector), host, port)
    log.info("projector serving on %s:%d (public route %s)", host, port,
             "on" if projector.config.public else "off")


def run_projector(args: argparse.Namespace) -> int:
    """`fgentic-governance projector --config FILE --port N [--host H]`."""
    try:
        config = load_config(Path(args.config))
    except ProjectorConfigError as exc:  # one line and exit 2, as every server's start-up
        raise SystemExit(f"--config {args.config}: {exc}") from None
    process.start_logging()
    projector = Projector(config)
    # uvloop trims the event loop's share of the per-check latency.
    return process.run(functools.partial(serve, projector=projector, host=args.host,
                                         port=args.port), fast_loop=True)
