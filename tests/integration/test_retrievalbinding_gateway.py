"""The rendered standalone config in the real agentgateway v1.3.1 binary (loopback only), in
front of a stub projector and an echo backend standing in for kagent.

This is what the schema test cannot show: that the rendered CEL compiles and does what the
rules say on the pinned release (strict keys, counts computed before extAuthz, forged identity
overwritten, require-only rules failing closed, room context removed, body rules on A2A).
"""

from __future__ import annotations

import base64
import http.client
import http.server
import json
import os
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

from fgentic_devenv import free_port, terminate
from fgentic_devenv.binaries import upstream_dir
from fgentic_governance.retrieval import vocabulary as n
from fgentic_governance.retrieval.render import names as rn
from fgentic_governance.retrieval.render.binding import RenderOptions, render
from fgentic_governance.serving.tls import CertificateAuthority
from tests.support.polling import until
from tests.support.render import binding

pytestmark = pytest.mark.integration
BRIDGE_KEY, AGENT_KEY = "bridge-key-7f3a", "agent-key-19c2"
PROJECTED = "eyJwcm9qZWN0ZWQiOnRydWV9"
MXID = "@alice:org-a.example"
A2A_PATH = "/a2a/fgentic-demo/docs-agent"


def _binary() -> Path:
    path = Path(os.environ.get("FGENTIC_AGENTGATEWAY_BIN",
                               upstream_dir().parent / "bin" / "agentgateway-1.3.1"))
    assert path.is_file(), f"agentgateway v1.3.1 binary not found at {path}"
    return path


@dataclass
class Recorder:
    """What the stub servers saw; `omit_identity` makes the projector answer 200 without one."""

    checks: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    upstream: list[tuple[str, list[tuple[str, str]]]] = field(default_factory=list)
    omit_identity: bool = False


def _serve(handler: type[http.server.BaseHTTPRequestHandler]) -> tuple[int, Any]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server.server_address[1], server


def _projector(rec: Recorder) -> type[http.server.BaseHTTPRequestHandler]:
    class Projector(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            headers = {k.lower(): v for k, v in self.headers.items()}
            rec.checks.append((self.path, headers))
            local = self.path == n.PROJECT_LOCAL_PATH
            # The projector's contract: exactly one raw value of each identity input.
            ok = not local or (headers.get(n.CHECK_USER_ID_COUNT) == "1"
                               and headers.get(n.CHECK_ROOM_CONTEXT_COUNT) == "1")
            self.send_response(200 if ok else 403)
            if ok and not rec.omit_identity:
                self.send_header(n.IDENTITY, PROJECTED)
            self.send_header(n.USER_ID, MXID if local else "oidc:org-b:0123")
            self.send_header("x-other", "not copied")
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, *_: Any) -> None:
            pass

    return Projector


def _echo(rec: Recorder) -> type[http.server.BaseHTTPRequestHandler]:
    class Echo(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length") or 0))
            rec.upstream.append((self.path, [(k.lower(), v) for k, v in self.headers.items()]))
            body = b'{"jsonrpc":"2.0","id":1,"result":{}}'
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: Any) -> None:
            pass

    return Echo


@dataclass
class Gateway:
    local: int
    public: int
    mcp: int
    rec: Recorder
    signing_key: ec.EllipticCurvePrivateKey
    tls: ssl.SSLContext


def _jwks(key: ec.EllipticCurvePrivateKey) -> str:
    numbers = key.public_key().public_numbers()

    def b64(value: int) -> str:
        return base64.urlsafe_b64encode(value.to_bytes(32, "big")).rstrip(b"=").decode()

    return json.dumps({"keys": [{"kty": "EC", "crv": "P-256", "kid": "k1", "use": "sig",
                                 "alg": "ES256", "x": b64(numbers.x), "y": b64(numbers.y)}]})


def _jwt(key: ec.EllipticCurvePrivateKey, **claims: Any) -> str:
    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    now = int(time.time())
    payload = {"iss": "https://issuer.example", "aud": "fgentic-a2a", "azp": "org-b-a2a",
               "iat": now, "exp": now + 300, **claims}
    signing_input = (b64(json.dumps({"alg": "ES256", "typ": "JWT", "kid": "k1"}).encode())
                     + "." + b64(json.dumps(payload).encode()))
    r, s = decode_dss_signature(key.sign(signing_input.encode(), ec.ECDSA(hashes.SHA256())))
    return f"{signing_input}.{b64(r.to_bytes(32, 'big') + s.to_bytes(32, 'big'))}"


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    work = tmp_path_factory.mktemp("agentgateway")
    rec = Recorder()
    projector_port, projector = _serve(_projector(rec))
    echo_port, echo = _serve(_echo(rec))
    ports = {name: free_port() for name in ("local", "public", "mcp", "admin", "stats", "ready")}
    namespace, name, spec = binding(
        proxy={"namespace": "agentgateway-system", "selector": {"app": "agw"},
               "port": ports["local"]},
        gateway={"mcpPort": ports["mcp"], "publicPort": ports["public"]},
        # The 1.0 table here; tests/e2e run the real gateway with both wires.
        kagent={"a2aVersion": "1.0"})
    key = ec.generate_private_key(ec.SECP256R1())
    rendered = render(namespace, name, spec, options=RenderOptions(standalone_hosts={
        "projector": f"127.0.0.1:{projector_port}", "kagent": f"127.0.0.1:{echo_port}",
        "retrieval": f"127.0.0.1:{free_port()}"}))
    ca = CertificateAuthority("gateway-test-ca")
    ca.issue_server(["127.0.0.1", "localhost"]).write(work / "tls.crt", work / "tls.key")
    (work / "jwks.json").write_text(_jwks(key))
    admin = {"config": {"adminAddr": f"127.0.0.1:{ports['admin']}",
                        "statsAddr": f"127.0.0.1:{ports['stats']}",
                        "readinessAddr": f"127.0.0.1:{ports['ready']}"}}
    config = work / "config.yaml"
    config.write_text(yaml.safe_dump(admin) + rendered.standalone_yaml())
    env = {**os.environ, rn.ENV_BRIDGE_API_KEY: BRIDGE_KEY, rn.ENV_AGENT_MCP_API_KEY: AGENT_KEY,
           rn.ENV_PUBLIC_JWKS_FILE: str(work / "jwks.json"),
           rn.ENV_PUBLIC_TLS_CERT: str(work / "tls.crt"),
           rn.ENV_PUBLIC_TLS_KEY: str(work / "tls.key")}
    check = subprocess.run([str(_binary()), "-f", str(config), "--validate-only"], env=env,
                           capture_output=True, text=True, check=False)
    assert check.returncode == 0, check.stderr[-2000:]
    log = (work / "agentgateway.log").open("wb")
    proc = subprocess.Popen([str(_binary()), "-f", str(config)], env=env, stdout=log,
                            stderr=subprocess.STDOUT)
    tls = ssl.create_default_context(cadata=ca.cert_pem.decode())
    try:
        _wait_ready(ports["ready"], proc)
        yield Gateway(ports["local"], ports["public"], ports["mcp"], rec, key, tls)
    finally:
        terminate(proc)
        log.close()
        projector.shutdown()
        echo.shutdown()


def _wait_ready(port: int, proc: subprocess.Popen[bytes]) -> None:
    def ready() -> bool:
        assert proc.poll() is None, "agentgateway exited"
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
        conn.request("GET", "/healthz/ready")
        return conn.getresponse().status == 200

    until(ready, "agentgateway ready", 30, interval=0.1, tolerate=(OSError,))


def _post(conn: http.client.HTTPConnection, path: str, body: dict[str, Any],
          headers: list[tuple[str, str]]) -> int:
    data = json.dumps(body).encode()
    conn.putrequest("POST", path)
    for name, value in [("content-type", "application/json"),
                        ("content-length", str(len(data))), *headers]:
        conn.putheader(name, value)  # repeated names stay repeated
    conn.endheaders(data)
    response = conn.getresponse()
    response.read()
    conn.close()
    return response.status


def _send(text: str = "hi", **message: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
            "params": {"message": {"messageId": "m1", "role": "ROLE_USER",
                                   "parts": [{"text": text}], **message}}}


BRIDGE = [("authorization", f"Bearer {BRIDGE_KEY}"), ("a2a-version", "1.0")]
INPUTS = [(n.USER_ID, MXID), (n.ROOM_CONTEXT, "cm9vbQ")]


def local(gw: Gateway, body: dict[str, Any], headers: list[tuple[str, str]]) -> int:
    return _post(http.client.HTTPConnection("127.0.0.1", gw.local, timeout=5), A2A_PATH, body,
                 headers)


def test_local_send_message_is_projected_and_stripped(gateway: Gateway) -> None:
    gateway.rec.checks.clear()
    gateway.rec.upstream.clear()
    status = local(gateway, _send(), [*BRIDGE, *INPUTS, (n.IDENTITY, "FORGED"),
                                      ("cookie", "session=secret")])
    assert status == 200
    [(path, check)] = gateway.rec.checks
    assert path == n.PROJECT_LOCAL_PATH
    assert check[n.CHECK_USER_ID_COUNT] == "1" and check[n.CHECK_ROOM_CONTEXT_COUNT] == "1"
    assert check[n.CHECK_WORKLOAD] == "serviceaccount:matrix/matrix-a2a-bridge"
    assert check[n.CHECK_AGENT] == "fgentic-demo/docs-agent"
    assert check[n.CHECK_A2A_METHOD] == "SendMessage"
    assert not {"authorization", "cookie", n.IDENTITY} & set(check)
    [(upstream_path, upstream)] = gateway.rec.upstream
    assert upstream_path == "/"  # the Agent's own Service (status.deviations)
    values = dict(upstream)
    assert values[n.IDENTITY] == PROJECTED and values[n.USER_ID] == MXID
    assert [k for k, _ in upstream].count(n.IDENTITY) == 1
    assert not {"authorization", "cookie", n.ROOM_CONTEXT, "x-other"} & set(values)


@pytest.mark.parametrize(("headers", "expected"), [
    ([*BRIDGE, *INPUTS, (n.USER_ID, "@mallory:org-a.example")], 403),  # duplicate X-User-Id
    ([*BRIDGE, *INPUTS, (n.ROOM_CONTEXT, "cm9vbTI")], 403),  # duplicate room context
    ([*BRIDGE, (n.USER_ID, MXID)], 403),  # missing room context
    ([*BRIDGE, *INPUTS, ("x-fgentic-extra", "1")], 403),  # unknown reserved name
    ([("a2a-version", "1.0"), *INPUTS], 401),  # no key
    ([("authorization", "Bearer wrong"), ("a2a-version", "1.0"), *INPUTS], 401),
    ([("authorization", f"Bearer {AGENT_KEY}"), ("a2a-version", "1.0"), *INPUTS], 401),
    ([("authorization", f"Bearer {BRIDGE_KEY}"), *INPUTS], 403),  # no A2A-Version
])
def test_local_route_refuses_bad_identity_inputs(
    gateway: Gateway, headers: list[tuple[str, str]], expected: int
) -> None:
    assert local(gateway, _send(), headers) == expected


@pytest.mark.parametrize("message", [{"contextId": "c1"}, {"taskId": ""},
                                     {"referenceTaskIds": []}])
def test_task_references_are_refused(gateway: Gateway, message: dict[str, Any]) -> None:
    assert local(gateway, _send(**message), [*BRIDGE, *INPUTS]) == 403


def test_polls_cancels_and_other_methods_fail(gateway: Gateway) -> None:
    """No poll or cancel on the local route (issue 38 §4): kagent's task store hands a task
    to whoever names its id. Even when the projector (this stub allows whatever carries one
    identity input each) answers 200, the route's own authorization refuses them."""
    gateway.rec.upstream.clear()
    for method in ("GetTask", "CancelTask"):
        poll = {"jsonrpc": "2.0", "id": 2, "method": method, "params": {"id": "t1"}}
        assert local(gateway, poll, BRIDGE) == 403
        assert local(gateway, poll, [*BRIDGE, *INPUTS]) == 403
    assert gateway.rec.upstream == []
    stream = {**_send(), "method": "SendStreamingMessage"}
    assert local(gateway, stream, [*BRIDGE, *INPUTS]) == 403
    assert local(gateway, {"not": "json-rpc"}, [*BRIDGE, *INPUTS]) == 403


def test_forged_identity_survives_no_projector_omission(gateway: Gateway) -> None:
    gateway.rec.omit_identity = True
    try:
        assert local(gateway, _send(), [*BRIDGE, *INPUTS, (n.IDENTITY, "FORGED")]) == 403
    finally:
        gateway.rec.omit_identity = False


def public(gw: Gateway, body: dict[str, Any], headers: list[tuple[str, str]]) -> int:
    conn = http.client.HTTPSConnection("127.0.0.1", gw.public, timeout=5, context=gw.tls)
    return _post(conn, A2A_PATH, body, headers)


def test_public_route_projects_from_validated_jwt_metadata(gateway: Gateway) -> None:
    gateway.rec.checks.clear()
    token = _jwt(gateway.signing_key)
    headers = [("authorization", f"Bearer {token}"), ("a2a-version", "1.0"),
               (n.USER_ID, "@spoofed:org-b.example")]
    assert public(gateway, _send(), headers) == 200
    [(path, check)] = gateway.rec.checks
    assert path == n.PROJECT_PUBLIC_PATH
    assert check[n.CHECK_ISSUER] == "https://issuer.example"
    assert check[n.CHECK_AZP] == "org-b-a2a" and check[n.CHECK_AUDIENCE] == "fgentic-a2a"
    assert check[n.CHECK_TIMEOUT] == "30" and int(check[n.CHECK_TOKEN_EXP]) > time.time()
    assert not {"authorization", n.USER_ID} & set(check)
    assert dict(gateway.rec.upstream[-1][1])[n.USER_ID] == "oidc:org-b:0123"


@pytest.mark.parametrize("case", ["no-token", "other-azp", "other-audience", "get-task",
                                  "return-immediately", "room-context"])
def test_public_route_refusals(gateway: Gateway, case: str) -> None:
    claims = {"other-azp": {"azp": "org-c"}, "other-audience": {"aud": "elsewhere"}}
    token = _jwt(gateway.signing_key, **claims.get(case, {}))
    headers = [("a2a-version", "1.0")]
    if case != "no-token":
        headers.append(("authorization", f"Bearer {token}"))
    if case == "room-context":
        headers.append((n.ROOM_CONTEXT, "cm9vbQ"))
    body = _send()
    if case == "get-task":
        body = {"jsonrpc": "2.0", "id": 2, "method": "GetTask", "params": {"id": "t1"}}
    if case == "return-immediately":
        body["params"]["configuration"] = {"returnImmediately": True}
    assert public(gateway, body, headers) in {401, 403}


def mcp(gw: Gateway, headers: list[tuple[str, str]], body: dict[str, Any] | None = None) -> int:
    body = body or {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    return _post(http.client.HTTPConnection("127.0.0.1", gw.mcp, timeout=5), "/mcp/knowledge",
                 body, headers)


MCP_OK = [("authorization", f"Bearer {AGENT_KEY}"), ("mcp-protocol-version", "2025-11-25"),
          ("accept", "application/json, text/event-stream"), (n.IDENTITY, PROJECTED)]


@pytest.mark.parametrize(("headers", "expected"), [
    (MCP_OK[1:], 401),  # no key
    ([("authorization", f"Bearer {BRIDGE_KEY}"), *MCP_OK[1:]], 401),  # keys are per route
    ([*MCP_OK, (n.IDENTITY, "second")], 403),
    (MCP_OK[:3], 403),  # no carrier
    ([*MCP_OK, (n.USER_ID, MXID), ("x-fgentic-room-context", "x")], 403),
    ([MCP_OK[0], ("mcp-protocol-version", "2025-06-18"), *MCP_OK[2:]], 403),
    ([MCP_OK[0], *MCP_OK[2:]], 403),  # no revision after initialize
])
def test_mcp_route_refusals(gateway: Gateway, headers: list[tuple[str, str]],
                            expected: int) -> None:
    assert mcp(gateway, headers) == expected


def test_mcp_route_admits_the_agent_with_one_carrier(gateway: Gateway) -> None:
    # Authorization passes; the stub target is not an MCP server, so what follows is the
    # MCP backend's own error, never 401/403.
    assert mcp(gateway, MCP_OK) not in {401, 403}
    initialize = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"}}}
    assert mcp(gateway, [MCP_OK[0], *MCP_OK[2:]], initialize) not in {401, 403}
