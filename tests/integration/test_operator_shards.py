"""Issue 39: operator shards, each a release owning a disjoint set of namespaces, one store.

Real kube-apiserver, real PostgreSQL (where a scope must reach Enabled), real operator
processes. Each shard is elected by its own Lease, which carries the shard's claim
(kube/shards.py); one shard alone handles the cluster-scoped kinds. No scope is reconciled by
two operators (each Event names its replica; a marker scope's reason code appears only on its
own shard's reconcile counter), a shard's killed leader is replaced by its standby within the
Lease's bound while the other shard keeps leading, and a claim overlapping a live shard's is
refused at start-up (exit 2).
"""

from __future__ import annotations

import signal
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from fgentic_governance.api.memory import ScopePhase
from fgentic_governance.controller.leadership import RETRY_SECONDS
from fgentic_governance.kube.lease import LEASE_SECONDS
from fgentic_governance.memory import MemoryStore
from tests.support import processes
from tests.support.kube import GROUP, VERSION, get_object, phase
from tests.support.objects import example
from tests.support.polling import until

pytestmark = pytest.mark.integration
RECONCILES = "fgentic_scope_reconciles_total"
DENIED = "FEDERATION_DENIED"
# Kopf's INFO line when a handler it ran succeeds or fails names the handler, never the object.
OFFBOARDING_RAN = "Handler 'reconcile_offboarding'"
# A killed leader's standby leads within the Lease plus one retry of its own; the rest is
# slack for a loaded machine (the bound of the poll, not an assertion).
HANDOVER_BOUND = LEASE_SECONDS + RETRY_SECONDS + 30


class Shard:
    """One operator replica of a shard: its namespaces, its Lease in ``home``."""

    def __init__(self, work: Path, lease: str, who: str, args: list[str]) -> None:
        self.who, self.lease, self.port = who, lease, processes.free_port()
        self.log = work / f"operator-{who}.log"
        self.proc: subprocess.Popen[bytes] = processes.spawn_cli(
            ["operator", *args, "--metrics-port", str(self.port), "--identity", who], self.log)

    def reconciles(self, reason: str | None = None) -> float:
        """Scope reconciles so far; with ``reason``, only those that ended with that code."""
        if reason is None:
            return processes.metric_total(self.port, RECONCILES) or 0.0
        return sum(processes.metric(self.port, f'{RECONCILES}{{phase="{p}",reason="{reason}"}}')
                   or 0.0 for p in ScopePhase)

    def text(self) -> str:
        return self.log.read_text(errors="replace")


@pytest.fixture
def cluster(control_plane: Any, k8s_client: client.ApiClient,
            tmp_path: Path) -> Iterator[tuple[Callable[..., Shard], Callable[[str], str]]]:
    """(start a shard, a fresh namespace by prefix); every process is stopped at the end and
    none may have logged a traceback."""
    home = f"shards-{uuid.uuid4().hex[:6]}"
    control_plane.ensure_namespace(home)
    started: list[Shard] = []

    def start(lease: str, who: str, namespaces: list[str], *extra: str,
              dsn_file: Path | None = None) -> Shard:
        store = ["--store-dsn-file", str(dsn_file)] if dsn_file else []
        shard = Shard(tmp_path, lease, who, [
            "--kubeconfig", str(control_plane.kubeconfig), "--local-homeserver", "fgentic.local",
            *[arg for ns in namespaces for arg in ("--namespace", ns)],
            "--leader-lease", f"{home}/{lease}", *store, *extra])
        started.append(shard)
        return shard

    def namespace(prefix: str) -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:6]}"
        control_plane.ensure_namespace(name)
        return name

    start.home = home  # type: ignore[attr-defined]
    yield start, namespace
    for shard in started:
        if shard.proc.poll() is None:
            processes.stop(shard.proc)
        assert "Traceback" not in shard.text(), shard.who


def _holder(k8s_client: client.ApiClient, home: str, lease: str) -> tuple[str | None, Any]:
    """(holder, renewTime) of the Lease; (None, None) while it does not exist."""
    try:
        spec = client.CoordinationV1Api(k8s_client).read_namespaced_lease(lease, home).spec
    except client.ApiException:
        return None, None
    return (spec.holder_identity, spec.renew_time) if spec else (None, None)


def _leading(k8s_client: client.ApiClient, home: str, shard: Shard) -> Callable[[], bool]:
    return lambda: _holder(k8s_client, home, shard.lease)[0] == shard.who


def _pair(api: client.CustomObjectsApi, ns: str, mxid: str) -> str:
    """A MemoryScope of ``mxid`` in ``ns`` (its own Agent) and its granting ConsentRecord."""
    name = f"s-{uuid.uuid4().hex[:6]}"
    scope = example("MemoryScope")
    scope["metadata"] = {"name": name, "namespace": ns}
    scope["spec"]["subject"]["mxid"] = mxid
    scope["spec"]["agent"] = {"namespace": ns, "name": f"agent-{name}"}
    consent = example("ConsentRecord")
    consent["metadata"] = {"name": f"{name}-grant", "namespace": ns}
    consent["spec"].update(scopeRef={"name": name}, decision="granted")
    consent["spec"]["subject"]["mxid"] = mxid
    api.create_namespaced_custom_object(GROUP, VERSION, ns, "memoryscopes", scope)
    api.create_namespaced_custom_object(GROUP, VERSION, ns, "consentrecords", consent)
    return name


def _status(api: client.CustomObjectsApi, ns: str, name: str) -> dict[str, Any]:
    return get_object(api, "memoryscopes", ns, name).get("status") or {}


def _reporters(core: client.CoreV1Api, ns: str, name: str) -> set[str]:
    """The reportingInstance of every Event about ``name`` in ``ns``."""
    events = core.list_namespaced_event(ns, field_selector=f"involvedObject.name={name}").items
    return {str(e.reporting_instance) for e in events}


def test_two_shards_each_reconcile_only_their_own_namespaces(
    pg_dsn: str, store: MemoryStore,  # first: the store outlives the shards' processes
    cluster: tuple[Callable[..., Shard], Callable[[str], str]], k8s_client: client.ApiClient,
    tmp_path: Path,
) -> None:
    start, namespace = cluster
    home: str = start.home  # type: ignore[attr-defined]
    api, core = client.CustomObjectsApi(k8s_client), client.CoreV1Api(k8s_client)
    dsn_file = tmp_path / "dsn"
    dsn_file.write_text(pg_dsn)
    a1, a2, b1 = namespace("a1"), namespace("a2"), namespace("b1")
    a = start("shard-a", "a-0", [a1, a2], dsn_file=dsn_file)
    until(_leading(k8s_client, home, a), "shard a leading", 60)
    b = start("shard-b", "b-0", [b1], "--no-cluster-kinds", dsn_file=dsn_file)
    until(_leading(k8s_client, home, b), "shard b leading", 60)
    mxid = f"@p{uuid.uuid4().hex[:6]}:fgentic.local"

    # Ordering, not timing: shard a's scopes converge while shard b has reconciled nothing.
    in_a = [_pair(api, a1, mxid), _pair(api, a2, mxid)]
    for ns, name in zip((a1, a2), in_a, strict=True):
        until(lambda ns=ns, name=name: phase("Enabled", "OK")(_status(api, ns, name)),
              f"{ns}/{name} Enabled", 90)
    until(lambda: processes.metric_total(b.port, RECONCILES) is not None, "b's metrics", 30)
    assert b.reconciles() == 0, "shard b reconciled a scope of shard a"
    of_a = a.reconciles()
    assert of_a > 0

    in_b = _pair(api, b1, mxid)
    until(lambda: phase("Enabled", "OK")(_status(api, b1, in_b)), "b1 scope Enabled", 90)
    assert b.reconciles() > 0
    # A's own scopes may still run (a consent's poke arriving late), so its total may move; a
    # marker scope in b1 whose every run ends FEDERATION_DENIED shows who reconciled it.
    marker = _pair(api, b1, "@p:remote.example")
    until(lambda: phase("Disabled", DENIED)(_status(api, b1, marker)), "the marker Disabled", 90)
    assert b.reconciles(DENIED) > 0
    assert a.reconciles(DENIED) == 0, "shard a reconciled a scope of shard b"
    # Every Event names the replica of the scope's own shard (Kopf's default: 'dev').
    for ns, name in zip((a1, a2), in_a, strict=True):
        assert until(lambda ns=ns, name=name: _reporters(core, ns, name),
                     "a scope's events", 30) == {"a-0"}
    for name in (in_b, marker):
        assert until(lambda name=name: _reporters(core, b1, name),
                     "a b1 scope's events", 30) == {"b-0"}

    # The cluster-scoped kind is handled by shard a alone; its erasure reaches every scope of
    # the principal in the one store, and each scope's status follows from its own shard.
    offboarding = example("PrincipalOffboarding")
    off_name = f"off-{uuid.uuid4().hex[:6]}"
    offboarding["metadata"] = {"name": off_name}
    offboarding["spec"]["principal"]["mxid"] = mxid
    api.create_cluster_custom_object(GROUP, VERSION, "principaloffboardings", offboarding)
    try:
        until(lambda: (get_object(api, "principaloffboardings", "", off_name).get("status")
                       or {}).get("phase") == "ReadyForDeactivation", "the offboarding", 90)
        gone = phase("Disabled", "OFFBOARDING_IN_PROGRESS")
        for ns, name in ((a1, in_a[0]), (a2, in_a[1]), (b1, in_b)):
            until(lambda ns=ns, name=name: gone(_status(api, ns, name)),
                  f"{ns}/{name} offboarded", 90)
        assert until(lambda: _reporters(core, "default", off_name),
                     "the offboarding's events", 30) == {"a-0"}
        assert OFFBOARDING_RAN in a.text()
        assert OFFBOARDING_RAN not in b.text(), "shard b handled a cluster-scoped kind"
        assert _reporters(core, b1, in_b) == {"b-0"}
    finally:
        api.delete_cluster_custom_object(GROUP, VERSION, "principaloffboardings", off_name)


def test_a_shards_killed_leader_hands_over_to_its_standby(
    cluster: tuple[Callable[..., Shard], Callable[[str], str]], k8s_client: client.ApiClient,
) -> None:
    """No store: a scope goes Failed/STORE_UNAVAILABLE, which is enough to see who acts."""
    start, namespace = cluster
    home: str = start.home  # type: ignore[attr-defined]
    api, core = client.CustomObjectsApi(k8s_client), client.CoreV1Api(k8s_client)
    a1, b1 = namespace("a1"), namespace("b1")
    first = start("shard-a", "a-0", [a1])
    until(_leading(k8s_client, home, first), "shard a leading", 60)
    standby = start("shard-a", "a-1", [a1])
    b = start("shard-b", "b-0", [b1], "--no-cluster-kinds")
    until(_leading(k8s_client, home, b), "shard b leading", 60)
    until(lambda: "operator standby" in standby.text(), "a's standby waiting", 60)

    def reported(ns: str) -> set[str]:
        """Who posted the Events of a new scope in ``ns``, once it is reconciled."""
        name = _pair(api, ns, "@carol:fgentic.local")
        until(lambda: phase("Failed", "STORE_UNAVAILABLE")(_status(api, ns, name)),
              f"{ns}/{name} reconciled", 60)
        return until(lambda: _reporters(core, ns, name), f"{ns}/{name}'s events", 30)

    assert reported(a1) == {"a-0"}
    _, b_renewed = _holder(k8s_client, home, "shard-b")
    first.proc.send_signal(signal.SIGKILL)
    until(_leading(k8s_client, home, standby), "a's standby taking over", HANDOVER_BOUND)
    assert reported(a1) == {"a-1"}
    # The other shard was never affected: same holder, still renewing.
    until(lambda: (_holder(k8s_client, home, "shard-b")[1] or b_renewed) > b_renewed,
          "shard b renewing", HANDOVER_BOUND)
    assert _holder(k8s_client, home, "shard-b")[0] == "b-0"
    assert b.proc.poll() is None and standby.proc.poll() is None


def test_an_overlapping_shard_is_refused_at_start_up(
    cluster: tuple[Callable[..., Shard], Callable[[str], str]], k8s_client: client.ApiClient,
) -> None:
    start, namespace = cluster
    home: str = start.home  # type: ignore[attr-defined]
    a1, a2, c1, d1 = (namespace(p) for p in ("a1", "a2", "c1", "d1"))
    a = start("shard-a", "a-0", [a1, a2])
    until(_leading(k8s_client, home, a), "shard a leading", 60)

    # A namespace of a live shard; a second shard handling the cluster-scoped kinds; a shard
    # owning every namespace: each exits 2 naming the shard it overlaps, and takes no Lease.
    refused = [(start("shard-c", "c-0", [a2, c1], "--no-cluster-kinds"), f"both own {a2}"),
               (start("shard-d", "d-0", [d1]), "cluster-scoped kinds"),
               (start("shard-e", "e-0", [], "--no-cluster-kinds"), "every namespace")]
    for shard, why in refused:
        assert shard.proc.wait(60) == 2, shard.text()
        line = f"overlaps shard {home}/shard-a ({','.join(sorted((a1, a2)))}): "
        assert line in shard.text() and why in shard.text(), shard.text()
        assert _holder(k8s_client, home, shard.lease)[0] is None
    assert a.proc.poll() is None and _holder(k8s_client, home, "shard-a")[0] == "a-0"

    # Two shards started together over the same namespace: one at least sees the other's
    # claim (each writes its claim before it lists) and exits 2.
    s1 = namespace("s1")
    both = [start(lease, f"{lease}-0", [s1], "--no-cluster-kinds")
            for lease in ("shard-f", "shard-g")]
    first = until(lambda: next((s for s in both if s.proc.poll() is not None), None),
                  "one of two overlapping shards exiting", 60)
    assert first.proc.returncode == 2, first.text()
    other = next(s for s in both if s is not first)
    assert f"overlaps shard {home}/{other.lease} ({s1})" in first.text()


FLOORS = "memoryposturefloors"


def _floor_meta(api: client.CustomObjectsApi, name: str) -> tuple[str, list[str]] | None:
    """(resourceVersion, finalizers) of the floor; None once it is gone."""
    try:
        meta = get_object(api, FLOORS, "", name)["metadata"]
    except client.ApiException as exc:
        if exc.status == 404:
            return None
        raise
    return str(meta["resourceVersion"]), list(meta.get("finalizers") or [])


def test_a_shard_without_cluster_kinds_leaves_a_floors_finalizer_alone(
    pg_dsn: str, store: MemoryStore,  # first: the store outlives the shards' processes
    cluster: tuple[Callable[..., Shard], Callable[[str], str]], k8s_client: client.ApiClient,
    tmp_path: Path,
) -> None:
    """A MemoryPostureFloor's finalizer is the cluster-kinds shard's alone: the other shard
    neither adds it nor (Kopf strips a finalizer no handler of its process needs) lifts it,
    which would let a floor go without its fence being cleared."""
    start, namespace = cluster
    home: str = start.home  # type: ignore[attr-defined]
    api = client.CustomObjectsApi(k8s_client)
    dsn_file = tmp_path / "dsn"
    dsn_file.write_text(pg_dsn)
    a1, b1 = namespace("a1"), namespace("b1")
    b = start("shard-b", "b-0", [b1], "--no-cluster-kinds", dsn_file=dsn_file)
    until(_leading(k8s_client, home, b), "shard b leading", 60)

    def b_has_caught_up() -> None:
        """Ordering, not timing: a scope created after the floor's last change is reconciled
        by shard b (Kopf lists and watches every kind of a process alike)."""
        name = _pair(api, b1, f"@p{uuid.uuid4().hex[:6]}:fgentic.local")
        until(lambda: phase("Enabled", "OK")(_status(api, b1, name)), f"{b1}/{name}", 90)

    floor = example("MemoryPostureFloor")
    name = f"floor-{uuid.uuid4().hex[:6]}"
    floor["metadata"] = {"name": name}
    floor["spec"]["target"] = {"level": "Agent", "namespace": a1, "agent": "retired"}
    created = api.create_cluster_custom_object(GROUP, VERSION, FLOORS, floor)
    try:
        b_has_caught_up()
        # Never added: the floor is exactly as created (no finalizer, no status).
        assert _floor_meta(api, name) == (created["metadata"]["resourceVersion"], [])

        a = start("shard-a", "a-0", [a1], dsn_file=dsn_file)
        until(lambda: (get_object(api, FLOORS, "", name).get("status") or {}).get("phase")
              == "Enforced", "the floor enforced by shard a", 90)
        enforced = _floor_meta(api, name)
        assert enforced is not None and enforced[1], "shard a put its finalizer on"
        b_has_caught_up()
        # Never lifted: not a write to the floor since shard a's (no strip, no re-add).
        assert _floor_meta(api, name) == enforced

        api.delete_cluster_custom_object(GROUP, VERSION, FLOORS, name)
        until(lambda: _floor_meta(api, name) is None, "the floor finalized by shard a", 90)
        assert "Handler 'clear_floor'" in a.text()
        assert "_floor'" not in b.text(), "shard b ran a floor's handler"
    finally:
        if _floor_meta(api, name) is not None:
            api.delete_cluster_custom_object(GROUP, VERSION, FLOORS, name)
