"""The identity projector's added latency per request through the real agentgateway v1.3.1.

    .venv/bin/python -m benchmarks.bench_projector [--requests 2000] [--warmup 100] [--keep]

Starts the same stack as tests/e2e (the renderer's standalone config for the example
RetrievalBinding, the real `fgentic-governance projector` process, an echo backend for kagent)
and adds one listener to the same gateway process: the local A2A route exactly as rendered but
without `extAuthz` and without the two authorization rules that need its result (the
projection's presence and the exactly-one-identity rule). Both routes keep the API key, every
other CEL rule, the header modifier, the A2A policy and the rewrite, so the difference is the
ext-authz hop: the gateway's check request, the projector's decision and the header overwrite.

Requests alternate between the two routes (order swapped every round) over one keep-alive
connection each, sequentially. Also reported, as components: the projector's HTTP check
called directly, and the decision function in process. Prints figures; never asserts timings.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import time
from pathlib import Path
from typing import Any

from aiohttp import ClientSession, DummyCookieJar, TCPConnector

from benchmarks.common import Table, banner, command_line, machine, scratch_dir, time_sync
from fgentic_devenv import free_port, wait_until
from fgentic_devenv.up import port_open
from fgentic_governance import contract
from fgentic_governance.retrieval import vocabulary as n
from fgentic_governance.retrieval.projector.core import Projector
from fgentic_governance.retrieval.projector_config import projector_config
from tests.support.gateway import (
    AGENT_PATH,
    BRIDGE_KEY,
    find_agentgateway,
    gateway_stack,
    send_message_body,
)
from tests.support.projector import ALICE, local_headers, room_context

_NEEDS_PROJECTION = ("extauthz.", '"x-fgentic-identity"')


def add_baseline_listener(config: dict[str, Any], port: int) -> None:
    """A copy of the rendered local route, without ext-authz, on its own bind."""
    bind = copy.deepcopy(config["binds"][0])
    listener = bind["listeners"][0]
    assert listener["name"] == "local-a2a"
    listener["name"] = "baseline-a2a"
    route = listener["routes"][0]
    route["name"] += "-baseline"
    policies = route["policies"]
    del policies["extAuthz"]
    policies["authorization"]["rules"] = [
        rule for rule in policies["authorization"]["rules"]
        if not any(marker in rule["require"] for marker in _NEEDS_PROJECTION)]
    bind["port"] = port
    config["binds"].append(bind)


def bridge_headers() -> list[tuple[str, str]]:
    return [("authorization", f"Bearer {BRIDGE_KEY}"), ("x-user-id", ALICE),
            ("x-fgentic-room-context", contract.encode_room_context(room_context()))]


async def _post(session: ClientSession, url: str, headers: list[tuple[str, str]]) -> float:
    body = send_message_body()
    start = time.perf_counter()
    async with session.post(url, json=body, headers=headers) as response:
        await response.read()
        elapsed = time.perf_counter() - start
        if response.status != 200:
            raise RuntimeError(f"{url}: HTTP {response.status}")
    return elapsed


def _session() -> ClientSession:
    # One connection per route, reused: the figures hold no TCP handshakes.
    return ClientSession(connector=TCPConnector(limit=1), cookie_jar=DummyCookieJar())


async def measure(requests: int, warmup: int, workdir: Path, binary: Path) -> None:
    baseline_port = free_port()
    async with gateway_stack(workdir, binary=binary,
                             edit=lambda cfg: add_baseline_listener(cfg, baseline_port)) as stack:
        proc = stack.processes["agentgateway"]
        wait_until(lambda: port_open(baseline_port), proc, what="baseline listener",
                   log=stack.log("agentgateway"), timeout=30)
        projected_url = stack.local_url
        baseline_url = f"http://127.0.0.1:{baseline_port}{AGENT_PATH}"
        check_url = f"http://127.0.0.1:{stack.ports['projector']}{n.PROJECT_LOCAL_PATH}"
        headers = bridge_headers()
        check = [(k, v) for k, vs in local_headers().items() if k != "host" for v in vs]
        projected: list[float] = []
        baseline: list[float] = []
        direct: list[float] = []
        async with _session() as a, _session() as b, _session() as c:
            for _ in range(warmup):
                await _post(a, projected_url, headers)
                await _post(b, baseline_url, headers)
                await _post(c, check_url, check)
            for i in range(requests):
                if i % 2:
                    projected.append(await _post(a, projected_url, headers))
                    baseline.append(await _post(b, baseline_url, headers))
                else:
                    baseline.append(await _post(b, baseline_url, headers))
                    projected.append(await _post(a, projected_url, headers))
                direct.append(await _post(c, check_url, check))

    projector = Projector(projector_config(stack.spec))
    decision_input = local_headers()
    now = int(time.time())
    in_process = time_sync(lambda: projector.local(decision_input, now=now), requests,
                           warmup=warmup)

    table = Table("Local A2A message/send (A2A 0.3) through agentgateway v1.3.1 (sequential, "
                  "keep-alive)")
    with_ext = table.add("route with extAuthz (projector)", projected, baseline=baseline)
    without = table.add("same route without extAuthz", baseline)
    table.add("projector check, direct HTTP (component)", direct)
    table.add("projector decision, in process (component)", in_process)
    table.print()
    print(f"added latency per request: median {1e3 * (with_ext.median - without.median):.2f} ms,"
          f" p99 {1e3 * (with_ext.p99 - without.p99):.2f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--keep", action="store_true", help="keep the scratch directory")
    args = parser.parse_args()
    binary = find_agentgateway()
    if binary is None:
        raise SystemExit("no agentgateway v1.3.1 binary (set AGENTGATEWAY_BIN)")
    banner("bench_projector")
    print(f"command: {command_line()}\nmachine: {machine()}\nbinary: {binary}", flush=True)
    with scratch_dir("projector", keep=args.keep) as workdir:
        asyncio.run(measure(args.requests, args.warmup, workdir, binary))


if __name__ == "__main__":
    main()
