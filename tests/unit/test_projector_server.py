"""The projector's HTTP surface, served exactly as `serve` runs it: check paths, status codes,
header limits, health, metrics, and logs and error answers without content."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from aiohttp import ClientResponse, ClientSession, web
from multidict import CIMultiDict

from fgentic_devenv import free_port
from fgentic_governance import contract
from fgentic_governance.cli import main
from fgentic_governance.retrieval import vocabulary as n
from fgentic_governance.retrieval.projector.core import Projector
from fgentic_governance.retrieval.projector.server import projector_runner
from tests.support.projector import AGENT, ALICE, NOW, config, local_headers, public_headers


def _multi(headers: dict[str, list[str]]) -> CIMultiDict[str]:
    out: CIMultiDict[str] = CIMultiDict()
    for name, values in headers.items():
        if name != "host":
            for value in values:
                out.add(name, value)
    return out


@dataclass
class Served:
    base: str
    session: ClientSession

    async def request(self, method: str, path: str,
                      headers: CIMultiDict[str] | None = None) -> tuple[ClientResponse, str]:
        async with self.session.request(method, self.base + path, headers=headers) as response:
            return response, await response.text()


@pytest.fixture
async def served() -> AsyncIterator[Served]:
    runner = projector_runner(Projector(config()), clock=lambda: float(NOW))
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        async with ClientSession() as session:
            yield Served(f"http://127.0.0.1:{port}", session)
    finally:
        await runner.cleanup()


async def test_local_check_answers_the_two_projected_headers(served: Served) -> None:
    response, _ = await served.request("POST", n.PROJECT_LOCAL_PATH, _multi(local_headers()))
    assert response.status == 200
    identity = contract.decode_identity([response.headers["X-Fgentic-Identity"]], now=NOW,
                                        agent=AGENT)
    assert identity.kind == "matrix"
    assert response.headers.getall("X-User-Id") == [ALICE]


async def test_public_check_answers_the_two_projected_headers(served: Served) -> None:
    response, _ = await served.request("POST", n.PROJECT_PUBLIC_PATH, _multi(public_headers()))
    assert response.status == 200
    assert response.headers["X-User-Id"].startswith("oidc:org-b:")


async def test_any_method_is_checked(served: Served) -> None:
    # The check mirrors the caller's method; the projector judges the CEL-reported one.
    response, _ = await served.request("GET", n.PROJECT_LOCAL_PATH, _multi(local_headers()))
    assert response.status == 200


async def test_denial_is_403_with_a_code_and_no_projection(
    served: Served, caplog: pytest.LogCaptureFixture
) -> None:
    secret = "@secret-user:org-a.example"
    caplog.set_level(logging.DEBUG)
    response, text = await served.request("POST", n.PROJECT_LOCAL_PATH,
                                          _multi(local_headers(user=secret)))
    assert (response.status, text) == (403, "ROOM_CONTEXT_INVALID/CALLER_MISMATCH\n")
    assert "X-Fgentic-Identity" not in response.headers
    assert "X-User-Id" not in response.headers
    assert "secret" not in caplog.text
    assert "code=ROOM_CONTEXT_INVALID/CALLER_MISMATCH" in caplog.text


async def test_repeated_header_at_the_check_is_refused(served: Served) -> None:
    headers = _multi(local_headers())
    headers.add(n.USER_ID, ALICE)
    response, text = await served.request("POST", n.PROJECT_LOCAL_PATH, headers)
    assert (response.status, text) == (403, "CHECK_HEADER_DUPLICATE\n")


async def test_health_metrics_and_unknown_paths(served: Served) -> None:
    assert (await served.request("GET", "/healthz"))[0].status == 200
    await served.request("POST", n.PROJECT_LOCAL_PATH, _multi(local_headers()))
    await served.request("POST", n.PROJECT_PUBLIC_PATH, _multi(public_headers(azp="nobody")))
    _, text = await served.request("GET", "/metrics")
    assert ('fgentic_projector_decisions_total{detail="",reason="ALLOWED",route="local"} 1.0'
            in text)
    assert ('fgentic_projector_decisions_total{detail="",reason="PARTNER_UNKNOWN",'
            'route="public"} 1.0' in text)
    # Anything else is not a check endpoint: 404, which agentgateway treats as a denial.
    for method, path in (("POST", "/v1/project/other"), ("POST", "/healthz"),
                         ("POST", "/metrics"), ("GET", "/")):
        response, _ = await served.request(method, path, _multi(local_headers()))
        assert response.status == 404, (method, path)


@pytest.mark.parametrize(("size", "code"), [
    (8192, "ROOM_CONTEXT_INVALID/NOT_BASE64URL"),  # the contract judges a ceiling-sized value
    (8193, "ROOM_CONTEXT_INVALID/HEADER_TOO_LARGE"),  # ...and refuses one byte more itself
])
async def test_header_limits_leave_the_carrier_ceiling_to_the_contract(
    served: Served, size: int, code: str
) -> None:
    # The value is not valid base64url on purpose: the point is that aiohttp's parser (8,190
    # bytes by default) did not refuse a ceiling-sized value before the contract saw it.
    value = "A" * (size - 1) + "!"
    headers = _multi(local_headers(changes={n.ROOM_CONTEXT: [value]}))
    response, text = await served.request("POST", n.PROJECT_LOCAL_PATH, headers)
    assert (response.status, text) == (403, code + "\n")


async def test_parser_failures_answer_and_log_without_content(
    served: Served, caplog: pytest.LogCaptureFixture
) -> None:
    """agentgateway relays an ext-authz answer to the caller, so aiohttp's default 400 body,
    which quotes the offending header, must not be sent (nor logged)."""
    caplog.set_level(logging.DEBUG)
    marker = "secretmarker" * 6000  # beyond every limit: aiohttp's parser refuses it
    headers: CIMultiDict[str] = CIMultiDict({n.ROOM_CONTEXT: marker})
    response, text = await served.request("POST", n.PROJECT_LOCAL_PATH, headers)
    assert (response.status, text) == (400, "HTTP_REQUEST_REJECTED\n")
    assert "secretmarker" not in caplog.text
    assert "details withheld" in caplog.text


def test_cli_refuses_an_unusable_configuration(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "projector.yaml"
    bad.write_text("local: {}\n")
    assert main(["projector", "--config", str(bad), "--port", "0"]) == 2
    line = capsys.readouterr().err.strip()
    assert line.startswith(f"fgentic-governance projector: --config {bad}: "), line
    assert "\n" not in line and "Traceback" not in line
    assert main(["projector", "--config", str(tmp_path / "absent.yaml")]) == 2
    line = capsys.readouterr().err.strip()
    assert line.startswith("fgentic-governance projector: --config "), line
    assert "Traceback" not in line
