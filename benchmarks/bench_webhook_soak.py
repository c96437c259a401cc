"""Webhook soak: sustained AdmissionReview load against the real webhook server process, with its
resident memory sampled throughout.

    .venv/bin/python -m benchmarks.bench_webhook_soak [--seconds 600] [--rate 200]
        [--sample-seconds 10] [--keep]

Starts its own etcd + kube-apiserver and the real ``fgentic-governance webhook`` command (TLS on
loopback, informers on RetrievalBindings and MemoryScopes, audit off), then sends kagent Agent
CREATE reviews to ``/agents`` at a fixed rate (open loop: a request is due at its slot whether
or not earlier ones have answered) for ``--seconds``. Every review has its own uid and Agent
name, half of them carry a forbidden header (denied), so nothing the server might cache by name
stays small by accident.

Prints errors (transport failures, non-200 answers, an answer for another uid, or a verdict that
differs from the first verdict seen for the same body shape: all must be 0), p50/p99 latency
overall and per minute, and the webhook's VmRSS every ``--sample-seconds`` (first, last, max,
VmHWM, least-squares slope in MiB per minute over the whole run and after the first minute).
Targets: webhook server footprint <= 100 MiB, flat memory. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import ssl
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from benchmarks.bench_webhook import cpu_seconds, review
from benchmarks.common import (
    banner,
    command_line,
    local_control_plane,
    machine,
    percentile,
    scratch_dir,
)
from fgentic_devenv import free_port, terminate, wait_until
from fgentic_devenv.up import port_open, spawn_cli
from fgentic_governance.serving.tls import write_serving_bundle

NS = "bench"
MIB = 1024 * 1024


def proc_memory(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM) of a process in MiB, from /proc/<pid>/status."""
    values = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in {"VmRSS", "VmHWM"}:
            values[key] = int(rest.split()[0]) / 1024  # kB -> MiB
    return values["VmRSS"], values["VmHWM"]


def slope_per_minute(points: Sequence[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, MiB) points, in MiB per minute."""
    if len(points) < 2:
        return 0.0
    n = len(points)
    mean_t = sum(t for t, _ in points) / n
    mean_v = sum(v for _, v in points) / n
    var = sum((t - mean_t) ** 2 for t, _ in points)
    cov = sum((t - mean_t) * (v - mean_v) for t, v in points)
    return cov / var * 60 if var else 0.0


@dataclass
class Soak:
    latencies: list[float] = field(default_factory=list)  # ms, every answered review
    window: list[float] = field(default_factory=list)  # ms, the current minute
    errors: dict[str, int] = field(default_factory=dict)
    verdicts: dict[int, bool] = field(default_factory=dict)  # body shape -> allowed
    sent: int = 0
    late: int = 0  # requests sent more than 10 ms after their slot (client fell behind)
    samples: list[tuple[float, float, float]] = field(default_factory=list)  # t, RSS, HWM

    def error(self, kind: str) -> None:
        self.errors[kind] = self.errors.get(kind, 0) + 1


async def one(session: aiohttp.ClientSession, url: str, ctx: ssl.SSLContext, n: int,
              soak: Soak) -> None:
    body = json.loads(review(n))
    uid = f"soak-{n}"
    body["request"]["uid"] = uid
    data = json.dumps(body).encode()
    started = time.perf_counter()
    try:
        async with session.post(url, data=data, ssl=ctx,
                                timeout=aiohttp.ClientTimeout(total=10)) as resp:
            status = resp.status
            payload = await resp.read()
    except (TimeoutError, aiohttp.ClientError) as exc:
        soak.error(f"transport {type(exc).__name__}")
        return
    elapsed = (time.perf_counter() - started) * 1000
    if status != 200:
        soak.error(f"http {status}")
        return
    try:
        answer = json.loads(payload)["response"]
        allowed = bool(answer["allowed"])
        same_uid = answer["uid"] == uid
    except (ValueError, KeyError, TypeError):
        soak.error("malformed answer")
        return
    if not same_uid:
        soak.error("answer for another uid")
        return
    shape = n % 2  # review(n) puts a forbidden header on odd n
    if soak.verdicts.setdefault(shape, allowed) != allowed:
        soak.error("verdict changed")
        return
    soak.latencies.append(elapsed)
    soak.window.append(elapsed)


async def drive(url: str, ctx: ssl.SSLContext, pid: int, args: argparse.Namespace) -> Soak:
    soak = Soak()
    pending: set[asyncio.Task[None]] = set()
    total = int(args.rate * args.seconds)
    connector = aiohttp.TCPConnector(limit=64)
    async with aiohttp.ClientSession(connector=connector) as session:
        start = time.perf_counter()
        next_sample = 0.0
        next_minute = 60.0
        for n in range(total):
            due = n / args.rate
            now = time.perf_counter() - start
            if now >= next_sample:
                rss, hwm = proc_memory(pid)
                soak.samples.append((now, rss, hwm))
                next_sample += args.sample_seconds
            if now >= next_minute:
                window = soak.window
                soak.window = []
                print(f"  t={now:5.0f} s  sent {soak.sent:>7,}  errors "
                      f"{sum(soak.errors.values())}  "
                      + (f"p50 {percentile(window, 50):.2f} ms  p99 "
                         f"{percentile(window, 99):.2f} ms  " if window else "")
                      + f"RSS {soak.samples[-1][1]:.1f} MiB", flush=True)
                next_minute += 60.0
            delay = due - now
            if delay > 0:
                await asyncio.sleep(delay)
            elif delay < -0.010:
                soak.late += 1
            task = asyncio.create_task(one(session, url, ctx, n, soak))
            pending.add(task)
            task.add_done_callback(pending.discard)
            soak.sent += 1
        await asyncio.gather(*pending)
        end = time.perf_counter() - start
        rss, hwm = proc_memory(pid)
        soak.samples.append((end, rss, hwm))
    return soak


def report(soak: Soak, args: argparse.Namespace, elapsed: float, cpu: float) -> None:
    lat = soak.latencies
    rss = [s[1] for s in soak.samples]
    after_first_minute = [(t, v) for t, v, _ in soak.samples if t >= 60.0]
    errors = sum(soak.errors.values())
    banner("summary (figures only; nothing is asserted)")
    print(f"webhook soak: {soak.sent:,} AdmissionReviews to /agents at {args.rate:.0f}/s for "
          f"{args.seconds:.0f} s (open loop, TLS on loopback, no CPU pinning)")
    rows = [
        ("reviews sent / answered", f"{soak.sent:,} / {len(lat):,}", "-"),
        ("achieved rate", f"{soak.sent / elapsed:,.1f} reviews/s", "-"),
        ("errors", f"{errors}" + (f" ({soak.errors})" if errors else ""), "0"),
        ("sent > 10 ms after their slot (client behind)", f"{soak.late:,}", "-"),
        ("latency p50 / p99 / max",
         f"{percentile(lat, 50):.2f} / {percentile(lat, 99):.2f} / {max(lat):.1f} ms"
         if lat else "n/a", "-"),
        ("webhook CPU", f"{cpu:.1%} of one core", "-"),
        ("webhook RSS first / last / max",
         f"{rss[0]:.1f} / {rss[-1]:.1f} / {max(rss):.1f} MiB", "<= 100 MiB"),
        ("webhook VmHWM at the end", f"{soak.samples[-1][2]:.1f} MiB", "<= 100 MiB"),
        ("RSS slope, whole run",
         f"{slope_per_minute([(t, v) for t, v, _ in soak.samples]):+.3f} MiB/min", "flat"),
        ("RSS slope, after the first minute",
         f"{slope_per_minute(after_first_minute):+.3f} MiB/min"
         if len(after_first_minute) > 1 else "n/a", "flat"),
        ("RSS samples", f"{len(rss)} (every {args.sample_seconds:.0f} s)", "-"),
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    header = ("figure", "value", "target")
    widths = [max(w, len(h)) for w, h in zip(widths, header, strict=True)]
    for row in [header, tuple("-" * w for w in widths), *rows]:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    print(f"RSS samples (MiB): {' '.join(f'{v:.1f}' for v in rss)}")
    print(f"command: {command_line()}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--seconds", type=float, default=600.0)
    parser.add_argument("--rate", type=float, default=200.0, help="reviews per second")
    parser.add_argument("--sample-seconds", type=float, default=10.0, help="RSS sampling period")
    parser.add_argument("--keep", action="store_true", help="keep logs and server state")
    args = parser.parse_args(argv)
    print(f"command: {command_line()}")
    print(f"machine: {machine()}; run {uuid.uuid4().hex[:8]}, "
          f"{time.strftime('%Y-%m-%d %H:%M:%S %Z')}; load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    with scratch_dir("webhook-soak", keep=args.keep) as work, \
            local_control_plane(work / "controlplane") as plane:
        plane.ensure_namespace(NS)
        _, _, ca = write_serving_bundle(work / "tls", ["127.0.0.1"])
        port = free_port()
        log = work / "webhook.log"
        proc = spawn_cli(["webhook", "--kubeconfig", str(plane.kubeconfig), "--tls-dir",
                          str(work / "tls"), "--host", "127.0.0.1", "--port", str(port),
                          "--health-port", str(free_port()), "--audit-interval", "0"], log)
        try:
            wait_until(lambda: port_open(port), proc, what="webhook", log=log, timeout=60)
            ctx = ssl.create_default_context(cafile=str(ca))
            url = f"https://127.0.0.1:{port}/agents"
            rss, hwm = proc_memory(proc.pid)
            print(f"webhook pid {proc.pid} listening; RSS {rss:.1f} MiB (VmHWM {hwm:.1f}) "
                  "before any review", flush=True)
            banner(f"soak: {args.rate:.0f} reviews/s for {args.seconds:.0f} s")
            cpu_before = cpu_seconds(proc.pid)
            started = time.perf_counter()
            soak = asyncio.run(drive(url, ctx, proc.pid, args))
            elapsed = time.perf_counter() - started
            cpu = (cpu_seconds(proc.pid) - cpu_before) / elapsed
            alive = proc.poll() is None
        finally:
            terminate(proc)
    if not alive:
        print("the webhook process exited during the soak")
    report(soak, args, elapsed, cpu)
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
