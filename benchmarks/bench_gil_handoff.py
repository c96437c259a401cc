"""What the erasure lane's thread waits for the GIL per round trip while the operator's main
thread is busy (issue 39; ``controller.lanes.GIL_SWITCH_SECONDS``).

One thread does loopback round trips with an echo process on an event loop of its own (the
erasure lane's store round trips), alone and then beside a thread that runs Python code
without pause (the main loop through a creation burst), once at CPython's default switch
interval and once at the operator's. Printed: each round trip's p50 and mean, and their
ratios to the thread alone, measured in one run; nothing is asserted.

    python -m benchmarks.bench_gil_handoff [--trips 300]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import socket
import statistics
import sys
import threading
import time
from collections.abc import Callable

from fgentic_governance.controller.lanes import GIL_SWITCH_SECONDS

DEFAULT_SWITCH = 0.005  # CPython's
BUSY_STEP = 1000


def _echo(ready: multiprocessing.SimpleQueue[int]) -> None:  # pragma: no cover (child)
    server = socket.create_server(("127.0.0.1", 0))
    ready.put(server.getsockname()[1])
    conn, _ = server.accept()
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    while data := conn.recv(64):
        conn.sendall(data)


async def _trips(port: int, count: int) -> list[float]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    times = []
    for _ in range(count):
        start = time.perf_counter()
        writer.write(b"x")
        await writer.drain()
        await reader.readexactly(1)
        times.append((time.perf_counter() - start) * 1e3)
    writer.close()
    return times


def _busy(stop: threading.Event) -> None:
    total = 0
    while not stop.is_set():
        for i in range(BUSY_STEP):  # Python code without a pause: it holds the GIL
            total += i * i


def _measure(count: int, busy: bool, switch: float) -> list[float]:
    """Round trips on a thread of their own against a fresh echo process."""
    ctx = multiprocessing.get_context("spawn")
    ready: multiprocessing.SimpleQueue[int] = ctx.SimpleQueue()
    echo = ctx.Process(target=_echo, args=(ready,), daemon=True)
    echo.start()
    port = ready.get()
    sys.setswitchinterval(switch)
    stop = threading.Event()
    hog = threading.Thread(target=_busy, args=(stop,), daemon=True)
    if busy:
        hog.start()
    result: list[list[float]] = []
    lane = threading.Thread(target=lambda: result.append(asyncio.run(_trips(port, count))))
    lane.start()
    lane.join(120.0)  # bounded
    stop.set()
    echo.join(5.0)
    echo.kill()
    if not result:
        raise SystemExit("the round trips did not finish within 120 s")
    return result[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trips", type=int, default=300)
    args = parser.parse_args(argv)
    before = sys.getswitchinterval()
    runs: list[tuple[str, Callable[[], list[float]]]] = [
        ("alone", lambda: _measure(args.trips, False, DEFAULT_SWITCH)),
        (f"beside a busy thread, switch {DEFAULT_SWITCH * 1e3:g} ms (CPython's default)",
         lambda: _measure(args.trips, True, DEFAULT_SWITCH)),
        (f"beside a busy thread, switch {GIL_SWITCH_SECONDS * 1e3:g} ms (the operator's)",
         lambda: _measure(args.trips, True, GIL_SWITCH_SECONDS)),
    ]
    try:
        figures = [(name, run()) for name, run in runs]
    finally:
        sys.setswitchinterval(before)
    base = statistics.mean(figures[0][1])
    print("== summary (figures only; nothing is asserted)")
    for name, times in figures:
        mean = statistics.mean(times)
        print(f"round trip {name}: p50 {statistics.median(times):.3f} ms, mean {mean:.3f} ms "
              f"({mean / base:.1f}x alone; {len(times)} trips)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
