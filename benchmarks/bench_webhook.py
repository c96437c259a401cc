"""Webhook benchmark: review throughput and latency on one core, and the latency a real
`create` gains through the API server with the webhook versus without it.

    python -m benchmarks.bench_webhook [--seconds 5] [--creates 300]

Starts its own etcd + kube-apiserver, pins the webhook process to CPU 0 (taskset) and drives
it from this process on the other core. Prints figures; asserts nothing about timings.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import ssl
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import aiohttp
from kubernetes import client, config

from fgentic_devenv import free_port, terminate, wait_until
from fgentic_devenv.binaries import upstream_crds
from fgentic_devenv.controlplane import LocalControlPlane
from fgentic_devenv.paths import repo_root
from fgentic_devenv.up import port_open, spawn_cli
from fgentic_governance.admission.render import webhook_configuration
from fgentic_governance.serving.tls import write_serving_bundle

NS = "bench"


def review(i: int) -> bytes:
    agent = {"apiVersion": "kagent.dev/v1alpha2", "kind": "Agent",
             "metadata": {"name": f"a{i}", "namespace": NS},
             "spec": {"type": "Declarative", "declarative": {
                 "modelConfig": "m", "systemMessage": "s",
                 "tools": [{"type": "McpServer", "mcpServer": {
                     "apiGroup": "kagent.dev", "kind": "RemoteMCPServer", "name": "tickets",
                     "toolNames": ["list"],
                     "allowedHeaders": ["Authorization"] if i % 2 else []}}]}}}
    body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": str(i), "operation": "CREATE", "object": agent}}
    return json.dumps(body).encode()


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def saturate(url: str, ctx: ssl.SSLContext, seconds: float, workers: int) -> float:
    """Reviews per second with ``workers`` keep-alive connections for ``seconds``."""
    done = 0
    deadline = time.perf_counter() + seconds
    bodies = [review(i) for i in range(64)]

    async def worker(session: aiohttp.ClientSession) -> None:
        nonlocal done
        i = 0
        while time.perf_counter() < deadline:
            async with session.post(url, data=bodies[i % 64], ssl=ctx) as resp:
                await resp.read()
            done += 1
            i += 1

    connector = aiohttp.TCPConnector(limit=workers)
    async with aiohttp.ClientSession(connector=connector) as session:
        started = time.perf_counter()
        await asyncio.gather(*(worker(session) for _ in range(workers)))
        return done / (time.perf_counter() - started)


async def fixed_rate(url: str, ctx: ssl.SSLContext, rate: float, seconds: float) -> list[float]:
    """Latencies (ms) of reviews sent at a fixed rate (open loop)."""
    latencies: list[float] = []
    body = review(1)

    async def one(session: aiohttp.ClientSession) -> None:
        started = time.perf_counter()
        async with session.post(url, data=body, ssl=ctx) as resp:
            await resp.read()
        latencies.append((time.perf_counter() - started) * 1000)

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=256)) as session:
        tasks = []
        start = time.perf_counter()
        for n in range(int(rate * seconds)):
            delay = start + n / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(session)))
        await asyncio.gather(*tasks)
    return latencies


def creates(api: client.CustomObjectsApi, count: int) -> list[float]:
    """Latencies (ms) of serial creates of a small admitted Agent."""
    out = []
    for _ in range(count):
        body = {"apiVersion": "kagent.dev/v1alpha2", "kind": "Agent",
                "metadata": {"name": f"c-{uuid.uuid4().hex[:10]}", "namespace": NS},
                "spec": {"type": "Declarative",
                         "declarative": {"modelConfig": "m", "systemMessage": "s"}}}
        started = time.perf_counter()
        api.create_namespaced_custom_object("kagent.dev", "v1alpha2", NS, "agents", body)
        out.append((time.perf_counter() - started) * 1000)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--creates", type=int, default=300)
    parser.add_argument("--rate", type=float, default=500.0)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-webhook-"))
    with LocalControlPlane(work / "cp") as cp:
        cp.install_crds([*upstream_crds(), *sorted((repo_root() / "crds").glob("*.yaml"))])
        cp.ensure_namespace(NS)
        _, _, ca = write_serving_bundle(work / "tls", ["127.0.0.1"])
        port = free_port()
        log = work / "webhook.log"
        proc = spawn_cli(["webhook", "--kubeconfig", str(cp.kubeconfig), "--tls-dir",
                          str(work / "tls"), "--host", "127.0.0.1", "--port", str(port),
                          "--health-port", str(free_port()), "--audit-interval", "0"], log)
        os.sched_setaffinity(proc.pid, {0})
        os.sched_setaffinity(0, {1} if os.cpu_count() and os.cpu_count() > 1 else {0})  # type: ignore[operator]
        try:
            wait_until(lambda: port_open(port), proc, what="webhook", log=log, timeout=60)
            ctx = ssl.create_default_context(cafile=str(ca))
            url = f"https://127.0.0.1:{port}/agents"
            asyncio.run(saturate(url, ctx, 1.0, 8))  # warm-up
            cpu_before = cpu_seconds(proc.pid)
            started = time.perf_counter()
            throughput = asyncio.run(saturate(url, ctx, args.seconds, 16))
            busy = (cpu_seconds(proc.pid) - cpu_before) / (time.perf_counter() - started)
            capacity = throughput / max(busy, 1e-9)
            latencies = asyncio.run(fixed_rate(url, ctx, args.rate, args.seconds))
            # A real create: every process may use every core, as in a cluster.
            everything = set(range(os.cpu_count() or 1))
            os.sched_setaffinity(proc.pid, everything)
            os.sched_setaffinity(0, everything)
            api = client.CustomObjectsApi(config.new_client_from_config(str(cp.kubeconfig)))
            creates(api, 30)  # warm-up
            without = creates(api, args.creates)
            vwc = webhook_configuration("bench", f"https://127.0.0.1:{port}", ca.read_bytes())
            cp.kubectl("apply", "-f", "-", input=json.dumps(vwc))
            time.sleep(1.0)
            creates(api, 30)
            with_hook = creates(api, args.creates)
        finally:
            terminate(proc)
    report(throughput, capacity, busy, latencies, without, with_hook, args)


def report(throughput: float, capacity: float, busy: float, latencies: list[float],  # noqa: PLR0917
           without: list[float], with_hook: list[float], args: Any) -> None:
    m0, m1 = statistics.median(without), statistics.median(with_hook)
    print("webhook benchmark (webhook pinned to CPU 0, client on CPU 1, TLS on loopback)")
    print(f"  AdmissionReview throughput, 16 connections, {args.seconds:.0f} s: "
          f"{throughput:,.0f} reviews/s with the webhook at {busy:.0%} of its core; "
          f"{capacity:,.0f} reviews per CPU-second of the webhook (target >= 2,000/s)")
    print(f"  at {args.rate:.0f} reviews/s for {args.seconds:.0f} s: "
          f"p50 {pct(latencies, .5):.2f} ms, p99 {pct(latencies, .99):.2f} ms "
          "(target p99 <= 10 ms)")
    print(f"  real create, {args.creates} serial Agents: without webhook median {m0:.2f} ms "
          f"p99 {pct(without, .99):.2f} ms; with webhook median {m1:.2f} ms "
          f"p99 {pct(with_hook, .99):.2f} ms")
    print(f"  added median latency {m1 - m0:+.2f} ms, ratio {m1 / m0:.2f}x "
          "(target <= +1.5 ms)")


if __name__ == "__main__":
    main()
