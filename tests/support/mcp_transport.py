"""The `mcp` SDK's own stateless Streamable HTTP transport, as the retrieval server ran it
before ``retrievalserver.protocol.Protocol`` replaced it.

Kept for tests only, as the reference the lean path is compared with request by request
(tests/unit/test_retrievalserver_protocol.py): the same ``answer`` signature, called as an ASGI
application with the admitted request, the identity in the ASGI scope's ``state``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, MutableMapping, Sequence
from typing import Any

from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings

from fgentic_governance.contract import VerifiedIdentity
from fgentic_governance.retrievalserver.protocol import IDENTITY_KEY, Answer


class SdkProtocol:
    """The SDK's stateless manager, started once; :meth:`answer` runs one admitted request."""

    def __init__(self, server: Server[Any]) -> None:
        # As the server had it: no DNS-rebinding checks (the gateway sends its own Host).
        security = TransportSecuritySettings(enable_dns_rebinding_protection=False)
        self._manager = StreamableHTTPSessionManager(
            app=server, json_response=True, stateless=True, security_settings=security)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[SdkProtocol]:
        async with self._manager.run():
            yield self

    async def answer(self, path: str, headers: Sequence[tuple[bytes, bytes]], body: bytes,
                     identity: VerifiedIdentity) -> Answer:
        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
                 "method": "POST", "scheme": "http", "path": path,
                 "raw_path": path.encode(), "query_string": b"", "root_path": "",
                 "headers": [(k.lower(), v) for k, v in headers], "client": None,
                 "server": None, "state": {IDENTITY_KEY: identity}}
        answer, done = Answer(), asyncio.Event()
        delivered = False

        async def receive() -> dict[str, Any]:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": body, "more_body": False}
            await done.wait()
            return {"type": "http.disconnect"}

        async def send(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                answer.status = int(message["status"])
                answer.headers = [(k.decode("latin-1"), v.decode("latin-1"))
                                  for k, v in message.get("headers", [])]
            elif message["type"] == "http.response.body":
                answer.body += message.get("body", b"")
                if not message.get("more_body", False):
                    done.set()

        try:
            await self._manager.handle_request(scope, receive, send)
        finally:
            done.set()
        return answer
