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
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fgentic_devenv import (
    free_port,
    memory_demo,
    paths,
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
        return subprocess.Popen(
            [sys.executable, "-m", "fgentic_governance.cli", *args],
            stdout=sink, stderr=subprocess.STDOUT, env=environ,
            start_new_session=True,
        )


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
                return subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT,
                                        env=env, start_new_session=True)
        return spawn_cli(argv, log, env)

    def stop(self) -> None:
        for proc in reversed(self.children):
            terminate(proc)
        self.pg.stop()
        self.cp.stop()


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


def run_dev(args: argparse.Namespace) -> int:
    stack = DevStack(args.workdir)
    try:
        stack.start()
        apply_examples(stack.cp)
        items = wait_observed(stack.cp)
        print("\ncontent-free status of every governance object:")
        for item in items:
            print(status_line(item))
        memory_demo.run(stack.cp, stack.dsn, stack.memory_api)
        stack.retrieval_demo()
        unobserved = [i for i in items if "observedGeneration" not in i.get("status", {})]
        if args.hold:
            print(f"\nrunning; KUBECONFIG={stack.cp.kubeconfig}; Ctrl-C to stop", flush=True)
            while all(p.poll() is None for p in stack.children):
                time.sleep(1)
        return 1 if unobserved else 0
    except KeyboardInterrupt:
        return 0
    finally:
        # A crashed backend shows up above only as STORE_UNAVAILABLE; say what it was.
        if report := stack.pg.crash_report():
            print(f"PostgreSQL: {report}", file=sys.stderr, flush=True)
        stack.stop()
