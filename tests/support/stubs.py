"""Stub servers' one start and stop: an aiohttp app on a free 127.0.0.1 port in the current
event loop, recording every request as it was sent (``LoopbackServer``), or any app served
for the length of a ``with`` block (``loopback_app``). Stubs stand for what is outside the
system: a model, an embeddings provider, kagent's controller, an MCP or A2A backend.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from typing import Any

from aiohttp import web

from fgentic_devenv import free_port


@asynccontextmanager
async def loopback_app(app: web.Application, port: int = 0) -> AsyncIterator[int]:
    """Serve ``app`` on 127.0.0.1 (``port``, or a free one) until the block ends; yields the
    port."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = port or free_port()
    try:
        await web.TCPSite(runner, "127.0.0.1", port).start()
        yield port
    finally:
        await runner.cleanup()


# -- recording -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Recorded:
    """One request as a stub received it."""

    method: str
    path: str
    """The path as sent, undecoded."""
    query: str
    """The query string as sent, undecoded."""
    headers: tuple[tuple[str, str], ...]
    """Every header line (lowercase names, repeats and order kept)."""
    body: bytes
    status: int = 0
    """The status the stub answered (0 while the handler runs or if it raised)."""

    def header(self, name: str) -> str | None:
        values = [v for k, v in self.headers if k == name.lower()]
        return values[0] if values else None

    def json(self) -> Any:
        return json.loads(self.body)


class LoopbackServer:
    """An aiohttp app on a free 127.0.0.1 port in the current event loop, recording every
    request before its handler runs."""

    handler_args: dict[str, Any] | None = None
    """aiohttp request-handler settings (e.g. larger header bounds for a recording hop)."""

    def __init__(self) -> None:
        self.requests: list[Recorded] = []
        self.port = 0
        self._runner: web.AppRunner | None = None

    def routes(self, app: web.Application) -> None:
        raise NotImplementedError

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @web.middleware
    async def _record(self, request: web.Request,
                      handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                      ) -> web.StreamResponse:
        path, _, query = request.raw_path.partition("?")  # the request line's target as sent
        record = Recorded(request.method, path, query,
                          tuple((k.decode("latin-1").lower(), v.decode("latin-1"))
                                for k, v in request.raw_headers),
                          await request.read())
        index = len(self.requests)
        self.requests.append(record)  # in arrival order, even if the handler fails
        try:
            response = await handler(request)
        except web.HTTPException as exc:  # e.g. aiohttp's 404 for a route the stub lacks
            self.requests[index] = replace(record, status=exc.status)
            raise
        self.requests[index] = replace(record, status=response.status)
        return response

    async def start(self, port: int = 0) -> None:
        """Listen on ``port`` (a stopped stub starting again where it was), else a free one."""
        app = web.Application(middlewares=[self._record], client_max_size=16 * 1024 * 1024)
        self.routes(app)
        self._runner = web.AppRunner(app, access_log=None, **(self.handler_args or {}))
        await self._runner.setup()
        self.port = port or free_port()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    async def __aenter__(self) -> LoopbackServer:
        await self.start()
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.stop()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
