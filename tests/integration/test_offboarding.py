"""Offboarding through the real operator and store: every scope of the exact principal is
disabled, enumerated (CRs and store), erased and verified; other principals are untouched."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from fgentic_governance.api.common import OriginKind, Principal
from fgentic_governance.api.memory import MemoryScopeSpec
from fgentic_governance.cli.offboard import manifest, object_name
from fgentic_governance.memory import Access, MemoryStore, ScopeRecord
from tests.support import processes
from tests.support.announcements import REFUSED, announced_once_written
from tests.support.kube import GROUP, VERSION, phase, replay, until_status
from tests.support.objects import consent_obj, scope_obj

pytestmark = pytest.mark.integration
OFFBOARDING_POKE = f"{GROUP}/offboarding-revision"
# Unique per run: offboarding enumerates every scope of the principal cluster-wide (CRs and
# store), so a shared name would also find the scopes other test modules create.
ALICE = f"@alice-{uuid.uuid4().hex[:8]}:fgentic.local"
BOB = f"@bob-{uuid.uuid4().hex[:8]}:fgentic.local"


@pytest.fixture(params=["lane-thread", "erasure-process"])
def env(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch,  # noqa: PLR0917
        control_plane: Any, pg_dsn: str, store: MemoryStore, tmp_path: Path,
        k8s_client: client.ApiClient) -> Iterator[dict[str, Any]]:
    """The real operator, with the flow on the erasure lane's thread (the default) and in the
    erasure process (--erasure-process): every test here holds for both. Fresh principals for
    each: the store keeps an erased scope's row, so one offboarded before is found again."""
    monkeypatch.setitem(globals(), "ALICE", f"@alice-{uuid.uuid4().hex[:8]}:fgentic.local")
    monkeypatch.setitem(globals(), "BOB", f"@bob-{uuid.uuid4().hex[:8]}:fgentic.local")
    ns = f"offboard-{uuid.uuid4().hex[:8]}"
    control_plane.ensure_namespace(ns)
    (tmp_path / "dsn").write_text(pg_dsn)
    args = ["operator", "--kubeconfig", str(control_plane.kubeconfig), "--local-homeserver",
            "fgentic.local", "--store-dsn-file", str(tmp_path / "dsn")]
    if request.param == "erasure-process":
        args.append("--erasure-process")
    state: dict[str, Any] = {"ns": ns, "cp": control_plane, "args": args,
                             "log": tmp_path / "op.log",
                             "api": client.CustomObjectsApi(k8s_client)}
    state["proc"] = processes.spawn_cli(args, state["log"])
    yield state
    processes.stop(state["proc"])
    for principal in (ALICE, BOB):
        name = object_name(Principal(mxid=principal, origin_kind=OriginKind.NATIVE_LOCAL))
        control_plane.kubectl("delete", "principaloffboarding", name, "--ignore-not-found")


async def _enabled_scope(env: dict[str, Any], store: MemoryStore, name: str, mxid: str,  # noqa: PLR0917
                         agent: str, facts: int) -> str:
    api, ns = env["api"], env["ns"]
    scope = scope_obj(ns, name, mxid, agent)
    api.create_namespaced_custom_object(GROUP, VERSION, ns, "memoryscopes", scope)
    api.create_namespaced_custom_object(GROUP, VERSION, ns, "consentrecords",
                                        consent_obj(ns, name, mxid))
    obj = await until_status(api, "memoryscopes", ns, name, lambda s: s.get("phase") == "Enabled")
    record = ScopeRecord.from_spec(ns, name, MemoryScopeSpec.model_validate(scope["spec"]))
    access = Access.for_scope(record, obj["status"]["consentGeneration"])
    for i in range(facts):
        await store.save(access, f"fact {i}")
    return record.scope_key


async def _store_only_scope(store: MemoryStore, facts: int) -> str:
    """A scope the store knows but no CR names (its CR was lost, or another operator made it)."""
    scope = scope_obj("elsewhere", "orphan", ALICE, "old-agent")
    spec = MemoryScopeSpec.model_validate(scope["spec"])
    record = ScopeRecord.from_spec("elsewhere", "orphan", spec)
    await store.ensure_scope(record)
    generation = await store.grant(record.scope_key)
    for i in range(facts):
        await store.save(Access.for_scope(record, generation), f"orphan fact {i}")
    return record.scope_key


def _offboard(env: dict[str, Any], mxid: str, wait: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fgentic_governance.cli", "offboard", mxid, "--kubeconfig",
         str(env["cp"].kubeconfig), "--wait", str(wait)],
        capture_output=True, text=True, timeout=wait + 30, check=False)


def _status(env: dict[str, Any], mxid: str) -> dict[str, Any]:
    name = object_name(Principal(mxid=mxid, origin_kind=OriginKind.NATIVE_LOCAL))
    obj: Any = env["api"].get_cluster_custom_object(GROUP, VERSION, "principaloffboardings", name)
    return dict(obj.get("status") or {})


async def test_offboarding_erases_every_scope_of_the_exact_principal(
    env: dict[str, Any], store: MemoryStore
) -> None:
    keys = [await _enabled_scope(env, store, "alice-docs", ALICE, "docs-agent", 3),
            await _enabled_scope(env, store, "alice-code", ALICE, "code-agent", 2)]
    bob = await _enabled_scope(env, store, "bob-docs", BOB, "docs-agent", 2)
    keys.append(await _store_only_scope(store, 4))
    result = await asyncio.to_thread(_offboard, env, ALICE)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "ReadyForDeactivation: 3 scope(s) erased" in result.stdout
    status = _status(env, ALICE)
    assert (status["scopesFound"], status["scopesErased"], status["scopesFailed"]) == (3, 3, 0)
    assert sorted(f"{r['namespace']}/{r['scope']}" for r in status["results"]) == sorted(keys)
    assert all(r["result"] == "Verified" and len(r["receiptId"]) == 32
               for r in status["results"])
    for key in keys:
        state = await store.scope_state(key)
        assert not state.enabled and state.entry_count == 0
    assert (await store.scope_state(bob)).entry_count == 2  # Another principal is untouched.
    assert ALICE not in str(status)  # Content-free: not even the MXID is echoed in status.
    # The scope CRs follow: disabled, refusing re-enablement while offboarding stands.
    await until_status(env["api"], "memoryscopes", env["ns"], "alice-docs",
                       lambda s: s.get("reasonCode") == "OFFBOARDING_IN_PROGRESS")


async def test_scope_status_follows_the_offboarding_at_once_not_at_resync(
    env: dict[str, Any], store: MemoryStore
) -> None:
    """Issue 37 item 6: after `offboard` reports the scopes erased, every scope shows it (phase,
    reason, entry count, the erasure's cause) within seconds, with the resync an hour away."""
    processes.stop(env["proc"])
    env["proc"] = processes.spawn_cli(env["args"], env["log"],
                                      env={"FGENTIC_SCOPE_RESYNC_SECONDS": "3600"})
    carol = f"@carol-{uuid.uuid4().hex[:8]}:fgentic.local"
    names = ["carol-docs", "carol-code"]
    try:
        for name in names:
            await _enabled_scope(env, store, name, carol, f"{name}-agent", 2)
        result = await asyncio.to_thread(_offboard, env, carol)
        assert "ReadyForDeactivation: 2 scope(s) erased" in result.stdout, result.stdout

        def offboarded(s: dict[str, Any]) -> bool:
            conditions = {c["type"]: (c["status"], c["reason"]) for c in s.get("conditions", [])}
            return (s.get("phase"), s.get("reasonCode"), s.get("entryCount")) == (
                "Disabled", "OFFBOARDING_IN_PROGRESS", 0) and s.get("lastErasure", {}).get(
                "reasonCode") == "OFFBOARDING_IN_PROGRESS" and conditions.get("Enabled") == (
                "False", "OFFBOARDING_IN_PROGRESS") and conditions.get("ConsentGated") == (
                "True", "OFFBOARDING_IN_PROGRESS")

        for name in names:  # 15 s: far below the hour-long resync, so no timer did it.
            obj = await until_status(env["api"], "memoryscopes", env["ns"], name, offboarded,
                                     timeout=15)
            assert obj["status"]["lastErasure"]["result"] == "Verified"
        # Issue 39: deleting the offboarding lifts its gate, and the scopes (their consent still
        # granted) re-evaluate at once; before, only the per-scope timer's next round did.
        env["cp"].kubectl("delete", "principaloffboarding", object_name(
            Principal(mxid=carol, origin_kind=OriginKind.NATIVE_LOCAL)))
        for name in names:
            await until_status(env["api"], "memoryscopes", env["ns"], name,
                               lambda s: (s.get("phase"), s.get("reasonCode")) == ("Enabled", "OK"),
                               timeout=15)
    finally:
        name = object_name(Principal(mxid=carol, origin_kind=OriginKind.NATIVE_LOCAL))
        env["cp"].kubectl("delete", "principaloffboarding", name, "--ignore-not-found")


async def test_no_scope_is_poked_before_the_offboarding_is_ready(
    env: dict[str, Any], store: MemoryStore
) -> None:
    """Issue 39: what the guarantee needs (disabled, enumerated, erased, verified, receipts
    recorded) comes first and ReadyForDeactivation is written at once; the pokes that have the
    scopes' status follow come after it. Read from the API server's own order of writes (a
    replay of both kinds' changes; one etcd numbers every write of the cluster in order)."""
    dave = f"@dave-{uuid.uuid4().hex[:8]}:fgentic.local"
    names = [f"dave-{i}" for i in range(3)]
    for i, name in enumerate(names):
        await _enabled_scope(env, store, name, dave, f"agent-{i}", 1)
    since = env["api"].list_namespaced_custom_object(
        GROUP, VERSION, env["ns"], "memoryscopes")["metadata"]["resourceVersion"]
    try:
        result = await asyncio.to_thread(_offboard, env, dave)
        assert "ReadyForDeactivation: 3 scope(s) erased" in result.stdout, result.stdout
        for name in names:  # every scope poked and reconciled: all pokes are in the replay
            await until_status(env["api"], "memoryscopes", env["ns"], name,
                               phase("Disabled", "OFFBOARDING_IN_PROGRESS"))
        offboarding = object_name(Principal(mxid=dave, origin_kind=OriginKind.NATIVE_LOCAL))
        ready = next(int(o["metadata"]["resourceVersion"]) for o in replay(
            env["api"].list_cluster_custom_object, GROUP, VERSION, "principaloffboardings",
            since=since, field_selector=f"metadata.name={offboarding}")
            if (o.get("status") or {}).get("phase") == "ReadyForDeactivation")
        pokes = {o["metadata"]["name"]: int(o["metadata"]["resourceVersion"]) for o in reversed(
            replay(env["api"].list_namespaced_custom_object, GROUP, VERSION, env["ns"],
                   "memoryscopes", since=since))
            if OFFBOARDING_POKE in (o["metadata"].get("annotations") or {})}
        assert sorted(pokes) == names  # each scope's first poke (the replay is reversed)
        assert all(version > ready for version in pokes.values()), (ready, pokes)
    finally:
        env["cp"].kubectl("delete", "principaloffboarding", object_name(
            Principal(mxid=dave, origin_kind=OriginKind.NATIVE_LOCAL)), "--ignore-not-found")


async def test_restart_mid_offboarding_resumes(env: dict[str, Any], store: MemoryStore) -> None:
    keys = [await _enabled_scope(env, store, "alice-a", ALICE, "agent-a", 2),
            await _enabled_scope(env, store, "alice-b", ALICE, "agent-b", 2)]
    processes.stop(env["proc"])
    # The crash: step 1 (disable) ran for one scope, then the process died.
    await store.disable_and_advance(keys[0])
    created = await asyncio.to_thread(_offboard, env, ALICE, 0)
    assert created.returncode == 0
    env["proc"] = processes.spawn_cli(env["args"], env["log"])
    result = await asyncio.to_thread(_offboard, env, ALICE, 30)  # Idempotent: already exists.
    assert "already exists" in result.stdout and result.returncode == 0, result.stdout
    for key in keys:
        assert (await store.scope_state(key)).entry_count == 0


def test_offboard_cli_refuses_a_localpart(env: dict[str, Any]) -> None:
    result = _offboard(env, "alice", 0)
    assert result.returncode == 2 and "INVALID_SPEC" in result.stderr


async def test_a_failure_is_announced_only_once_its_status_is_written(
    env: dict[str, Any],
) -> None:
    """Issue 39: without a store an offboarding fails (STORE_UNAVAILABLE, retried); while the
    API server refuses its status writes no `Failed` Event is posted, and once the write goes
    through exactly one is (before: one with the refused write, another with the one that
    went through)."""
    processes.stop(env["proc"])
    store = env["args"].index("--store-dsn-file")
    env["proc"] = processes.spawn_cli(env["args"][:store] + env["args"][store + 2:], env["log"])
    created: list[str] = []

    def create(name: str) -> None:
        principal = Principal(mxid=f"@{name}:fgentic.local", origin_kind=OriginKind.NATIVE_LOCAL)
        obj = manifest(principal)
        obj["metadata"] = {"name": name, "labels": {REFUSED: "true"}}
        env["api"].create_cluster_custom_object(GROUP, VERSION, "principaloffboardings", obj)
        created.append(name)

    try:
        await announced_once_written(env["api"], env["log"], "principaloffboardings", "",
                                     create, phase("Failed", "STORE_UNAVAILABLE"), "Failed")
    finally:
        for name in created:
            env["cp"].kubectl("delete", "principaloffboarding", name, "--ignore-not-found")
