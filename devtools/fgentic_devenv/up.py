"""`fgentic-dev up`: the whole system on this machine, end to end.

Builds or reuses the control-plane binaries, starts etcd + kube-apiserver and PostgreSQL on
loopback, installs our CRDs and the pinned upstream ones, starts the memory API, the webhook
(with its own Validating- and MutatingWebhookConfiguration, routing memory-enabled Agents'
Pods to the memory API) and the operator as child processes, applies `examples/`, shows that
an unsafe Agent is denied, prints each object's content-free status, and shows a governed
save and a refused unconsented one through the memory API (``memory_demo``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from fgentic_devenv import (
    free_port,
    memory_demo,
    paths,
    pidfiles,
    port_open,
    retrieval_demo,
    terminate,
    wait_until,
)
from fgentic_devenv.binaries import upstream_crds
from fgentic_devenv.controlplane import KubectlError, LocalControlPlane
from fgentic_devenv.postgres import LocalPostgres
from fgentic_governance.admission.render import mutating_configuration, webhook_configuration
from fgentic_governance.api.registry import KINDS as RESOURCES
from fgentic_governance.serving.tls import write_serving_bundle

LOCAL_HOMESERVER = "fgentic.local"
KINDS = tuple(resource.plural for resource in RESOURCES)
STOP_SIGNALS: Final = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def spawn_cli(args: Sequence[str], log: Path,
              env: Mapping[str, str | None] | None = None) -> subprocess.Popen[bytes]:
    """Run `fgentic-governance <args>` with this interpreter, output appended to ``log``; ``env``
    overrides this process's environment for the child (None unsets a variable)."""
    environ = os.environ.copy()
    for key, value in (env or {}).items():
        if value is None:
            environ.pop(key, None)
        else:
            environ[key] = value
    with log.open("ab") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "fgentic_governance.cli", *args],
            stdout=sink, stderr=subprocess.STDOUT, env=environ,
            start_new_session=True,
        )
    pidfiles.record(log, proc)
    return proc


class DevStack:
    """The processes of one `fgentic-dev up` run; stop() tears everything down in reverse order."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir.resolve()
        self.cp = LocalControlPlane(self.workdir / "controlplane")
        self.pg = LocalPostgres(self.workdir / "postgres")
        self.children: list[subprocess.Popen[bytes]] = []
        self.dsn = ""
        self.memory_api = ""

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._fresh()
        print("starting etcd + kube-apiserver and PostgreSQL on loopback ...", flush=True)
        self.cp.start()
        self.pg.start()
        crds = sorted((paths.repo_root() / "crds").glob("*.yaml")) + upstream_crds()
        self.cp.install_crds(crds)
        print(f"installed {len(crds)} CRDs; kubeconfig: {self.cp.kubeconfig}", flush=True)
        dsn = asyncio.run(self.pg.create_database("fgentic", ("vector",)))
        dsn_file = self.workdir / "store-dsn"
        dsn_file.touch(mode=0o600)
        dsn_file.write_text(dsn)
        self.dsn = dsn
        self._start_operator(dsn_file)
        self._start_memory_api(dsn_file)
        self._start_webhook()

    def _start_webhook(self) -> None:
        _, _, ca = write_serving_bundle(self.workdir / "webhook-tls", ["127.0.0.1", "localhost"])
        port = free_port()
        log = self.workdir / "webhook.log"
        proc = spawn_cli(["webhook", "--kubeconfig", str(self.cp.kubeconfig), "--tls-dir",
                          str(self.workdir / "webhook-tls"), "--host", "127.0.0.1",
                          "--port", str(port), "--health-port", str(free_port()),
                          "--local-homeserver", LOCAL_HOMESERVER,
                          "--memory-api-url", self.memory_api], log)
        self.children.append(proc)
        wait_until(lambda: port_open(port), proc, what="webhook", log=log, timeout=60)
        base = f"https://127.0.0.1:{port}"
        for config in (webhook_configuration("fgentic-governance", base, ca.read_bytes(),
                                             memory_routing=True),
                       mutating_configuration("fgentic-governance", base, ca.read_bytes())):
            self.cp.kubectl("apply", "-f", "-", input=json.dumps(config))
        print(f"webhook serving on 127.0.0.1:{port} (log {log})", flush=True)

    def _start_memory_api(self, dsn_file: Path) -> None:
        """kagent's controller is not part of `fgentic-dev up`: pass-through answers 502 here."""
        port = free_port()
        log = self.workdir / "memory-api.log"
        proc = spawn_cli(["memory-api", "--kubeconfig", str(self.cp.kubeconfig),
                          "--store-dsn-file", str(dsn_file), "--upstream",
                          f"http://127.0.0.1:{free_port()}", "--local-homeserver",
                          LOCAL_HOMESERVER, "--host", "127.0.0.1", "--port", str(port)], log)
        self.children.append(proc)
        wait_until(lambda: port_open(port), proc, what="memory-api", log=log, timeout=60)
        self.memory_api = f"http://127.0.0.1:{port}"
        print(f"memory API serving on {self.memory_api} (log {log})", flush=True)

    def _start_operator(self, dsn_file: Path) -> None:
        log = self.workdir / "operator.log"
        proc = spawn_cli(["operator", "--kubeconfig", str(self.cp.kubeconfig),
                          "--local-homeserver", LOCAL_HOMESERVER,
                          "--store-dsn-file", str(dsn_file)], log)
        self.children.append(proc)
        print(f"operator running (log {log})", flush=True)

    def retrieval_demo(self) -> None:
        """The real retrieval server behind the real gateway (retrieval_demo.py), on a corpus
        database of its own; its processes stop with the rest."""
        dsn = asyncio.run(self.pg.create_database("knowledge", ("vector",)))
        demo = retrieval_demo.RetrievalDemo(self.workdir, self._spawn)
        try:
            demo.run(dsn)
        finally:
            self.children += demo.children

    @staticmethod
    def _spawn(argv: list[str], log: Path,
               env: dict[str, str] | None) -> subprocess.Popen[bytes]:
        """A `fgentic-governance` subcommand, or (a path or an interpreter first) a program."""
        if argv[0].startswith("/"):
            with log.open("ab") as sink:
                proc = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT,
                                        env=env, start_new_session=True)
            pidfiles.record(log, proc)
            return proc
        return spawn_cli(argv, log, env)

    def _fresh(self) -> None:
        """Stop what a previous run in this directory left and drop its API server objects.
        PostgreSQL's data directory is new on every start, so kept objects would describe
        scopes, consent and withdrawals the new store has never seen (a withdrawn
        ConsentRecord cannot be granted again, and the demo failed on it)."""
        if left := pidfiles.stop_recorded(self.workdir):
            print(f"stopped {left} process(es) a previous run left in {self.workdir}",
                  flush=True)
        shutil.rmtree(self.cp.workdir / "etcd-data", ignore_errors=True)

    def stop(self) -> None:
        for proc in reversed(self.children):
            terminate(proc)
        self.pg.stop()
        self.cp.stop()
        # Anything started but not yet handed to a list above (a signal mid-spawn).
        pidfiles.stop_recorded(self.workdir)


def apply_examples(cp: LocalControlPlane) -> None:
    examples = paths.repo_root() / "examples"
    print(cp.kubectl("apply", "-f", str(examples)).strip(), flush=True)
    denied = examples / "denied"
    for manifest in sorted(denied.glob("*.yaml")):
        try:
            cp.kubectl("apply", "-f", str(manifest))
        except KubectlError as exc:
            print(f"denied as expected: {manifest.name}: {exc.stderr.splitlines()[-1]}")
        else:
            raise SystemExit(f"{manifest.name} was admitted but must be denied")


def wait_observed(cp: LocalControlPlane, timeout: float = 60.0) -> list[dict[str, Any]]:
    """All our objects once each reports status for its current generation."""
    deadline = time.monotonic() + timeout
    while True:
        items = json.loads(cp.kubectl("get", ",".join(KINDS), "-A", "-o", "json"))["items"]
        pending = [i for i in items if i.get("status", {}).get("observedGeneration")
                   != i["metadata"].get("generation")]
        if not pending or time.monotonic() > deadline:
            return list(items)
        time.sleep(0.5)


def status_line(item: dict[str, Any]) -> str:
    """Kind, name, and the content-free status fields only."""
    status = item.get("status", {})
    name = "/".join(filter(None, [item["metadata"].get("namespace"), item["metadata"]["name"]]))
    fields = {k: status[k] for k in ("phase", "reasonCode", "consentGeneration", "entryCount",
                                     "scopesFound", "scopesErased") if k in status}
    receipt = status.get("receipt") or {}
    fields |= {f"receipt.{k}": receipt[k] for k in ("result", "generation") if k in receipt}
    conditions = ",".join(f"{c['type']}={c['status']}({c['reason']})"
                          for c in status.get("conditions", []))
    return f"{item['kind']:<22} {name:<40} {json.dumps(fields)} {conditions}"


class Interrupted(Exception):
    """A stop signal, raised in the main thread so that `finally` stops every process (the
    children run in sessions of their own: a signal to this process reaches none of them)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _interrupted(signum: int, _frame: object) -> None:
    raise Interrupted(signum)


def _demo(stack: DevStack) -> bool:
    """Start everything and run the demo; whether every object reported its status."""
    stack.start()
    apply_examples(stack.cp)
    items = wait_observed(stack.cp)
    print("\ncontent-free status of every governance object:")
    for item in items:
        print(status_line(item))
    memory_demo.run(stack.cp, stack.dsn, stack.memory_api)
    stack.retrieval_demo()
    return all("observedGeneration" in i.get("status", {}) for i in items)


def summary(stack: DevStack, seconds: float, *, hold: bool) -> str:
    kubeconfig = stack.cp.kubeconfig
    lines = [f"\ndone in {seconds:.0f} s.",
             "ModelRouteGoverned=False(MODEL_ROUTE_UNCONFIGURED) above is expected: the demo "
             "runs no model upstream, so the operator has no --memory-model-url (on a cluster: "
             "memoryApi.modelUpstream, docs/memory.md §9).",
             "next:"]
    if hold:
        lines += [f"  export KUBECONFIG={kubeconfig}; kubectl get memoryscopes -A",
                  "  Ctrl-C (or SIGTERM, SIGHUP) stops every process of this run"]
    else:
        lines += ["  hack/up.sh --hold       the same, kept running for kubectl"]
    lines += ["  hack/up.sh down         stops what a killed run left (the next run does too)",
              "  docs/install.md         the same on a cluster, with the chart"]
    return "\n".join(lines)


def _hold(stack: DevStack) -> int:
    print(f"\nrunning; KUBECONFIG={stack.cp.kubeconfig}; Ctrl-C to stop", flush=True)
    while all(p.poll() is None for p in stack.children):
        time.sleep(1)
    gone = next(p for p in stack.children if p.poll() is not None)
    print(f"fgentic-dev up: process {gone.pid} of this run exited ({gone.returncode}); the "
          f"logs are in {stack.workdir}; stopping the rest", file=sys.stderr, flush=True)
    return 1


def _failed(stack: DevStack, what: str) -> int:
    print(f"fgentic-dev up: {what}\n  logs in {stack.workdir}; run it again (every run starts "
          "fresh), or `hack/up.sh down` to stop what is left", file=sys.stderr, flush=True)
    return 1


def run_dev(args: argparse.Namespace) -> int:
    began = time.monotonic()
    for sig in STOP_SIGNALS:
        signal.signal(sig, _interrupted)
    stack = DevStack(args.workdir)
    held = False
    try:
        observed = _demo(stack)
        print(summary(stack, time.monotonic() - began, hold=args.hold), flush=True)
        if args.hold:
            held = True
            return _hold(stack)
        return 0 if observed else 1
    except Interrupted as stop:
        print(f"\n{stop}: stopping every process of this run", flush=True)
        return 0 if held else 128 + stop.signum
    except SystemExit as exc:  # a demo step's own one-sentence failure
        if not isinstance(exc.code, str):
            raise
        return _failed(stack, exc.code)
    except Exception as exc:  # never a traceback: what failed and what to do
        return _failed(stack, f"{type(exc).__name__}: {exc}")
    finally:
        # The stop is bounded (each process: its signal, then SIGKILL); a second Ctrl-C
        # must not cut it short and leave processes behind.
        for sig in STOP_SIGNALS:
            signal.signal(sig, signal.SIG_IGN)
        # A crashed backend shows up above only as STORE_UNAVAILABLE; say what it was.
        if report := stack.pg.crash_report():
            print(f"PostgreSQL: {report}", file=sys.stderr, flush=True)
        stack.stop()


def run_down(args: argparse.Namespace) -> int:
    """Stop whatever a run in ``args.workdir`` left running; nothing to stop is fine too."""
    stopped = pidfiles.stop_recorded(args.workdir.resolve())
    print(f"stopped {stopped} process(es) of the run in {args.workdir}" if stopped
          else f"nothing to stop in {args.workdir}")
    return 0
