"""Does a collected kagent embeddings client stall the next connect? Prints the outcome.

Executed by the python of the kagent runtime venv (``python -P kagent_client_hazard.py on|off``),
never imported by the test process. kagent-adk 0.9.11's ``KAgentEmbedding`` embeds once
through a new ``AsyncOpenAI`` client against a loopback server and leaves the client, with
its idle keep-alive connection, for the garbage collector. With ``on`` the cyclic collector
runs at once (as it may at any allocation in a busy runtime): the transport's ``__del__``
closes the socket and openai's ``__del__`` schedules ``aclose()``. A new socket, which gets
the freed descriptor number, starts connecting in the same step; when the scheduled
``aclose()`` runs it unregisters that descriptor, and the connect never completes ("stalled"
after 3 s). With ``off`` (the collector disabled, as ``kagent_runner.py`` runs the runtime)
it completes ("connected"). Loopback only.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import socket
import sys

from kagent.adk.models._embedding import KAgentEmbedding
from kagent.adk.types import EmbeddingConfig

ANSWER = json.dumps({
    "object": "list", "model": "m", "usage": {"prompt_tokens": 1, "total_tokens": 1},
    "data": [{"object": "embedding", "index": 0, "embedding": [0.5] * 768}]}).encode()


async def _serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """A minimal OpenAI embeddings endpoint that keeps the connection alive."""
    with contextlib.suppress(asyncio.IncompleteReadError, asyncio.CancelledError,
                             ConnectionError):
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length:"))
            await reader.readexactly(length)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                         b"Content-Length: %d\r\n\r\n" % len(ANSWER) + ANSWER)
            await writer.drain()


async def stall_or_connect(collector: bool) -> str:
    if not collector:
        gc.disable()
    server = await asyncio.start_server(_serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    embedding = KAgentEmbedding(EmbeddingConfig(
        provider="openai", model="m", base_url=f"http://127.0.0.1:{port}/v1"))
    if len(await embedding.generate("a fact")) != 768:
        return "no embedding"
    if collector:
        gc.collect()
    sock = socket.socket()
    sock.setblocking(False)
    try:
        async with asyncio.timeout(3):  # not wait_for: the connect must start in this step
            await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
        return "connected"
    except TimeoutError:
        return "stalled"
    finally:
        sock.close()
        server.close()


if __name__ == "__main__":
    print(asyncio.run(stall_or_connect(sys.argv[1] == "on")), flush=True)
