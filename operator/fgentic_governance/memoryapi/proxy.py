"""Pass-through of everything that is not ours to the real kagent controller (aiohttp shell).

Sessions, events and tasks go upstream unchanged: method, path and query as received, every
end-to-end header (hop-by-hop ones and Host excluded, as HTTP requires), the body streamed
in both directions, the upstream status and headers returned, compressed bodies left as they
are. Nothing of them is logged; the metric has the status class only.
"""

from __future__ import annotations

from typing import Final

import aiohttp
from aiohttp import web
from multidict import CIMultiDict
from prometheus_client import Counter
from yarl import URL

HOP_BY_HOP: Final = frozenset({
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "proxy-connection",
    "te", "trailer", "trailers", "transfer-encoding", "upgrade", "host"})
CHUNK: Final = 64 * 1024
PASSED: Final = Counter("fgentic_memory_api_passthrough",
                        "Requests passed through to the kagent controller, by status class.",
                        ["status"])


def session(*, connect_seconds: float = 5.0, read_seconds: float = 300.0) -> aiohttp.ClientSession:
    """The upstream client: bounded connect and per-read waits, no decompression, no redirects
    followed (the runtime sees them itself), no cookies kept."""
    timeout = aiohttp.ClientTimeout(total=None, connect=connect_seconds,
                                    sock_read=read_seconds)
    return aiohttp.ClientSession(timeout=timeout, auto_decompress=False,
                                 cookie_jar=aiohttp.DummyCookieJar())


def _end_to_end(headers: CIMultiDict[str] | aiohttp.typedefs.LooseHeaders) -> CIMultiDict[str]:
    kept: CIMultiDict[str] = CIMultiDict()
    for name, value in CIMultiDict(headers).items():
        if name.lower() not in HOP_BY_HOP:
            kept.add(name, value)
    return kept


async def forward(request: web.BaseRequest, upstream: aiohttp.ClientSession,
                  base_url: str, *, target: str | None = None) -> web.StreamResponse:
    """Relay ``request`` to ``base_url`` + its raw path and query (``encoded=True``: no
    re-quoting), or to exactly ``target``; 502 when the upstream cannot be reached."""
    data = request.content if request.body_exists else None
    url = URL(target, encoded=True) if target else URL(base_url + request.raw_path, encoded=True)
    try:
        answer = await upstream.request(
            request.method, url, headers=_end_to_end(request.headers), data=data,
            allow_redirects=False)
    except (aiohttp.ClientError, TimeoutError):
        PASSED.labels(status="unreachable").inc()
        return web.json_response({"error": "UPSTREAM_UNAVAILABLE"}, status=502)
    async with answer:
        response = web.StreamResponse(status=answer.status, reason=answer.reason,
                                      headers=_end_to_end(answer.headers))
        await response.prepare(request)
        async for chunk in answer.content.iter_chunked(CHUNK):
            await response.write(chunk)
        await response.write_eof()
    PASSED.labels(status=f"{answer.status // 100}xx").inc()
    return response
