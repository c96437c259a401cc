"""A two-tool Streamable HTTP MCP server (the `mcp` package) standing in for knowledge-retrieval.

`python -m tests.support.mcp_stub --port N` serves /mcp on 127.0.0.1. Both tools report which
identity-relevant headers reached the server, so a test behind agentgateway can see what the
gateway forwarded: every X-Fgentic-* name, the X-Fgentic-Identity values and whether any
credential arrived. Only `search_knowledge` is bound by the RetrievalBinding; `delete_corpus`
exists to prove the gateway hides and refuses it.
"""

from __future__ import annotations

import argparse
import json

import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.transport_security import TransportSecuritySettings

BOUND_TOOL = "search_knowledge"
OTHER_TOOL = "delete_corpus"


def _seen(ctx: Context) -> str:
    headers = getattr(ctx.request_context.request, "headers", None)  # a Starlette Request
    raw: list[tuple[bytes, bytes]] = list(headers.raw) if headers is not None else []
    names = [name.decode().lower() for name, _ in raw]
    return json.dumps({
        "identity": [v.decode() for k, v in raw if k.decode().lower() == "x-fgentic-identity"],
        "reserved": sorted({n for n in names if n.startswith("x-fgentic-")}),
        "credentials": sorted({n for n in names if n in {"authorization", "cookie"}}),
    })


def server() -> MCPServer:
    mcp = MCPServer("knowledge-retrieval-stub")

    @mcp.tool(name=BOUND_TOOL, description="Search the permission-filtered corpus.")
    def search_knowledge(query: str, ctx: Context) -> str:
        return _seen(ctx)

    @mcp.tool(name=OTHER_TOOL, description="A tool the retrieval Agent must never reach.")
    def delete_corpus(ctx: Context) -> str:
        return _seen(ctx)

    return mcp


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    # The gateway connects with its own Host header; DNS-rebinding checks protect browsers,
    # which never reach this loopback stub.
    security = TransportSecuritySettings(enable_dns_rebinding_protection=False)
    app = server().streamable_http_app(transport_security=security, stateless_http=True,
                                       json_response=True)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
