"""Permission-aware retrieval in `fgentic-dev up`: the real server behind the real gateway.

The demo corpus (`examples/corpus/demo.jsonl`) is loaded with `fgentic-governance corpus load`,
embedded by the stand-in provider (`embedder.py`). `fgentic-governance retrieval-server` then
serves it with the configuration the operator renders from the example RetrievalBinding.
agentgateway v1.3.1 runs that binding's rendered standalone config (without the public
route, which needs TLS files). On its MCP route, a search carrying Alice's projection is
admitted and answered from the prefilter: her public chunks, not Bob's, not the restricted
one. A search without a projection is refused by the gateway before the server. Only status
codes, chunk ids and sources are printed, never chunk text.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from fgentic_devenv import free_port, http_ok, paths, port_open, wait_until
from fgentic_devenv.binaries import find_agentgateway
from fgentic_governance import contract
from fgentic_governance.api.retrieval import RetrievalBindingSpec
from fgentic_governance.retrieval.render import names as n
from fgentic_governance.retrieval.render.binding import RenderOptions, render
from fgentic_governance.retrieval.server_config import dump_config, server_config

LOCAL = "fgentic.local"
VERSION = "2025-11-25"
Spawn = Callable[[list[str], Path, dict[str, str] | None], subprocess.Popen[bytes]]


def _binding() -> tuple[str, str, RetrievalBindingSpec]:
    docs = list(yaml.safe_load_all((paths.repo_root() / "examples" /
                                    "30-retrievalbinding.yaml").read_text()))
    binding = next(d for d in docs if d and d["kind"] == "RetrievalBinding")
    spec = {**binding["spec"], "publicRoute": None}
    return (binding["metadata"]["namespace"], binding["metadata"]["name"],
            RetrievalBindingSpec.model_validate(spec))


def _projection(spec: RetrievalBindingSpec, who: str) -> str:
    reader = {"kind": "matrix", "principal": f"@{who}:{LOCAL}"}
    context = contract.RoomContext.model_validate_json(json.dumps({
        "allowed_classifications": ["public"], "audience": [reader], "caller": reader,
        "delegation_id": secrets.token_hex(32),
        "room": {"event_id": "$demo", "history_visibility": "joined", "id": f"!docs:{LOCAL}",
                 "join_rule": "invite", "state_sha256": "0" * 64},
        "v": 1}))
    agent = contract.AgentRef(namespace=spec.agent.namespace, name=spec.agent.name)
    return contract.encode_identity(contract.stamp_matrix(context, agent=agent,
                                                          iat=int(time.time())))


class RetrievalDemo:
    def __init__(self, workdir: Path, spawn: Spawn) -> None:
        self.workdir = workdir
        self.spawn = spawn
        self.children: list[subprocess.Popen[bytes]] = []

    def _start(self, name: str, argv: list[str], ready: Callable[[], bool],
               env: dict[str, str] | None = None) -> None:
        log = self.workdir / f"{name}.log"
        proc = self.spawn(argv, log, env)
        self.children.append(proc)
        wait_until(ready, proc, what=name, log=log, timeout=60)

    def run(self, dsn: str) -> None:
        print("\n-- permission-aware retrieval (the real server behind the real gateway)")
        binary = find_agentgateway()
        if binary is None:
            print("agentgateway v1.3.1 not found (shared/bin or AGENTGATEWAY_BIN): skipped")
            return
        namespace, name, spec = _binding()
        dsn_file = self.workdir / "corpus-dsn"
        dsn_file.touch(mode=0o600)
        dsn_file.write_text(dsn)
        embeddings = self._embedder()
        print(self._load(dsn_file, embeddings))
        server = self._server(spec, dsn_file, embeddings)
        mcp_url, key = self._gateway(binary, namespace, name, spec, server)
        asyncio.run(self._searches(spec, mcp_url, key))

    def _embedder(self) -> str:
        port = free_port()
        self._start("embedder", [sys.executable, "-m", "fgentic_devenv.embedder",
                                 "--port", str(port)],
                    lambda: port_open(port))
        return f"http://127.0.0.1:{port}/v1/embeddings"

    def _load(self, dsn_file: Path, embeddings: str) -> str:
        corpus = paths.repo_root() / "examples" / "corpus" / "demo.jsonl"
        done = subprocess.run(
            [sys.executable, "-m", "fgentic_governance.cli", "corpus", "load", str(corpus),
             "--store-dsn-file", str(dsn_file), "--embeddings-url", embeddings,
             "--embeddings-model", "hashing"],
            capture_output=True, text=True, timeout=120, check=False)
        if done.returncode != 0:
            raise SystemExit(f"corpus load failed: {done.stderr.strip()}")
        return f"corpus: {done.stdout.strip()}"

    def _server(self, spec: RetrievalBindingSpec, dsn_file: Path, embeddings: str) -> str:
        config = self.workdir / "retrieval-server.json"
        config.write_text(dump_config(server_config(spec)))
        port, metrics = free_port(), free_port()
        self._start("retrieval-server", [
            "retrieval-server", "--config", str(config), "--store-dsn-file", str(dsn_file),
            "--embeddings-url", embeddings, "--embeddings-model", "hashing",
            "--host", "127.0.0.1", "--port", str(port), "--metrics-port", str(metrics)],
            lambda: http_ok(f"http://127.0.0.1:{metrics}/readyz"))
        print(f"retrieval server ready on 127.0.0.1:{port}")
        return f"127.0.0.1:{port}"

    def _gateway(self, binary: Path, namespace: str, name: str, spec: RetrievalBindingSpec,
                 server: str) -> tuple[str, str]:
        ports = {k: free_port() for k in ("local", "mcp", "admin", "stats", "ready")}
        spec = spec.model_copy(update={
            "proxy": spec.proxy.model_copy(update={"port": ports["local"]}),
            "gateway": spec.gateway.model_copy(update={"mcp_port": ports["mcp"]})})
        hosts = {"projector": f"127.0.0.1:{free_port()}", "kagent": f"127.0.0.1:{free_port()}",
                 "retrieval": server}
        config = dict(render(namespace, name, spec,
                             options=RenderOptions(standalone_hosts=hosts)).standalone)
        config["config"] = {"adminAddr": f"127.0.0.1:{ports['admin']}",
                            "statsAddr": f"127.0.0.1:{ports['stats']}",
                            "readinessAddr": f"127.0.0.1:{ports['ready']}"}
        path = self.workdir / "agentgateway.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False, width=1 << 16))
        key = secrets.token_urlsafe(24)
        env = {**os.environ, n.ENV_AGENT_MCP_API_KEY: key,
               n.ENV_BRIDGE_API_KEY: secrets.token_urlsafe(24)}
        self._start("agentgateway", [str(binary), "-f", str(path)],
                    lambda: http_ok(f"http://127.0.0.1:{ports['ready']}/healthz/ready")
                    and port_open(ports["mcp"]), env=env)
        url = f"http://127.0.0.1:{ports['mcp']}{spec.mcp_server.path}"
        print(f"agentgateway v1.3.1 serving the binding's MCP route on {url}")
        return url, key

    async def _searches(self, spec: RetrievalBindingSpec, url: str, key: str) -> None:
        question = {"query": "How long are chat logs kept?", "k": 5}
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
            alice = _projection(spec, "alice")
            session = await _initialize(http, url, key, alice)
            status, reply = await _call(http, url, key, session, tool=spec.mcp_server.tool,
                                        arguments=question, carriers=[alice])
            found = (reply or {}).get("result", {}).get("structuredContent", {}).get("chunks")
            shown = [f"{c['chunk_id']} ({c['source']})" for c in found or []]
            print(f"search with Alice's projection:   {status}, chunks {', '.join(shown)}")
            status, _ = await _call(http, url, key, session, tool=spec.mcp_server.tool,
                                    arguments=question, carriers=[])
            print(f"search without a projection:      {status} (refused by the gateway)")


def _headers(key: str, carriers: list[str], *, version: bool = True) -> list[tuple[str, str]]:
    headers = [("authorization", f"Bearer {key}"),
               ("accept", "application/json, text/event-stream")]
    headers += [("x-fgentic-identity", c) for c in carriers]
    return headers + ([("mcp-protocol-version", VERSION)] if version else [])


async def _post(http: aiohttp.ClientSession, url: str, body: dict[str, Any],
                headers: list[tuple[str, str]]) -> tuple[int, dict[str, Any] | None, str | None]:
    async with http.post(url, json=body, headers=headers) as answer:
        text = await answer.text()
        session = answer.headers.get("mcp-session-id")
        if answer.status != 200:
            return answer.status, None, session
    data = [line[5:].strip() for line in text.splitlines() if line.startswith("data:")]
    return 200, json.loads(data[-1] if data else text), session


def _session(session: str | None) -> list[tuple[str, str]]:
    # The rendered MCP route is stateless, so the gateway issues no id (kept if one comes).
    return [("mcp-session-id", session)] if session else []


async def _initialize(http: aiohttp.ClientSession, url: str, key: str,
                      carrier: str) -> str | None:
    status, _, session = await _post(http, url, {
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": VERSION, "capabilities": {},
                   "clientInfo": {"name": "fgentic-dev", "version": "1"}}},
        _headers(key, [carrier], version=False))
    if status != 200:
        raise SystemExit(f"MCP initialize through the gateway failed: HTTP {status}")
    await _post(http, url, {"jsonrpc": "2.0", "method": "notifications/initialized"},
                [*_headers(key, [carrier]), *_session(session)])
    return session


async def _call(http: aiohttp.ClientSession, url: str, key: str, session: str | None, *,
                tool: str, arguments: dict[str, Any], carriers: list[str],
                ) -> tuple[int, dict[str, Any] | None]:
    status, reply, _ = await _post(http, url, {
        "jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": tool, "arguments": arguments}},
        [*_headers(key, carriers), *_session(session)])
    return status, reply
