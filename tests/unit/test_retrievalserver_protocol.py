"""The retrieval server's lean MCP path answers every request shape exactly as the `mcp` SDK's
stateless Streamable HTTP transport did (status, headers, body, byte for byte), refusals
included: two real HTTP servers, one our handler over ``protocol.Protocol``, the other the same
handler over the SDK's transport (``tests.support.mcp_transport``), get the same requests."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

import pytest
from aiohttp import ClientSession, ClientTimeout, DummyCookieJar
from mcp.server import streamable_http
from mcp_types import JSONRPCResponse

from fgentic_devenv import free_port
from fgentic_governance import contract
from fgentic_governance.contract import AgentRef, VerifiedIdentity
from fgentic_governance.retrieval.search.prefilter import Hit
from fgentic_governance.retrievalserver import http, protocol, tool
from fgentic_governance.retrievalserver.codes import RetrievalServerError, RetrievalServerReason
from fgentic_governance.serving import http as serving
from tests.support.mcp_requests import VERSION, carrier, rpc_body
from tests.support.mcp_transport import SdkProtocol
from tests.support.projector import AGENT, NOW

TOOL = "search_knowledge"
PATH = "/mcp"
OTHER = AgentRef(namespace=AGENT.namespace, name="another-agent")


class Search:
    """The tool's own argument checks and result, over fixed hits: the protocol layer is what
    is compared, so the store is left out. ``fail`` is a query the provider cannot embed."""

    async def call(self, identity: VerifiedIdentity,
                   arguments: Mapping[str, Any] | None) -> dict[str, Any]:
        query = tool.parse_arguments(arguments)
        if query.text == "fail":
            raise RetrievalServerError(RetrievalServerReason.EMBEDDINGS_UNAVAILABLE)
        return tool.result([Hit(i, f"chunk {i} ü \"q\"", f"docs/{i}.md", i / 7)
                            for i in range(1, query.k + 1)])


INIT_PARAMS = {"protocolVersion": VERSION, "capabilities": {},
               "clientInfo": {"name": "t", "version": "1"}}


def call(arguments: Any, name: str = TOOL, request_id: Any = 1) -> bytes:
    return rpc_body("tools/call", {"name": name, "arguments": arguments}, request_id)


@dataclass(frozen=True)
class Shape:
    body: bytes = b""
    method: str = "POST"
    path: str = PATH
    accept: str | None = "application/json, text/event-stream"
    content_type: str | None = "application/json"
    version: str | None = VERSION
    carriers: tuple[str, ...] | None = None  # None: one valid carrier


SHAPES: dict[str, Shape] = {
    # the session kagent's runtime opens per turn
    "initialize": Shape(rpc_body("initialize", INIT_PARAMS), version=None),
    "initialize, header too": Shape(rpc_body("initialize", INIT_PARAMS)),
    "initialize, capabilities and _meta": Shape(rpc_body("initialize", {
        **INIT_PARAMS, "capabilities": {"roots": {"listChanged": True}, "sampling": {}},
        "_meta": {"progressToken": "p"}}), version=None),
    "initialize without clientInfo": Shape(rpc_body("initialize", {
        "protocolVersion": VERSION, "capabilities": {}}), version=None),
    "initialize without capabilities": Shape(rpc_body("initialize", {
        "protocolVersion": VERSION, "clientInfo": {"name": "t", "version": "1"}}), version=None),
    "initialize without params": Shape(rpc_body("initialize"), version=None),
    "initialize offering 2025-06-18": Shape(rpc_body("initialize", {
        **INIT_PARAMS, "protocolVersion": "2025-06-18"}), version=None),
    "initialize, id 0": Shape(rpc_body("initialize", INIT_PARAMS, 0), version=None),
    "initialize, string id": Shape(rpc_body("initialize", INIT_PARAMS, "init-1"), version=None),
    "initialize, capabilities not an object": Shape(rpc_body("initialize", {
        **INIT_PARAMS, "capabilities": 5}), version=None),
    "initialize, clientInfo without version": Shape(rpc_body("initialize", {
        **INIT_PARAMS, "clientInfo": {"name": "t"}}), version=None),
    "initialize, clientInfo not an object": Shape(rpc_body("initialize", {
        **INIT_PARAMS, "clientInfo": "t"}), version=None),
    "initialize, protocolVersion not a string": Shape(rpc_body("initialize", {
        **INIT_PARAMS, "protocolVersion": 20251125}), version=None),
    "initialize, capabilities.extensions not an object": Shape(rpc_body("initialize", {
        **INIT_PARAMS, "capabilities": {"extensions": 1}}), version=None),
    "initialize, progressToken null": Shape(rpc_body("initialize", {
        **INIT_PARAMS, "_meta": {"progressToken": None}}), version=None),
    "initialize, clientInfo icons not a list": Shape(rpc_body("initialize", {
        **INIT_PARAMS, "clientInfo": {"name": "t", "version": "1", "icons": 1}}), version=None),
    "initialize, clientInfo title a number": Shape(rpc_body("initialize", {
        **INIT_PARAMS, "clientInfo": {"name": "t", "version": "1", "title": 5}}), version=None),
    "initialize, roots not an object": Shape(rpc_body("initialize", {
        **INIT_PARAMS, "capabilities": {"roots": 5}}), version=None),
    "initialize, extra param": Shape(rpc_body("initialize", {**INIT_PARAMS, "x": 1}),
                                     version=None),
    "initialize, _meta not an object": Shape(rpc_body("initialize", {**INIT_PARAMS, "_meta": 5}),
                                             version=None),
    "initialize, params null": Shape(rpc_body("initialize", request_id=1)[:-1]
                                     + b', "params": null}', version=None),
    "initialize as a notification": Shape(rpc_body("initialize", INIT_PARAMS, None),
                                          version=None),
    "initialized": Shape(rpc_body("notifications/initialized", request_id=None)),
    "initialized with params": Shape(rpc_body("notifications/initialized", {"_meta": {}}, None)),
    "initialized with an id": Shape(rpc_body("notifications/initialized")),
    "initialized with params not an object": Shape(
        rpc_body("notifications/initialized", [1], None)),
    "tools/list": Shape(rpc_body("tools/list")),
    "tools/list, empty params": Shape(rpc_body("tools/list", {})),
    "tools/list, cursor": Shape(rpc_body("tools/list", {"cursor": "abc"})),
    "tools/list, cursor not a string": Shape(rpc_body("tools/list", {"cursor": 5})),
    "tools/list, _meta": Shape(rpc_body("tools/list", {"_meta": {"progressToken": 7}})),
    "tools/list as a notification": Shape(rpc_body("tools/list", request_id=None)),
    "tools/list, another param": Shape(rpc_body("tools/list", {"x": 1})),
    "tools/list, cursor null": Shape(rpc_body("tools/list", {"cursor": None})),
    "tools/list, params null": Shape(b'{"jsonrpc":"2.0","id":1,"method":"tools/list",'
                                     b'"params":null}'),
    "tools/list, id 0": Shape(rpc_body("tools/list", request_id=0)),
    "ping": Shape(rpc_body("ping")),
    "ping, empty params": Shape(rpc_body("ping", {})),
    "ping, _meta": Shape(rpc_body("ping", {"_meta": {"progressToken": 1}})),
    "ping, _meta not an object": Shape(rpc_body("ping", {"_meta": [1]})),
    "ping, another param": Shape(rpc_body("ping", {"x": True})),
    "ping, negative id": Shape(rpc_body("ping", request_id=-1)),
    "ping as a notification": Shape(rpc_body("ping", request_id=None)),
    # tool calls: found, refused by the tool, and ids of every kind
    "tools/call": Shape(call({"query": "retention"})),
    "tools/call, k 1": Shape(call({"query": "retention", "k": 1})),
    "tools/call, k 10": Shape(call({"query": "retention policy", "k": 10})),
    "tools/call, unicode query": Shape(call({"query": "Aufbewahrung \u00fc \u2603"})),
    "tools/call, string id": Shape(call({"query": "q"}, request_id="abc-1")),
    "tools/call, id 0": Shape(call({"query": "q"}, request_id=0)),
    "tools/call, negative id": Shape(call({"query": "q"}, request_id=-3)),
    "tools/call, large id": Shape(call({"query": "q"}, request_id=2**62)),
    "tools/call, empty string id": Shape(call({"query": "q"}, request_id="")),
    "tools/call, float id": Shape(call({"query": "q"}, request_id=1.5)),
    "tools/call, null id": Shape(b'{"jsonrpc":"2.0","id":null,"method":"tools/call",'
                                 b'"params":{"name":"search_knowledge","arguments":{}}}'),
    "tools/call, id past 64 bits": Shape(call({"query": "q"}, request_id=2**100)),
    "tools/call, id below -2**63": Shape(call({"query": "q"}, request_id=-2**63 - 1)),
    "tools/call, id 2**63": Shape(call({"query": "q"}, request_id=2**63)),
    "tools/call, id in exponent form": Shape(call({"query": "q"})
                                             .replace(b'"id": 1', b'"id": 1e2')),
    "tools/call, id true": Shape(call({"query": "q"}, request_id=True)),
    "tools/call, id an object": Shape(call({"query": "q"}, request_id={"a": 1})),
    "tools/call, escaped string id": Shape(call({"query": "q"}, request_id='\u00fc "x" \\ \u2028')),
    "tools/call, long string id": Shape(call({"query": "q"}, request_id="i" * 4096)),
    "tools/call, _meta not an object": Shape(rpc_body("tools/call", {
        "name": TOOL, "arguments": {"query": "q"}, "_meta": 5})),
    "tools/call, _meta null": Shape(rpc_body("tools/call", {
        "name": TOOL, "arguments": {"query": "q"}, "_meta": None})),
    "tools/call, task": Shape(rpc_body("tools/call", {
        "name": TOOL, "arguments": {"query": "q"}, "task": {"ttl": 1000}})),
    "tools/call, task not an object": Shape(rpc_body("tools/call", {
        "name": TOOL, "arguments": {"query": "q"}, "task": 1})),
    "tools/call, another param": Shape(rpc_body("tools/call", {
        "name": TOOL, "arguments": {"query": "q"}, "x": 1})),
    "tools/call, arguments null": Shape(rpc_body("tools/call", {"name": TOOL, "arguments": None})),
    "tools/call, empty name": Shape(call({"query": "q"}, name="")),
    "tools/call, unknown tool, no arguments": Shape(rpc_body("tools/call", {"name": "other"})),
    "tools/call, query null": Shape(call({"query": None})),
    "tools/call, query an object": Shape(call({"query": {"a": 1}})),
    "tools/call, query a number": Shape(call({"query": 5})),
    "tools/call, query whitespace": Shape(call({"query": " \t"})),
    "tools/call, query a lone surrogate": Shape(call({"query": "\ud800"})),
    "tools/call, k negative": Shape(call({"query": "q", "k": -1})),
    "tools/call, k huge": Shape(call({"query": "q", "k": 2**70})),
    "tools/call, k null": Shape(call({"query": "q", "k": None})),
    "tools/call, _meta": Shape(rpc_body("tools/call", {"name": TOOL, "arguments": {"query": "q"},
                                                  "_meta": {"progressToken": "t"}})),
    "tools/call, no arguments": Shape(rpc_body("tools/call", {"name": TOOL})),
    "tools/call, unknown tool": Shape(call({"query": "q"}, name="other")),
    "tools/call, extra argument": Shape(call({"query": "q", "x": 1})),
    "tools/call, k 0": Shape(call({"query": "q", "k": 0})),
    "tools/call, k 11": Shape(call({"query": "q", "k": 11})),
    "tools/call, k a string": Shape(call({"query": "q", "k": "5"})),
    "tools/call, k true": Shape(call({"query": "q", "k": True})),
    "tools/call, k 2.0": Shape(call({"query": "q", "k": 2.0})),
    "tools/call, empty query": Shape(call({"query": ""})),
    "tools/call, query too large": Shape(call({"query": "x" * 513})),
    "tools/call, embeddings down": Shape(call({"query": "fail"})),
    "tools/call, name not a string": Shape(rpc_body("tools/call", {"name": 5, "arguments": {}})),
    "tools/call, arguments a list": Shape(call([1])),
    "tools/call, no params": Shape(rpc_body("tools/call")),
    "tools/call as a notification": Shape(call({"query": "q"}, request_id=None)),
    # what the guard refuses before any protocol work
    "not JSON": Shape(b"{not json"),
    "empty body": Shape(b""),
    "trailing data": Shape(rpc_body("ping") + b" x"),
    "NaN": Shape(b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"a":NaN}}'),
    "duplicate keys": Shape(b'{"jsonrpc":"2.0","id":1,"id":2,"method":"ping"}'),
    "a batch": Shape(b"[" + rpc_body("ping") + b"," + rpc_body("tools/list", request_id=2) + b"]"),
    "an empty batch": Shape(b"[]"),
    "a batch of one": Shape(b"[" + call({"query": "q"}) + b"]"),
    "jsonrpc 1.0": Shape(b'{"jsonrpc":"1.0","id":1,"method":"ping"}'),
    "jsonrpc a number": Shape(b'{"jsonrpc":2.0,"id":1,"method":"ping"}'),
    "method not a string": Shape(b'{"jsonrpc":"2.0","id":1,"method":5}'),
    "a JSON string": Shape(b'"ping"'),
    "no jsonrpc": Shape(b'{"id":1,"method":"ping"}'),
    "no method": Shape(b'{"jsonrpc":"2.0","id":1}'),
    "a response": Shape(b'{"jsonrpc":"2.0","id":1,"result":{}}'),
    "extra member": Shape(b'{"jsonrpc":"2.0","id":1,"method":"ping","extra":true}'),
    "unknown method": Shape(rpc_body("resources/list")),
    "completion": Shape(rpc_body("completion/complete", {"ref": {}, "argument": {}})),
    "logging": Shape(rpc_body("logging/setLevel", {"level": "debug"})),
    "server/discover": Shape(rpc_body("server/discover", {})),
    "params a list": Shape(rpc_body("tools/list", [1, 2])),
    "params a string": Shape(rpc_body("ping", "x")),
    "no identity": Shape(rpc_body("tools/list"), carriers=()),
    "two identities": Shape(rpc_body("tools/list"), carriers=(carrier(), carrier())),
    "identity not a carrier": Shape(rpc_body("tools/list"), carriers=("not-a-carrier",)),
    "identity of another agent": Shape(rpc_body("tools/list"), carriers=(carrier(agent=OTHER),)),
    "identity expired": Shape(rpc_body("tools/list"), carriers=(carrier(iat=NOW - 3600),)),
    "no version header": Shape(rpc_body("tools/list"), version=None),
    "another version header": Shape(rpc_body("tools/list"), version="2025-06-18"),
    "a 2026 version header": Shape(rpc_body("tools/list"), version="2026-07-28"),
    "GET": Shape(method="GET", content_type=None, accept="text/event-stream"),
    "DELETE": Shape(method="DELETE", content_type=None),
    "PUT": Shape(rpc_body("ping"), method="PUT"),
    "another path": Shape(rpc_body("ping"), path="/other"),
    "a query string": Shape(rpc_body("ping"), path=PATH + "?session=1"),
    "a body over the bound": Shape(b" " * (http.MAX_BODY_BYTES + 1) + rpc_body("ping")),
    # what the SDK's transport checks: Accept and Content-Type
    "Accept missing": Shape(rpc_body("tools/list"), accept=None),
    "Accept text/html": Shape(rpc_body("tools/list"), accept="text/html"),
    "Accept only SSE": Shape(rpc_body("tools/list"), accept="text/event-stream"),
    "Accept only JSON": Shape(rpc_body("tools/list"), accept="application/json"),
    "Accept */*": Shape(rpc_body("tools/list"), accept="*/*"),
    "Accept application/*": Shape(rpc_body("tools/list"), accept="application/*"),
    "Accept with q": Shape(rpc_body("tools/list"), accept="text/plain;q=0.5, Application/JSON;q=1"),
    "Accept missing, notification": Shape(rpc_body("notifications/initialized", request_id=None),
                                          accept=None),
    "Accept missing, initialize": Shape(rpc_body("initialize", INIT_PARAMS), version=None,
                                        accept=None),
    "Content-Type missing": Shape(rpc_body("tools/list"), content_type=None),
    "Content-Type text/plain": Shape(rpc_body("tools/list"), content_type="text/plain"),
    "Content-Type with charset": Shape(rpc_body("tools/list"),
                                       content_type="application/json; charset=utf-8"),
    "Content-Type upper case": Shape(rpc_body("tools/list"), content_type="APPLICATION/JSON"),
    "Content-Type json-patch": Shape(rpc_body("tools/list"),
                                     content_type="application/json-patch+json"),
    "Content-Type two types": Shape(rpc_body("tools/list"),
                                    content_type="text/plain, application/json"),
    "Content-Type missing, notification": Shape(
        rpc_body("notifications/initialized", request_id=None), content_type=None),
}


class Served:
    """``answers`` behind our handler on a loopback port. The SDK's manager holds an anyio
    task group, which must be left in the task that entered it: it runs in its own task."""

    def __init__(self, answers: Any) -> None:
        self.answers = answers
        self.url = ""

    async def _run(self, started: asyncio.Event, stop: asyncio.Event) -> None:
        async with self.answers.running():
            started.set()
            await stop.wait()

    async def __aenter__(self) -> Served:
        started, self._stop = asyncio.Event(), asyncio.Event()
        self._task = asyncio.create_task(self._run(started, self._stop))
        async with asyncio.timeout(10):
            await started.wait()
        port = free_port()
        handler = http.make_handler(self.answers, agent=AGENT, path=PATH, clock=lambda: NOW + 1)
        self._runner = await serving.serve(handler, "127.0.0.1", port, bounds=http.BOUNDS)
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._runner.cleanup()
        self._stop.set()
        async with asyncio.timeout(10):
            await self._task


@pytest.fixture(scope="module")
async def servers() -> AsyncIterator[tuple[Served, Served, ClientSession]]:
    async with Served(protocol.Protocol(TOOL, Search())) as lean, \
            Served(SdkProtocol(protocol.build_server(TOOL, Search()))) as sdk, \
            ClientSession(timeout=ClientTimeout(total=30), cookie_jar=DummyCookieJar(),
                          auto_decompress=False) as client:
        yield lean, sdk, client


async def exchange(client: ClientSession, base: str, shape: Shape) -> tuple[int, list[Any], bytes]:
    headers: list[tuple[str, str]] = []
    if shape.accept is not None:
        headers.append(("Accept", shape.accept))
    if shape.content_type is not None:
        headers.append(("Content-Type", shape.content_type))
    if shape.version is not None:
        headers.append(("MCP-Protocol-Version", shape.version))
    for value in (carrier(),) if shape.carriers is None else shape.carriers:
        headers.append(("X-Fgentic-Identity", value))
    async with client.request(shape.method, base + shape.path, data=shape.body or None,
                              headers=headers, allow_redirects=False,
                              skip_auto_headers=("Accept", "Content-Type", "User-Agent")
                              ) as answer:
        body = await answer.read()
        kept = sorted((k.lower(), v) for k, v in answer.headers.items() if k.lower() != "date")
        return answer.status, kept, body


@pytest.mark.parametrize("name", list(SHAPES))
async def test_the_lean_path_answers_every_request_shape_as_the_sdk_does(
        servers: tuple[Served, Served, ClientSession], name: str) -> None:
    lean, sdk, client = servers
    shape = SHAPES[name]
    assert await exchange(client, lean.url, shape) == await exchange(client, sdk.url, shape)


async def test_the_shapes_cover_answers_and_refusals(
        servers: tuple[Served, Served, ClientSession]) -> None:
    """The shapes are not all one answer: results, 202s, tool refusals and refusals before
    the protocol (4xx of several codes) are among them."""
    lean, _, client = servers
    statuses, messages = set(), set()
    for shape in SHAPES.values():
        status, _, body = await exchange(client, lean.url, shape)
        statuses.add(status)
        if body:
            answer = json.loads(body)
            messages.add(answer.get("error", {}).get("message")
                         or ("isError" if answer.get("result", {}).get("isError") else "result"))
    assert {200, 202, 400, 403, 404, 405, 413} <= statuses
    assert {"result", "isError", "REQUEST_MALFORMED", "METHOD_REFUSED",
            "PROTOCOL_VERSION_REFUSED", "HTTP_METHOD_REFUSED", "PATH_UNKNOWN",
            "REQUEST_TOO_LARGE"} <= messages


async def test_the_lean_path_builds_no_sdk_transport_per_request(
        servers: tuple[Served, Served, ClientSession],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """What the lean path saves: no Streamable HTTP transport (with its task, dispatcher and
    memory streams) is made for a request, yet the tool is listed and called."""
    lean, _, client = servers
    made: list[object] = []
    original = streamable_http.StreamableHTTPServerTransport.__init__

    def counting(self: object, *args: Any, **kwargs: Any) -> None:
        made.append(self)
        original(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(streamable_http.StreamableHTTPServerTransport, "__init__", counting)
    for name in ("initialize", "initialized", "tools/list", "tools/call"):
        status, _, body = await exchange(client, lean.url, SHAPES[name])
        assert status == (202 if name == "initialized" else 200), (name, body)
    assert made == []


LEAN = ("initialize", "initialize, header too", "initialize, id 0", "initialize, string id",
        "initialize, capabilities and _meta", "tools/list",
        "tools/list, empty params", "tools/list, id 0", "ping", "ping, empty params",
        "tools/call", "tools/call, string id", "tools/call, id past 64 bits",
        "tools/call, unknown tool", "tools/call, no arguments", "tools/call, k 0",
        "tools/call, embeddings down", "tools/call, escaped string id")
"""Requests answered without the SDK's kernel: what a client sends, tool refusals included."""
LEAN_REFUSED = ("initialize without clientInfo", "initialize, capabilities not an object",
                "initialize, _meta not an object", "initialize, progressToken null",
                "initialize, capabilities.extensions not an object")
"""``initialize`` refused by the SDK's own params checks, run on the lean path."""
KERNEL = ("tools/list, cursor", "tools/list, _meta", "tools/list, another param",
          "tools/list, cursor null", "ping, _meta", "ping, another param", "tools/call, _meta",
          "tools/call, task", "tools/call, another param", "tools/call, _meta null",
          "tools/call, no params", "initialized with an id")
"""Every other admitted request goes to the SDK's kernel, which answers it (or refuses)."""


def _kernel_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The methods the SDK's kernel (``serve_one``) is called with from now on, in order."""
    calls: list[str] = []
    original = protocol.serve_one

    async def counting(server: Any, context: Any, method: str, *args: Any,
                       **kwargs: Any) -> dict[str, Any]:
        calls.append(method)
        return await original(server, context, method, *args, **kwargs)

    monkeypatch.setattr(protocol, "serve_one", counting)
    return calls


async def test_the_sdk_kernel_answers_only_the_shapes_the_lean_path_leaves(
        servers: tuple[Served, Served, ClientSession],
        monkeypatch: pytest.MonkeyPatch) -> None:
    lean, _, client = servers
    calls = _kernel_calls(monkeypatch)
    for name in LEAN + LEAN_REFUSED + KERNEL:
        calls.clear()
        status, _, body = await exchange(client, lean.url, SHAPES[name])
        assert len(calls) == (name in KERNEL), (name, calls)
        if name in LEAN:
            assert status == 200 and b'"result"' in body, (name, body)
        elif name in LEAN_REFUSED:
            assert status == 400 and b'"REQUEST_MALFORMED"' in body, (name, body)


REVISIONS = (None, "2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
"""Every revision ``Protocol`` answers at (the guard lets only 2025-11-25 through)."""
UNGUARDED = {
    **{f"initialize offering {offered}": rpc_body("initialize", {
        **INIT_PARAMS, "protocolVersion": offered})
       for offered in ("2024-11-05", "2025-03-26", "2025-06-18", "1999-01-01", "2026-07-28")},
    "tools/call, 2026 envelope": rpc_body("tools/call", {
        "name": TOOL, "arguments": {"query": "q"},
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}),
    "tools/call, arguments null": rpc_body("tools/call", {"name": TOOL, "arguments": None}),
    "tools/call, arguments a list": call([1]),
    "tools/call, name not a string": rpc_body("tools/call", {"name": 5, "arguments": {}}),
    "ping, float id": rpc_body("ping", request_id=1.5),
    "ping, id true": rpc_body("ping", request_id=True),
    "tools/list, params a list": rpc_body("tools/list", [1]),
}
"""Requests the guard refuses, sent to ``Protocol`` itself: it must not rely on the guard."""


def verdict(answer: protocol.Answer) -> tuple[Any, ...] | None:
    """What ``http`` makes of an answer: None for a refusal (always REQUEST_MALFORMED),
    else the status, Content-Type and body it sends."""
    if not http._clean(answer):
        return None
    kept = [(k.lower(), v) for k, v in answer.headers if k.lower() == "content-type"]
    return answer.status, kept, bytes(answer.body)


@pytest.mark.parametrize("revision", REVISIONS)
async def test_protocol_alone_answers_as_the_sdk_at_every_revision(
        servers: tuple[Served, Served, ClientSession], revision: str | None) -> None:
    """Without the guard in front, at each 2025 revision: the same results, 202s and refusals
    (the results are shaped per revision, so only 2025-11-25 is answered without the kernel)."""
    lean, sdk, _ = servers
    identity = contract.decode_verified_identity([carrier()], now=NOW + 1, agent=AGENT)
    headers = [(b"accept", b"application/json, text/event-stream"),
               (b"content-type", b"application/json")]
    if revision is not None:
        headers.append((b"mcp-protocol-version", revision.encode()))
    bodies = {name: shape.body for name, shape in SHAPES.items() if shape.method == "POST"}
    results = 0
    for name, body in {**bodies, **UNGUARDED}.items():
        ours = verdict(await lean.answers.answer(PATH, headers, body, identity))
        theirs = verdict(await sdk.answers.answer(PATH, headers, body, identity))
        assert ours == theirs, name
        results += ours is not None and ours[0] == 200
    assert results >= 40  # not all refusals


@pytest.mark.parametrize("revision", [None, "2025-06-18"])
async def test_requests_at_another_revision_go_to_the_sdk_kernel(
        servers: tuple[Served, Served, ClientSession], monkeypatch: pytest.MonkeyPatch,
        revision: str | None) -> None:
    """The lean path's results are 2025-11-25's (the only revision the guard admits after
    ``initialize``); ``Protocol`` alone leaves any other to the kernel, which shapes per
    revision."""
    lean, _, _ = servers
    calls = _kernel_calls(monkeypatch)
    identity = contract.decode_verified_identity([carrier()], now=NOW + 1, agent=AGENT)
    headers = [(b"accept", b"application/json"), (b"content-type", b"application/json")]
    if revision is not None:
        headers.append((b"mcp-protocol-version", revision.encode()))
    for name in ("ping", "tools/list", "tools/call"):
        answer = await lean.answers.answer(PATH, headers, SHAPES[name].body, identity)
        assert answer.status == 200, name
    assert calls == ["ping", "tools/list", "tools/call"]


@pytest.mark.parametrize("result", [
    {"a": float("nan"), "b": float("inf"), "c": -float("inf")},
    {"s": "\u00fc \u2028 \u2029 < > & \\ \" \x00 \x1f \U0001f600", "k": "\u00e9"},
    {"f": [0.1 + 0.2, 1e-7, 1e21, 5e-324, -0.0, 1.0, 123456789.123456789]},
    {"i": [0, -1, 2**63, -2**63 - 1, 2**100], "t": True, "n": None, "o": {}, "l": []},
])
@pytest.mark.parametrize("request_id", [0, -7, 2**64, "", "\u00fc\"\\", "x" * 100])
def test_the_lean_envelope_is_the_sdks_serialisation(result: dict[str, Any],
                                                     request_id: int | str) -> None:
    """Results the lean path writes itself come out as the SDK's ``JSONRPCResponse`` writes
    them: floats, non-finite numbers (null), big integers, escapes and non-ASCII text."""
    ours = protocol._result(request_id, protocol._json(result))
    theirs = JSONRPCResponse(jsonrpc="2.0", id=request_id, result=result)
    assert bytes(ours.body) == theirs.model_dump_json(by_alias=True,
                                                      exclude_unset=True).encode()


def test_a_lone_surrogate_fails_both_serialisations() -> None:
    """Text that is not UTF-8 is no answer on either path (``Protocol`` then refuses)."""
    with pytest.raises(ValueError):
        protocol._json({"s": "\ud800"})
    with pytest.raises(ValueError):
        JSONRPCResponse(jsonrpc="2.0", id=1, result={"s": "\ud800"}).model_dump_json()


@pytest.mark.parametrize("name", ["initialize", "ping", "tools/list", "tools/call"])
async def test_protocol_answers_nothing_without_a_verified_identity(
        servers: tuple[Served, Served, ClientSession], name: str) -> None:
    lean, _, _ = servers
    headers = [(b"accept", b"application/json"), (b"content-type", b"application/json")]
    if SHAPES[name].version is not None:
        headers.append((b"mcp-protocol-version", VERSION.encode()))
    answer = await lean.answers.answer(PATH, headers, SHAPES[name].body,
                                       None)  # type: ignore[arg-type]
    assert answer.status == protocol.REFUSED and not answer.body
