"""The real agentgateway v1.3.1 in front of the projector and stub backends, on loopback.

`gateway_stack()` renders the example RetrievalBinding (free ports, loopback upstreams) with the
project's renderer, writes that standalone config unchanged apart from moving the admin, stats
and readiness listeners to free loopback ports, and starts:

* the projector, as `fgentic-governance projector` (the real CLI) with the config derived from
  the same binding by `projector_config`;
* an echo backend standing in for kagent, recording every header line it receives;
* the two-tool MCP server of `tests.support.mcp_stub`, standing in for knowledge-retrieval;
* agentgateway itself, with the credentials, JWKS and TLS files in its environment.

Binds listen on 0.0.0.0 (a v1.3.1 bind has only a port); tests talk to 127.0.0.1 only.
Where no binary is found the tests fail, naming where they looked; AGENTGATEWAY_REQUIRED=0
(a machine without shared/bin) makes them skip with that reason instead.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import ipaddress
import itertools
import json
import os
import ssl
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jwt
import pytest
import yaml
from aiohttp import ClientSession, ClientTimeout, DummyCookieJar, web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from fgentic_devenv import free_port, http_ok, log_tail, terminate, wait_until
from fgentic_devenv.binaries import agentgateway_candidates, find_agentgateway
from fgentic_devenv.up import port_open, spawn_cli
from fgentic_governance import contract
from fgentic_governance.api.retrieval import A2aWire, RetrievalBindingSpec
from fgentic_governance.contract import RoomContext
from fgentic_governance.retrieval.projector_config import dump_config, projector_config
from fgentic_governance.retrieval.render import names as n
from fgentic_governance.retrieval.render.binding import RenderOptions, render
from fgentic_governance.retrieval.vocabulary import WIRES, agent_route_path
from tests.support.objects import ROOT, example
from tests.support.polling import until
from tests.support.projector import AGENT, AUDIENCE, ISSUER, room_context
from tests.support.stubs import LoopbackServer

BRIDGE_KEY = "bridge-key-e2e-7c1f"
AGENT_MCP_KEY = "agent-mcp-key-e2e-94d2"
PARTNER_AZP = "org-b-a2a"
AGENT_PATH = agent_route_path("fgentic-demo", "docs-agent")
BINDING = ("fgentic-demo", "docs-agent-retrieval")
# What kagent may see: the projection, the validated X-User-Id and ordinary transport headers.
BACKEND_HEADERS = frozenset({"host", "content-type", "content-length", "user-agent", "accept",
                             "accept-encoding", "a2a-version", "x-fgentic-identity",
                             "x-user-id"})




def agentgateway_binary() -> Path:
    """The binary; else fail (CI and any machine with shared/ beside the repository), or skip
    with the reason when AGENTGATEWAY_REQUIRED=0."""
    found = find_agentgateway()
    if found is not None:
        return found
    reason = (f"no agentgateway v1.3.1 binary at {', '.join(map(str, agentgateway_candidates()))} "
              "(set AGENTGATEWAY_BIN)")
    if os.environ.get("AGENTGATEWAY_REQUIRED") == "0":
        pytest.skip(reason)
    pytest.fail(f"{reason}; AGENTGATEWAY_REQUIRED=0 skips instead")


# -- partner keys and TLS ------------------------------------------------------------------


@dataclass
class PartnerIssuer:
    """A partner's signing key (P-256, ES256) and its public JWKS."""

    key: ec.EllipticCurvePrivateKey = field(
        default_factory=lambda: ec.generate_private_key(ec.SECP256R1()))
    kid: str = "e2e-partner-key"

    def jwks(self) -> str:
        public = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(self.key.public_key()))
        return json.dumps({"keys": [{**public, "kid": self.kid, "use": "sig", "alg": "ES256"}]})

    def token(self, *, lifetime: int = 3600, **claims: Any) -> str:
        now = int(time.time())
        body = {"iss": ISSUER, "aud": AUDIENCE, "azp": PARTNER_AZP, "sub": "service-client",
                "iat": now, "exp": now + lifetime, **claims}
        body = {k: v for k, v in body.items() if v is not None}
        return jwt.encode(body, self.key, algorithm="ES256", headers={"kid": self.kid})


def self_signed(directory: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 (the public listener is HTTPS) and its key, as PEM files."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = directory / "tls.crt", directory / "tls.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


# -- the kagent stand-in -------------------------------------------------------------------


@dataclass
class Received:
    path: str
    headers: list[tuple[str, str]]
    """Every header line as received (lowercase names, repeats kept, order kept)."""
    body: dict[str, Any]

    def values(self, name: str) -> list[str]:
        return [v for k, v in self.headers if k == name]

    @property
    def names(self) -> set[str]:
        return {k for k, _ in self.headers}


class EchoBackend(LoopbackServer):
    """Records each request by its JSON-RPC id and answers a completed A2A task."""

    def __init__(self) -> None:
        super().__init__()
        self.received: dict[str, Received] = {}

    def routes(self, app: web.Application) -> None:
        app.router.add_route("*", "/{tail:.*}", self._handle)

    async def _handle(self, request: web.Request) -> web.Response:
        raw = await request.read()
        try:
            body = json.loads(raw)
        except ValueError:
            body = {}
        headers = [(k.decode("latin-1").lower(), v.decode("latin-1"))
                   for k, v in request.raw_headers]
        key = str(body.get("id")) if isinstance(body, dict) else ""
        self.received[key] = Received(request.path, headers, body if isinstance(body, dict)
                                      else {})
        return web.json_response({"jsonrpc": "2.0", "id": body.get("id"), "result": {
            "task": {"id": uuid.uuid4().hex, "contextId": uuid.uuid4().hex,
                     "status": {"state": "TASK_STATE_COMPLETED"}}}})


# -- the stack -----------------------------------------------------------------------------


def binding_spec(ports: dict[str, int], *, public: bool = True,
                 wire: A2aWire = A2aWire.V0_3,
                 public_timeout: int | None = None) -> RetrievalBindingSpec:
    doc = example("RetrievalBinding")["spec"]
    if public_timeout is not None:
        doc["publicRoute"]["publicRetrievalTimeoutSeconds"] = public_timeout
    doc["kagent"] = {"a2aVersion": wire.value}
    doc["proxy"]["port"] = ports["local"]
    doc["gateway"] = {"mcpPort": ports["mcp"], "publicPort": ports["public"]}
    if not public:
        doc["publicRoute"] = None
    return RetrievalBindingSpec.model_validate(doc)


def gateway_config(spec: RetrievalBindingSpec, jwks: str, hosts: dict[str, str],
                   management: dict[str, int]) -> dict[str, Any]:
    """The rendered standalone config, with only the management listeners moved to loopback."""
    rendered = render(*BINDING, spec, jwks=jwks, options=RenderOptions(standalone_hosts=hosts))
    config = dict(rendered.standalone)
    config["config"] = {f"{name}Addr": f"127.0.0.1:{port}" for name, port in management.items()}
    return config


@dataclass
class Stack:
    workdir: Path
    ports: dict[str, int]
    issuer: PartnerIssuer
    backend: EchoBackend
    spec: RetrievalBindingSpec
    tls_cert: Path
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def wire(self) -> A2aWire:
        return self.spec.kagent.a2a_version

    @property
    def local_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['local']}{AGENT_PATH}"

    @property
    def public_url(self) -> str:
        return f"https://127.0.0.1:{self.ports['public']}{AGENT_PATH}"

    @property
    def mcp_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['mcp']}{self.spec.mcp_server.path}"

    def ssl_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.tls_cert))

    def log(self, name: str) -> Path:
        return self.workdir / f"{name}.log"

    def start_projector(self) -> None:
        port = self.ports["projector"]
        proc = spawn_cli(["projector", "--config", str(self.workdir / "projector.json"),
                          "--host", "127.0.0.1", "--port", str(port)], self.log("projector"))
        self.processes["projector"] = proc
        wait_until(lambda: http_ok(f"http://127.0.0.1:{port}/healthz"), proc, what="projector",
                   log=self.log("projector"), timeout=30)

    def stop_projector(self) -> None:
        terminate(self.processes.pop("projector", None))
        until(lambda: not port_open(self.ports["projector"]), "the projector's port closed", 10,
              interval=0.05)

    def projector_metrics(self) -> str:
        url = f"http://127.0.0.1:{self.ports['projector']}/metrics"
        with urllib.request.urlopen(url, timeout=2) as response:  # loopback only
            return str(response.read().decode())

    def _spawn(self, name: str, argv: Sequence[str], env: dict[str, str],
               ready: Callable[[], bool]) -> None:
        with self.log(name).open("ab") as sink:
            proc = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT, env=env,
                                    cwd=ROOT, start_new_session=True)
        self.processes[name] = proc
        wait_until(ready, proc, what=name, log=self.log(name), timeout=60)

    def start_mcp(self, name: str = "mcp", port: int | None = None) -> None:
        """The two-tool stub of `tests.support.mcp_stub` on ``port`` (default: where the
        binding's MCP route sends), logged as ``name``."""
        port = port or self.ports["retrieval"]
        self._spawn(name, [sys.executable, "-m", "tests.support.mcp_stub", "--port", str(port)],
                    os.environ.copy(), lambda: port_open(port))

    def start_gateway(self, binary: Path, config: dict[str, Any], key_path: Path) -> None:
        path = self.workdir / "agentgateway.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False, width=1 << 16))
        jwks_path = self.workdir / "jwks.json"
        jwks_path.write_text(self.issuer.jwks())
        env = {**os.environ,
               n.ENV_BRIDGE_API_KEY: BRIDGE_KEY, n.ENV_AGENT_MCP_API_KEY: AGENT_MCP_KEY,
               n.ENV_PUBLIC_JWKS_FILE: str(jwks_path),
               n.ENV_PUBLIC_TLS_CERT: str(self.tls_cert), n.ENV_PUBLIC_TLS_KEY: str(key_path)}
        ready = f"http://127.0.0.1:{self.ports['readiness']}/healthz/ready"
        listeners = [self.ports[k] for k in ("local", "public", "mcp")
                     if k in self.ports]
        self._spawn("agentgateway", [str(binary), "-f", str(path)], env,
                    lambda: http_ok(ready) and all(port_open(p) for p in listeners))

    def stop(self) -> None:
        for name in reversed(list(self.processes)):
            terminate(self.processes.pop(name))

    def tails(self) -> str:
        return "\n".join(f"--- {name}.log\n{log_tail(self.log(name))}"
                         for name in ("agentgateway", "projector", "mcp"))


PORT_NAMES = ("local", "public", "mcp", "projector", "retrieval", "admin", "stats", "readiness")


@contextlib.asynccontextmanager
async def gateway_stack(workdir: Path, *,
                        edit: Callable[[dict[str, Any]], None] | None = None,
                        binary: Path | None = None,
                        wire: A2aWire = A2aWire.V0_3,
                        kagent: str | None = None,
                        retrieval: str | None = None,
                        public_timeout: int | None = None) -> AsyncIterator[Stack]:
    """Everything running; `edit` may change the rendered config (the benchmark adds a
    baseline listener) before the gateway starts. Without `binary`, skip or fail as
    `agentgateway_binary` says. ``kagent`` and ``retrieval`` (host:port) replace the echo
    backend and the MCP stub as the A2A and MCP upstreams (the real runtime and server).
    ``public_timeout`` replaces the example binding's publicRetrievalTimeoutSeconds."""
    binary = binary or agentgateway_binary()
    ports = {name: free_port() for name in PORT_NAMES}
    backend = EchoBackend()
    await backend.start()
    spec = binding_spec(ports, wire=wire, public_timeout=public_timeout)
    issuer = PartnerIssuer()
    cert, key = self_signed(workdir)
    stack = Stack(workdir, ports, issuer, backend, spec, cert)
    hosts = {"projector": f"127.0.0.1:{ports['projector']}",
             "kagent": kagent or f"127.0.0.1:{backend.port}",
             "retrieval": retrieval or f"127.0.0.1:{ports['retrieval']}"}
    config = gateway_config(spec, issuer.jwks(), hosts, {
        "admin": ports["admin"], "stats": ports["stats"], "readiness": ports["readiness"]})
    if edit is not None:
        edit(config)
    (workdir / "projector.json").write_text(dump_config(projector_config(spec)))
    try:
        stack.start_projector()
        if retrieval is None:
            stack.start_mcp()
        stack.start_gateway(binary, config, key)
        yield stack
    finally:
        stack.stop()
        await backend.stop()


def client_session() -> ClientSession:
    # No cookie jar: a test decides every header the gateway sees.
    return ClientSession(timeout=ClientTimeout(total=20), cookie_jar=DummyCookieJar())


QUESTION = "what is the retention policy?"


def send_message_body(wire: A2aWire = A2aWire.V0_3, text: str = QUESTION,
                      **message_fields: Any) -> dict[str, Any]:
    """A message that starts a fresh task (no contextId/taskId/references) on ``wire``:
    0.3's message/send (role "user", parts of kind "text") or 1.0's SendMessage."""
    message: dict[str, Any] = (
        {"kind": "message", "messageId": uuid.uuid4().hex, "role": "user",
         "parts": [{"kind": "text", "text": text}]} if wire is A2aWire.V0_3 else
        {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": [{"text": text}]})
    return {"jsonrpc": "2.0", "id": uuid.uuid4().hex, "method": WIRES[wire].send,
            "params": {"message": {**message, **message_fields}}}


def task_body(wire: A2aWire, operation: str, request_id: str,
              task_id: str = "task-1") -> dict[str, Any]:
    """The bridge's poll (``"get"``) or cancel (``"cancel"``) of a task on ``wire``."""
    method = getattr(WIRES[wire], operation)
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": {"id": task_id}}


def version_headers(wire: A2aWire) -> list[tuple[str, str]]:
    """The A2A-Version a client of ``wire`` sends (0.3: none; a2a-sdk 0.3 sends none)."""
    rules = WIRES[wire]
    return [] if rules.version_optional else [("a2a-version", rules.versions[0])]


def non_blocking(wire: A2aWire, body: dict[str, Any]) -> dict[str, Any]:
    """``body`` asking to return before the task ends, in ``wire``'s spelling."""
    (field_name, *_), value = WIRES[wire].immediate
    return {**body, "params": {**body["params"], "configuration": {field_name: value}}}


# -- raw MCP over the gateway's MCP route (each header, and each repeat, the caller's choice) --

MCP_VERSION = "2025-11-25"
_rpc_ids = itertools.count(1)


def mcp_identity(context: RoomContext | None = None) -> str:
    """A fresh projection for the binding's Agent, as the projector would stamp it (for
    ``context``, else Alice's public-only room)."""
    projection = contract.stamp_matrix(context or room_context(), agent=AGENT,
                                       iat=int(time.time()))
    return contract.encode_identity(projection)


def agent_headers(*, key: str | None = AGENT_MCP_KEY, carrier: list[str] | None = None,
                  version: str | None = MCP_VERSION) -> list[tuple[str, str]]:
    """The retrieval Agent's MCP request headers: its API key, the carrier(s) and the
    MCP-Protocol-Version (None: absent)."""
    headers = [("accept", "application/json, text/event-stream")]
    if key is not None:
        headers.append(("authorization", f"Bearer {key}"))
    headers += [("x-fgentic-identity", v) for v in (carrier if carrier is not None
                                                     else [mcp_identity()])]
    if version is not None:
        headers.append(("mcp-protocol-version", version))
    return headers


async def rpc(stack: Stack, session: ClientSession, method: str, params: dict[str, Any],
              headers: list[tuple[str, str]], *, mcp_session: str | None = None,
              url: str | None = None) -> tuple[int, dict[str, Any] | None, str | None]:
    """(HTTP status, JSON-RPC response or None, Mcp-Session-Id) of one request to ``url``
    (default: the binding's MCP route)."""
    body = {"jsonrpc": "2.0", "id": next(_rpc_ids), "method": method, "params": params}
    if mcp_session is not None:
        headers = [*headers, ("mcp-session-id", mcp_session)]
    async with session.post(url or stack.mcp_url, json=body, headers=headers) as response:
        text = await response.text()
        sid = response.headers.get("mcp-session-id")
        status = response.status
    if status != 200:
        return status, None, sid
    # Streamable HTTP answers JSON or an event stream whose data line holds the response.
    data = [line[5:].strip() for line in text.splitlines() if line.startswith("data:")]
    return status, json.loads(data[-1] if data else text), sid


async def mcp_initialize(stack: Stack, session: ClientSession) -> str | None:
    """initialize (no MCP-Protocol-Version, as the rendered rule requires) and initialized;
    the gateway's session id, None when it issued none (the route is rendered stateless)."""
    params = {"protocolVersion": MCP_VERSION, "capabilities": {},
              "clientInfo": {"name": "e2e", "version": "1"}}
    status, reply, sid = await rpc(stack, session, "initialize", params,
                                   agent_headers(version=None))
    assert status == 200 and reply is not None, status
    assert reply["result"]["protocolVersion"] == MCP_VERSION
    notify = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    session_header = [("mcp-session-id", sid)] if sid else []
    async with session.post(stack.mcp_url, json=notify,
                            headers=[*agent_headers(), *session_header]) as response:
        assert response.status in (200, 202)
    return sid


async def mcp_call(stack: Stack, session: ClientSession, sid: str | None, tool: str,
                   headers: list[tuple[str, str]] | None = None, *,
                   arguments: dict[str, Any] | None = None,
                   ) -> tuple[int, dict[str, Any] | None]:
    status, reply, _ = await rpc(stack, session, "tools/call",
                                 {"name": tool, "arguments": arguments or {"query": "retention"}},
                                 headers if headers is not None else agent_headers(),
                                 mcp_session=sid)
    return status, reply
