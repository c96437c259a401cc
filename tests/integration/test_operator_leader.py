"""Issue 27: operator replicas elect one leader with a coordination.k8s.io Lease.

Real kube-apiserver, real operator processes (no store: a MemoryScope they reconcile goes
Failed/STORE_UNAVAILABLE, which is enough to see who runs the handlers). A standby is live and
runs nothing; a killed leader's Lease expires and the standby takes over; a leader that sees
the Lease held by another stops (exit 1); a leader frozen past its Lease does nothing once
resumed; a clean stop hands the Lease over at once.
"""

from __future__ import annotations

import datetime as dt
import re
import signal
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from fgentic_governance.controller.leadership import RENEW_SECONDS, STOP_GRACE_SECONDS
from fgentic_governance.kube.lease import LEASE_SECONDS
from tests.support import processes
from tests.support.kube import GROUP, VERSION, get_object, phase
from tests.support.objects import example
from tests.support.polling import until

pytestmark = pytest.mark.integration
LEASE = "operator-leader"


class Replica:
    def __init__(self, kubeconfig: Path, work: Path, ns: str, home: str, who: str, *,
                 env: dict[str, str | None] | None = None) -> None:
        self.who, self.port = who, processes.free_port()
        self.log = work / f"operator-{who}.log"
        self.args = ["operator", "--kubeconfig", str(kubeconfig), "--namespace", ns,
                     "--local-homeserver", "fgentic.local", "--metrics-port", str(self.port),
                     "--leader-lease", f"{home}/{LEASE}", "--identity", who]
        self.proc: subprocess.Popen[bytes] = processes.spawn_cli(self.args, self.log, env)

    def metric(self, name: str) -> float | None:
        """``name``'s value on /metrics (None while the port is not yet serving)."""
        return processes.metric(self.port, name)

    def logged(self, text: str) -> bool:
        return text in self.log.read_text(errors="replace")


@pytest.fixture
def setting(control_plane: Any, k8s_client: client.ApiClient,
            tmp_path: Path) -> Iterator[tuple[str, str, list[Replica]]]:
    ns, home = (f"{p}-{uuid.uuid4().hex[:6]}" for p in ("leader", "fgentic"))
    for name in (ns, home):
        control_plane.ensure_namespace(name)
    replicas: list[Replica] = []
    yield ns, home, replicas
    for replica in replicas:
        if replica.proc.poll() is None:
            processes.stop(replica.proc)
        assert "Traceback" not in replica.log.read_text(errors="replace"), replica.who


def _holder(coordination: client.CoordinationV1Api, home: str) -> str | None:
    try:
        lease = coordination.read_namespaced_lease(LEASE, home)
    except client.ApiException:
        return None
    return lease.spec.holder_identity if lease.spec else None


def _reconciled(api: client.CustomObjectsApi, ns: str, name: str) -> Callable[[], bool]:
    def check() -> bool:
        status = get_object(api, "memoryscopes", ns, name).get("status") or {}
        return phase("Failed", "STORE_UNAVAILABLE")(status)
    return check


def _new_scope(api: client.CustomObjectsApi, ns: str) -> str:
    obj = example("MemoryScope")
    name = f"s-{uuid.uuid4().hex[:6]}"
    obj["metadata"] = {"name": name, "namespace": ns}
    api.create_namespaced_custom_object(GROUP, VERSION, ns, "memoryscopes", obj)
    return name


def test_one_replica_runs_the_handlers_and_a_standby_takes_over(
    control_plane: Any, k8s_client: client.ApiClient, tmp_path: Path,
    setting: tuple[str, str, list[Replica]],
) -> None:
    ns, home, replicas = setting
    api, coordination = client.CustomObjectsApi(k8s_client), client.CoordinationV1Api(k8s_client)
    first = Replica(control_plane.kubeconfig, tmp_path, ns, home, "first")
    replicas.append(first)
    until(lambda: _holder(coordination, home) == "first", "the first replica leading", 60)
    second = Replica(control_plane.kubeconfig, tmp_path, ns, home, "second")
    replicas.append(second)
    # The standby is live (its probe port answers) and says it does not lead.
    until(lambda: second.metric("fgentic_operator_leading") == 0.0, "the standby's metrics", 60)
    until(lambda: first.metric("fgentic_operator_leading") == 1.0, "the leader's metrics", 60)
    scope = _new_scope(api, ns)
    until(_reconciled(api, ns, scope), "the leader reconciling", 60)
    assert second.logged("operator standby") and not second.logged("operator leading")
    assert _holder(coordination, home) == "first"

    # A killed leader never releases: the standby waits for the Lease to expire, then leads.
    # Its last renewal is read first: a renewal after this read only moves expiry later.
    renewed = coordination.read_namespaced_lease(LEASE, home).spec.renew_time
    first.proc.send_signal(signal.SIGKILL)
    until(lambda: _holder(coordination, home) == "second", "the standby taking over",
           LEASE_SECONDS + 30)
    # Measured from the renewal, not the kill: a leader that renewed late under load lets
    # the standby in sooner, and rightly so.
    assert dt.datetime.now(dt.UTC) - renewed >= dt.timedelta(seconds=LEASE_SECONDS - 1), \
        "taken before the Lease could have expired"
    later = _new_scope(api, ns)
    until(_reconciled(api, ns, later), "the new leader reconciling", 60)
    assert second.metric("fgentic_operator_leading") == 1.0

    # Another holder appears (a partition healed the other way): the leader stops, exit 1.
    lease = coordination.read_namespaced_lease(LEASE, home)
    now = dt.datetime.now(dt.UTC)
    lease.spec.holder_identity, lease.spec.renew_time = "elsewhere", now
    coordination.replace_namespaced_lease(LEASE, home, lease)
    assert second.proc.wait(RENEW_SECONDS + STOP_GRACE_SECONDS + 15) == 1
    assert second.logged("operator lease lost (held by another replica)")


# Kopf's line for every handler or timer run it finishes ("Handler 'reconcile_scope' ...").
HANDLER_RAN = re.compile(r"(Handler|Timer) '[a-z_]+")


def test_a_leader_frozen_past_its_lease_acts_no_more_once_resumed(
    control_plane: Any, k8s_client: client.ApiClient, tmp_path: Path,
    setting: tuple[str, str, list[Replica]],
) -> None:
    """Review R4-5: a leader frozen (SIGSTOP: a starved node) until the standby has taken
    the Lease, then resumed, ran its handlers again before it noticed. Its own renew deadline
    now stops it first: after SIGCONT no handler or timer of it runs, it exits 1, and the
    other replica leads. Its scope's timer is due every second (and a new scope's create
    handler is pending in its watch), so before the fix it acted at once on resume."""
    ns, home, replicas = setting
    api, coordination = client.CustomObjectsApi(k8s_client), client.CoordinationV1Api(k8s_client)
    busy = {"FGENTIC_SCOPE_RESYNC_SECONDS": "1"}
    first = Replica(control_plane.kubeconfig, tmp_path, ns, home, "frozen", env=busy)
    replicas.append(first)
    until(lambda: _holder(coordination, home) == "frozen", "the first replica leading", 60)
    scope = _new_scope(api, ns)
    until(_reconciled(api, ns, scope), "the leader reconciling", 60)
    until(lambda: HANDLER_RAN.search(first.log.read_text(errors="replace")),
           "a handler run in the leader's log", 60)
    second = Replica(control_plane.kubeconfig, tmp_path, ns, home, "successor", env=busy)
    replicas.append(second)
    until(lambda: second.logged("operator standby"), "the standby waiting", 60)

    first.proc.send_signal(signal.SIGSTOP)
    try:
        pending = _new_scope(api, ns)  # its watch event waits in the frozen leader's socket
        until(lambda: _holder(coordination, home) == "successor", "the standby taking over",
               LEASE_SECONDS + 30)
        until(_reconciled(api, ns, pending), "the new leader reconciling", 60)
        resumed_at = first.log.stat().st_size
    finally:
        first.proc.send_signal(signal.SIGCONT)
    assert first.proc.wait(RENEW_SECONDS + STOP_GRACE_SECONDS + 15) == 1
    with first.log.open("rb") as log:
        log.seek(resumed_at)
        after = log.read().decode(errors="replace")
    assert not HANDLER_RAN.search(after), f"the resumed leader acted:\n{after}"
    assert _holder(coordination, home) == "successor"
    assert second.metric("fgentic_operator_leading") == 1.0
    later = _new_scope(api, ns)
    until(_reconciled(api, ns, later), "the new leader still reconciling", 60)


def test_a_clean_stop_hands_the_lease_over(
    control_plane: Any, k8s_client: client.ApiClient, tmp_path: Path,
    setting: tuple[str, str, list[Replica]],
) -> None:
    ns, home, replicas = setting
    coordination = client.CoordinationV1Api(k8s_client)
    only = Replica(control_plane.kubeconfig, tmp_path, ns, home, "only")
    replicas.append(only)
    until(lambda: _holder(coordination, home) == "only", "the replica leading", 60)
    only.proc.send_signal(signal.SIGTERM)
    assert only.proc.wait(30) == 0
    assert _holder(coordination, home) is None
    successor = Replica(control_plane.kubeconfig, tmp_path, ns, home, "successor")
    replicas.append(successor)
    # Long before the Lease's duration: it was released, not left to expire.
    until(lambda: _holder(coordination, home) == "successor", "the successor leading",
           LEASE_SECONDS / 2)
    # A standby stopped while it waits exits cleanly and takes nothing.
    standby = Replica(control_plane.kubeconfig, tmp_path, ns, home, "standby")
    replicas.append(standby)
    until(lambda: standby.logged("operator standby"), "the standby waiting", 60)
    standby.proc.send_signal(signal.SIGTERM)
    assert standby.proc.wait(30) == 0
    assert _holder(coordination, home) == "successor"


def test_a_malformed_lease_flag_stops_start_up(tmp_path: Path, control_plane: Any) -> None:
    log = tmp_path / "operator.log"
    proc = processes.spawn_cli(["operator", "--kubeconfig", str(control_plane.kubeconfig),
                                "--leader-lease", "no-slash"], log)
    assert proc.wait(60) == 2
    assert "--leader-lease no-slash: expected NAMESPACE/NAME" in log.read_text()
