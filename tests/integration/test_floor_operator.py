"""MemoryPostureFloor through the real operator, API server and store (issue 38 §7): a floor
reaches the store's fence at once and binds every scope of the Agents it covers, no
MemoryScope patched; its purge erases and verifies each scope under it, with one content-free
receipt per scope, once per request."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from fgentic_devenv.postgres import LocalPostgres
from fgentic_governance.api.memory import MemoryScopeSpec
from fgentic_governance.memory import Access, MemoryStore, ScopeRecord
from fgentic_governance.reasons import Reason
from tests.support import processes
from tests.support.announcements import REFUSED, announced_once_written
from tests.support.kube import GROUP, VERSION, until_status
from tests.support.objects import consent_obj, scope_obj
from tests.support.polling import until_async
from tests.support.store import migrated_pool, refused

pytestmark = pytest.mark.integration

PLURAL = "memoryposturefloors"
UNIT = [1.0] + [0.0] * 767


@pytest.fixture(scope="module")
async def operator(control_plane: Any, postgres: LocalPostgres,
                   tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[dict[str, Any]]:
    """One operator (cluster-wide) over one database for the module: each start takes
    seconds, and every test works in a namespace of its own."""
    work = tmp_path_factory.mktemp("floor-operator")
    database = f"t_floor_operator_{uuid.uuid4().hex[:8]}"
    dsn = await postgres.create_database(database, extensions=("vector",))
    pool = await migrated_pool(dsn, max_size=4)
    (work / "dsn").write_text(dsn)
    proc = processes.spawn_cli(["operator", "--kubeconfig", str(control_plane.kubeconfig),
                                "--local-homeserver", "fgentic.local", "--store-dsn-file",
                                str(work / "dsn")], work / "op.log")
    try:
        yield {"store": MemoryStore(pool), "proc": proc, "log": work / "op.log"}
    finally:
        processes.stop(proc)
        await pool.close()
        await postgres.drop_database(database)


@pytest.fixture
async def env(operator: dict[str, Any], control_plane: Any,
              k8s_client: client.ApiClient) -> AsyncIterator[dict[str, Any]]:
    ns = f"floor-{uuid.uuid4().hex[:8]}"
    control_plane.ensure_namespace(ns)
    api = client.CustomObjectsApi(k8s_client)
    state: dict[str, Any] = {"ns": ns, "api": api, "floors": []}
    yield state
    # Floors are cluster-scoped: delete ours while the operator still runs their finalizer.
    for name in state["floors"]:
        await _delete(api, name)


@pytest.fixture
def store(operator: dict[str, Any]) -> MemoryStore:
    """The operator's store (its database), as its owner."""
    return operator["store"]  # type: ignore[no-any-return]


def _floor(env: dict[str, Any], level: str, posture: str, *, name: str = "",
           labels: dict[str, str] | None = None, **target: str) -> str:
    name = name or f"floor-{uuid.uuid4().hex[:8]}"
    obj = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "MemoryPostureFloor",
           "metadata": {"name": name, "labels": labels or {}},
           "spec": {"target": {"level": level, **target}, "posture": posture}}
    env["api"].create_cluster_custom_object(GROUP, VERSION, PLURAL, obj)
    env["floors"].append(name)
    return name


def _patch(env: dict[str, Any], name: str, spec: dict[str, Any]) -> None:
    env["api"].patch_cluster_custom_object(GROUP, VERSION, PLURAL, name, {"spec": spec})


async def _delete(api: client.CustomObjectsApi, name: str) -> None:
    """Delete a floor and wait until it is gone (its finalizer took it out of the store)."""
    try:
        api.delete_cluster_custom_object(GROUP, VERSION, PLURAL, name)
    except ApiException as exc:
        if exc.status == 404:
            return
        raise

    def gone() -> bool:
        try:
            api.get_cluster_custom_object(GROUP, VERSION, PLURAL, name)
        except ApiException as exc:
            if exc.status == 404:
                return True
            raise
        return False

    await until_async(gone, f"{PLURAL}/{name} finalized", 30)


async def _enforced(env: dict[str, Any], name: str, generation: int = 1) -> dict[str, Any]:
    obj = await until_status(env["api"], PLURAL, "", name,
                             lambda s: s.get("phase") == "Enforced"
                             and s.get("observedGeneration") == generation)
    return dict(obj["status"])


async def _scope(env: dict[str, Any], store: MemoryStore, name: str, agent: str,
                 facts: int) -> Access:
    api, ns = env["api"], env["ns"]
    mxid = f"@{name}:fgentic.local"
    scope = scope_obj(ns, name, mxid, agent)
    api.create_namespaced_custom_object(GROUP, VERSION, ns, "memoryscopes", scope)
    api.create_namespaced_custom_object(GROUP, VERSION, ns, "consentrecords",
                                        consent_obj(ns, name, mxid))
    obj = await until_status(api, "memoryscopes", ns, name, lambda s: s.get("phase") == "Enabled")
    record = ScopeRecord.from_spec(ns, name, MemoryScopeSpec.model_validate(scope["spec"]))
    access = Access.for_scope(record, obj["status"]["consentGeneration"])
    for i in range(facts):
        await store.save(access, f"fact {i}", embedding=UNIT)
    return access


async def test_a_floor_binds_its_agents_scopes_at_once_and_lifts_when_deleted(
    env: dict[str, Any], store: MemoryStore
) -> None:
    docs = await _scope(env, store, "alice", "docs-agent", 1)
    other = await _scope(env, store, "bob", "code-agent", 1)
    floor = _floor(env, "Agent", "fully_disabled", namespace=env["ns"], agent="docs-agent")
    status = await _enforced(env, floor)
    conditions = {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}
    assert conditions == {"Enforced": ("True", "OK"), "Ready": ("True", "OK")}
    # The docs Agent's scope refuses capture and recall; its MemoryScope was not touched.
    assert await refused(store.save(docs, "Another fact.")) is Reason.POSTURE_FLOOR_DISABLED
    assert await refused(store.search(docs, UNIT)) is Reason.POSTURE_FLOOR_DISABLED
    scope = env["api"].get_namespaced_custom_object(GROUP, VERSION, env["ns"], "memoryscopes",
                                                    "alice")
    assert (scope["metadata"]["generation"], scope["spec"]["posture"]) == (1, "enabled")
    # Another Agent of the namespace is not covered.
    assert len(await store.search(other, UNIT)) == 1

    # Loosened to capture_disabled: recall is back, capture still refused.
    _patch(env, floor, {"posture": "capture_disabled"})
    await _enforced(env, floor, generation=2)
    assert len(await store.search(docs, UNIT)) == 1
    assert await refused(store.save(docs, "Another fact.")) is \
        Reason.POSTURE_FLOOR_CAPTURE_DISABLED

    # Deleted: the finalizer takes it out of the fence.
    await _delete(env["api"], floor)
    await store.save(docs, "Another fact.")

    # A namespace floor that only narrows recall: its policy meets every scope's own.
    narrow = _floor(env, "Namespace", "enabled", namespace=env["ns"])
    _patch(env, narrow, {"recall": {"memoryTypes": ["preference"]}})
    await _enforced(env, narrow, generation=2)
    assert [await store.search(a, UNIT) for a in (docs, other)] == [[], []]  # facts withheld
    await store.save(docs, "Yet another fact.")  # capture is not the recall policy's


async def test_a_purge_erases_and_verifies_every_scope_under_the_floor_once_per_request(
    env: dict[str, Any], store: MemoryStore
) -> None:
    alice = await _scope(env, store, "alice", "docs-agent", 3)
    bob = await _scope(env, store, "bob", "code-agent", 2)
    floor = _floor(env, "Namespace", "fully_disabled", namespace=env["ns"])
    await _enforced(env, floor)
    _patch(env, floor, {"purge": {"requestId": "incident-1"}})
    status = await _enforced(env, floor, generation=2)
    purge = status["purge"]
    assert (purge["requestId"], purge["result"]) == ("incident-1", "Verified")
    assert (purge["scopesFound"], purge["scopesErased"], purge["scopesFailed"],
            purge["rowsDeleted"]) == (2, 2, 0, 5)
    receipts = {r["scope"]: r for r in purge["receipts"]}
    assert {name: (r["result"], r["reasonCode"], r["deleted"])
            for name, r in receipts.items()} == {
        "alice": ("Verified", "OK", 3), "bob": ("Verified", "OK", 2)}
    assert all(len(r["receiptId"]) == 32 and r["namespace"] == env["ns"]
               for r in receipts.values())
    assert len(purge["digest"]) == 64
    assert "fact" not in str(status) and "@alice" not in str(status)  # Content-free.
    for access in (alice, bob):
        assert (await store.scope_state(access.scope_key)).entry_count == 0
    conditions = {c["type"]: c["status"] for c in status["conditions"]}
    assert conditions["Purged"] == "True"
    # Events of a cluster-scoped object land in "default": content-free, counts and codes.
    core = client.CoreV1Api(env["api"].api_client)

    def events() -> dict[str, str]:
        return {e.reason: e.message for e in core.list_namespaced_event(
            "default", field_selector=f"involvedObject.name={floor}").items}

    await until_async(lambda: {"Enforced", "PurgeVerified"} <= set(events()),
                      what="the floor's events")
    assert events()["PurgeVerified"] == "scopes erased 2 reason OK"

    # A new request is a new purge, verified scope by scope (empty now).
    _patch(env, floor, {"purge": {"requestId": "incident-2"}})
    status = await _enforced(env, floor, generation=3)
    assert status["purge"]["requestId"] == "incident-2"
    assert [r["deleted"] for r in status["purge"]["receipts"]] == [0, 0]
    assert {r["receiptId"] for r in status["purge"]["receipts"]}.isdisjoint(
        r["receiptId"] for r in receipts.values())


async def test_an_enforced_floor_is_announced_only_once_its_status_is_written(
    env: dict[str, Any], operator: dict[str, Any]
) -> None:
    """Issue 39: while the API server refuses the floor's status writes, the floor reaches
    the store but no `Enforced` Event is posted; once the write goes through, exactly one is
    (before: one with the refused write, another with the one that went through)."""
    def create(name: str) -> None:
        _floor(env, "Namespace", "enabled", name=name, labels={REFUSED: "true"},
               namespace=env["ns"])

    await announced_once_written(env["api"], operator["log"], PLURAL, "", create,
                                 lambda s: s.get("phase") == "Enforced", "Enforced")
