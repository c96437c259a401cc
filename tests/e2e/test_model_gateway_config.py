"""Per-Agent model routes for memory-enabled Agents through the real agentgateway v1.3.1.

The rendered config (``memoryapi/model_gateway_config.py``, ``render memory-model-routes``)
validates against the release's schema; in the real binary each Agent's route forwards to the
model with its prefix rewritten away and has a bucket of its own: one Agent exhausting its limit
is refused while another's calls still pass.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from aiohttp import web

from fgentic_devenv import free_port, terminate, wait_until
from fgentic_devenv.binaries import upstream_dir
from fgentic_devenv.up import port_open
from fgentic_governance.api.kagent import AgentRef
from fgentic_governance.memoryapi.model_gateway_config import (
    ModelLimit,
    ModelRouteError,
    model_routes_config,
)
from tests.support.gateway import agentgateway_binary
from tests.support.stubs import loopback_app

pytestmark = pytest.mark.e2e

HELPER, OTHER = AgentRef("team-a", "helper"), AgentRef("team-a", "other")


def test_the_config_validates_and_refuses_what_it_cannot_render() -> None:
    schema = json.loads((upstream_dir() / "agentgateway-v1.3.1" / "schema" / "config.json")
                        .read_text())
    config = model_routes_config([HELPER, OTHER], "model.svc:8000", 8090, ModelLimit(30, 10))
    errors = [e.message[:200] for e in jsonschema.Draft202012Validator(schema).iter_errors(config)]
    assert errors == []
    for agents, upstream, port, limit in (
        ([], "m:1", 1, ModelLimit()),
        ([HELPER, HELPER], "m:1", 1, ModelLimit()),
        ([AgentRef("Team_A", "x")], "m:1", 1, ModelLimit()),
        ([HELPER], "http://m:1", 1, ModelLimit()),
        ([HELPER], "m:1", 0, ModelLimit()),
        ([HELPER], "m:1", 1, ModelLimit(0, 1)),
    ):
        with pytest.raises(ModelRouteError):
            model_routes_config(agents, upstream, port, limit)


def _post(url: str) -> int:
    request = urllib.request.Request(url, data=b'{"model":"m","messages":[]}', method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:  # loopback only
            return int(answer.status)
    except urllib.error.HTTPError as error:
        return int(error.code)


async def test_each_agent_has_its_own_rate_limited_route(tmp_path: Path) -> None:
    seen: list[str] = []

    async def model(request: web.Request) -> web.Response:
        seen.append(request.path)
        return web.json_response({"choices": []})

    app = web.Application()
    app.router.add_post("/{tail:.*}", model)
    async with loopback_app(app) as model_port:
        port, ready = free_port(), free_port()
        config: dict[str, Any] = model_routes_config(
            [HELPER, OTHER], f"127.0.0.1:{model_port}", port, ModelLimit(per_minute=1, burst=2))
        config["config"] = {"adminAddr": f"127.0.0.1:{free_port()}",
                            "statsAddr": f"127.0.0.1:{free_port()}",
                            "readinessAddr": f"127.0.0.1:{ready}"}
        path = tmp_path / "agentgateway.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        log = tmp_path / "agentgateway.log"
        with log.open("wb") as sink:
            gateway = subprocess.Popen([str(agentgateway_binary()), "-f", str(path)], stdout=sink,
                                       stderr=subprocess.STDOUT, start_new_session=True)
        try:
            wait_until(lambda: port_open(port), gateway, what="agentgateway", log=log, timeout=60)
            base = f"http://127.0.0.1:{port}"
            # Off the event loop: the model stub answers on it.
            helper = [await asyncio.to_thread(_post, f"{base}/agents/team-a/helper/v1/chat/"
                                              "completions") for _ in range(4)]
            other = await asyncio.to_thread(_post,
                                            f"{base}/agents/team-a/other/v1/chat/completions")
            unknown = await asyncio.to_thread(_post,
                                              f"{base}/agents/team-b/helper/v1/chat/completions")
        finally:
            terminate(gateway)
    assert helper[:2] == [200, 200]
    assert helper[2:] == [429, 429]  # this Agent's bucket is empty ...
    assert other == 200  # ... another Agent's is not
    assert unknown == 404  # no route for an Agent that was not rendered
    assert seen == ["/v1/chat/completions"] * 3  # prefix rewritten; refused calls never sent
