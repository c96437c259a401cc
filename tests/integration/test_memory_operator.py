"""Governed memory through the real operator: real kube-apiserver, real PostgreSQL.

The operator runs as a child process (the real `fgentic-governance operator` command) with the
content store at a fresh database; the test plays the runtime by writing through the store.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from fgentic_governance.memory import Access, MemoryStore, ScopeRecord, StoreRefusal, extension
from fgentic_governance.reasons import Reason
from tests.support import processes
from tests.support.announcements import REFUSED, announced_once_written, posted
from tests.support.appservice import flag, puppet
from tests.support.kube import (
    GROUP,
    VERSION,
    get_object,
    phase,
    refusing,
    until_refused,
    until_status,
)
from tests.support.objects import example
from tests.support.polling import until_async
from tests.support.store import migrated_pool

pytestmark = pytest.mark.integration
# Each test gets its own namespace (and operator watching only it): scopes of one test must
# not meet another test's store, where the same (subject, Agent, room) would conflict.
NS = ""
SENTINEL = "SENTINEL-7f3a9c-do-not-leak"


class Operator:
    """The operator process; restartable to test resumption."""

    def __init__(self, kubeconfig: Path, dsn: str, work: Path) -> None:
        self.dsn_file = work / "dsn"
        self.dsn_file.write_text(dsn)
        self.log = work / "operator.log"
        self.metrics_port = processes.free_port()
        self.args = ["operator", "--kubeconfig", str(kubeconfig), "--namespace", NS,
                     "--local-homeserver", "fgentic.local", *flag("fgentic.local"),
                     "--store-dsn-file", str(self.dsn_file),
                     "--metrics-port", str(self.metrics_port)]
        self.proc: Any = None

    def start(self, resync: str = "1") -> None:
        self.proc = processes.spawn_cli(self.args, self.log,
                                        env={"FGENTIC_SCOPE_RESYNC_SECONDS": resync})

    def series(self, name: str) -> float:
        return processes.metric(self.metrics_port, name) or 0.0

    async def sweeps(self, rounds: int) -> None:
        """Wait (bounded) until the scope sweep has finished ``rounds`` more rounds."""
        series = 'fgentic_scope_sweeps_total{result="ok"}'
        target = self.series(series) + rounds
        await until_async(lambda: self.series(series), f"{rounds} more scope sweep rounds", 30,
                          holds=lambda done: done >= target)

    def stop(self) -> None:
        processes.stop(self.proc)


@pytest.fixture
def operator(control_plane: Any, pg_dsn: str, store: MemoryStore,
             tmp_path: Path) -> Iterator[Operator]:
    global NS  # noqa: PLW0603
    NS = f"memory-{uuid.uuid4().hex[:8]}"
    control_plane.ensure_namespace(NS)
    op = Operator(control_plane.kubeconfig, pg_dsn, tmp_path)
    op.start()
    yield op
    op.stop()
    assert SENTINEL not in op.log.read_text(), "content reached the operator log"


@pytest.fixture(scope="module")
def api(k8s_client: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(k8s_client)


def _scope(name: str, **spec: Any) -> dict[str, Any]:
    obj = example("MemoryScope")
    obj["metadata"] = {"name": name, "namespace": NS}
    obj["spec"].update(spec)
    return obj


def _consent(scope: str, decision: str = "granted", **spec: Any) -> dict[str, Any]:
    obj = example("ConsentRecord")
    obj["metadata"] = {"name": f"{scope}-{uuid.uuid4().hex[:6]}", "namespace": NS}
    obj["spec"].update(scopeRef={"name": scope}, decision=decision, **spec)
    return obj


def _create(api: client.CustomObjectsApi, plural: str, obj: dict[str, Any]) -> dict[str, Any]:
    return api.create_namespaced_custom_object(  # type: ignore[no-any-return]
        GROUP, VERSION, NS, plural, obj)


def _withdraw(api: client.CustomObjectsApi, consent: dict[str, Any]) -> None:
    api.patch_namespaced_custom_object(GROUP, VERSION, NS, "consentrecords",
                                       consent["metadata"]["name"],
                                       {"spec": {"decision": "withdrawn"}})


def _access(name: str, generation: int) -> Access:
    spec = example("MemoryScope")["spec"]
    from fgentic_governance.api.memory import MemoryScopeSpec

    record = ScopeRecord.from_spec(NS, name, MemoryScopeSpec.model_validate(spec))
    return Access.for_scope(record, generation)


async def test_no_collection_before_consent_then_grant_enables(
    operator: Operator, api: client.CustomObjectsApi, store: MemoryStore
) -> None:
    name = "before-consent"
    _create(api, "memoryscopes", _scope(name))
    status = (await until_status(api, "memoryscopes", NS, name,
                                 phase("Disabled", "CONSENT_MISSING")))["status"]
    assert status["storeSchemaVersion"] >= 1
    with pytest.raises(StoreRefusal) as refused:
        await store.save(_access(name, status.get("consentGeneration", 0)), "likes tea")
    assert refused.value.reason in {Reason.SCOPE_DISABLED, Reason.STALE_GENERATION,
                                    Reason.SCOPE_MISSING}
    consent = _create(api, "consentrecords", _consent(name))
    enabled = (await until_status(api, "memoryscopes", NS, name, phase("Enabled", "OK")))["status"]
    generation = enabled["consentGeneration"]
    assert generation >= 1
    entry = await store.save(_access(name, generation), "prefers green tea")
    assert entry
    receipt = (await until_status(api, "consentrecords", NS, consent["metadata"]["name"],
                                  lambda s: "receipt" in s))["status"]["receipt"]
    assert receipt["result"] == "Applied" and receipt["generation"] == generation
    counted = await until_status(api, "memoryscopes", NS, name, lambda s: s.get("entryCount") == 1)
    assert counted["status"]["hardExpiry"]


async def test_withdrawal_erases_verifies_and_fences_stale_writes(
    operator: Operator, api: client.CustomObjectsApi, store: MemoryStore
) -> None:
    name = "withdrawal"
    _create(api, "memoryscopes", _scope(name))
    consent = _create(api, "consentrecords", _consent(name))
    g1 = (await until_status(api, "memoryscopes", NS, name, phase("Enabled")))["status"][
        "consentGeneration"]
    for i in range(5):
        await store.save(_access(name, g1), f"fact {i} {SENTINEL}")
    _withdraw(api, consent)
    status = (await until_status(api, "memoryscopes", NS, name,
                                 phase("Disabled", "CONSENT_WITHDRAWN")))["status"]
    # The documented vocabulary (docs/crd-reference.md, issue 37): the erasure names its cause,
    # and ConsentGated (the store's fence holds the scope) says what consent says now.
    assert status["lastErasure"]["result"] == "Verified"
    assert status["lastErasure"]["reasonCode"] == "CONSENT_WITHDRAWN"
    gated = {c["type"]: c for c in status["conditions"]}["ConsentGated"]
    assert (gated["status"], gated["reason"]) == ("True", "CONSENT_WITHDRAWN")
    assert status["entryCount"] == 0 and status["consentGeneration"] > g1
    assert await store.entry_count(f"{NS}/{name}") == 0
    # A background save scheduled before the withdrawal can never recreate memory.
    with pytest.raises(StoreRefusal):
        await store.save(_access(name, g1), "late background save")
    # Re-grant is a new record, a new generation; the old one stays dead.
    _create(api, "consentrecords", _consent(name))
    g3 = (await until_status(api, "memoryscopes", NS, name, phase("Enabled")))["status"][
        "consentGeneration"]
    assert g3 > status["consentGeneration"]
    with pytest.raises(StoreRefusal) as stale:
        await store.save(_access(name, g1), "stale")
    assert stale.value.reason is Reason.STALE_GENERATION
    for obj in (await asyncio.to_thread(get_object, api, "memoryscopes", NS, name),):
        assert SENTINEL not in str(obj)


async def test_the_operator_carries_the_recall_policy_and_reports_what_it_withholds(
    operator: Operator, api: client.CustomObjectsApi, store: MemoryStore
) -> None:
    """spec.policy.recall reaches the store's scope record, where the fenced view applies it;
    status.recallWithheld counts what it withholds (codes and counts only); a changed policy
    is carried at once."""
    from fgentic_governance.memory.model import Envelope, Sensitivity

    name = "recall-policy"
    policy = {**example("MemoryScope")["spec"]["policy"], "recall": {"sensitivities": ["normal"]}}
    _create(api, "memoryscopes", _scope(name, policy=policy))
    _create(api, "consentrecords", _consent(name))
    generation = (await until_status(api, "memoryscopes", NS, name, phase("Enabled")))["status"][
        "consentGeneration"]
    access = _access(name, generation)
    unit = [1.0] + [0.0] * 767
    await store.save(access, "prefers tea", embedding=unit)
    await store.save(access, f"a sensitive fact {SENTINEL}", embedding=unit,
                     envelope=Envelope(sensitivity=Sensitivity.SENSITIVE))
    status = (await until_status(api, "memoryscopes", NS, name,
                                 lambda s: s.get("entryCount") == 2))["status"]
    assert status["recallWithheld"] == [{"reasonCode": "RECALL_SENSITIVITY_WITHHELD", "count": 1}]
    assert [e.content for e in await store.search(access, unit)] == ["prefers tea"]

    api.patch_namespaced_custom_object(GROUP, VERSION, NS, "memoryscopes", name,
                                       {"spec": {"policy": {"recall": {"sensitivities": None}}}})
    await until_status(api, "memoryscopes", NS, name, lambda s: s.get("recallWithheld") == [])
    assert len(await store.search(access, unit)) == 2
    assert SENTINEL not in str(await asyncio.to_thread(get_object, api, "memoryscopes", NS, name))


async def test_deleting_the_scope_erases_before_it_goes(
    operator: Operator, api: client.CustomObjectsApi, store: MemoryStore
) -> None:
    name = "deleted"
    _create(api, "memoryscopes", _scope(name))
    _create(api, "consentrecords", _consent(name))
    generation = (await until_status(api, "memoryscopes", NS, name, phase("Enabled")))["status"][
        "consentGeneration"]
    await store.save(_access(name, generation), "a fact")
    api.delete_namespaced_custom_object(GROUP, VERSION, NS, "memoryscopes", name)

    async def gone() -> bool:
        try:
            await asyncio.to_thread(get_object, api, "memoryscopes", NS, name)
        except ApiException as exc:
            assert exc.status == 404
            return True
        return False

    await until_async(gone, "the scope deleted", 30)
    state = await store.scope_state(f"{NS}/{name}")
    assert not state.enabled and state.entry_count == 0


async def test_federated_and_mismatched_subjects_stay_disabled(
    operator: Operator, api: client.CustomObjectsApi
) -> None:
    remote = {"mxid": "@alice:remote.example", "originKind": "native-local"}
    _create(api, "memoryscopes", _scope("remote", subject=remote))
    _create(api, "consentrecords", _consent("remote", subject=remote))
    await until_status(api, "memoryscopes", NS, "remote", phase("Disabled", "FEDERATION_DENIED"))
    _create(api, "memoryscopes", _scope("mismatch"))
    _create(api, "consentrecords", _consent(
        "mismatch", subject={"mxid": "@mallory:fgentic.local", "originKind": "native-local"}))
    await until_status(api, "memoryscopes", NS, "mismatch",
                       phase("Disabled", "CONSENT_SUBJECT_MISMATCH"))
    # A Telegram puppet declared native-local (the webhook refuses it; the operator's gates
    # hold without it): never enabled, whatever its consent says (ADR 0023 §31).
    bridged = {"mxid": puppet("fgentic.local"), "originKind": "native-local"}
    _create(api, "memoryscopes", _scope("puppet", subject=bridged))
    _create(api, "consentrecords", _consent("puppet", subject=bridged))
    await until_status(api, "memoryscopes", NS, "puppet",
                       phase("Disabled", "APPSERVICE_IDENTITY_DENIED"))


async def test_restart_mid_erasure_resumes(
    operator: Operator, api: client.CustomObjectsApi, store: MemoryStore
) -> None:
    name = "restart"
    _create(api, "memoryscopes", _scope(name))
    consent = _create(api, "consentrecords", _consent(name))
    generation = (await until_status(api, "memoryscopes", NS, name, phase("Enabled")))["status"][
        "consentGeneration"]
    for i in range(3):
        await store.save(_access(name, generation), f"fact {i}")
    operator.stop()
    # The crash: the withdrawal fenced the scope, then the process died before deleting.
    await store.disable_and_advance(f"{NS}/{name}")
    assert await store.entry_count(f"{NS}/{name}") == 3
    _withdraw(api, consent)
    operator.start()
    status = (await until_status(api, "memoryscopes", NS, name,
                                 lambda s: s.get("lastErasure", {}).get("result") == "Verified"))[
        "status"]
    assert status["phase"] == "Disabled"
    assert await store.entry_count(f"{NS}/{name}") == 0


async def test_phase_changes_and_erasures_are_content_free_events(
    operator: Operator, api: client.CustomObjectsApi, store: MemoryStore,
    k8s_client: client.ApiClient,
) -> None:
    name = "events"
    _create(api, "memoryscopes", _scope(name))
    consent = _create(api, "consentrecords", _consent(name))
    await until_status(api, "memoryscopes", NS, name, phase("Enabled"))
    _withdraw(api, consent)
    await until_status(api, "memoryscopes", NS, name, lambda s: "lastErasure" in s)
    core = client.CoreV1Api(k8s_client)

    def events() -> list[Any]:
        return [e for e in core.list_namespaced_event(NS).items if e.involved_object.name == name]

    mine = await until_async(events, "the scope's Enabled and ErasureVerified events", 20,
                             interval=0.3, holds=lambda found: {"Enabled", "ErasureVerified"}
                             <= {e.reason for e in found})
    reasons = {e.reason for e in mine}
    assert {"Disabled", "Enabled", "ErasureVerified"} <= reasons, reasons
    for event in mine:
        assert "@alice" not in event.message and "!alice" not in event.message
        assert event.message.startswith(("reason ", "receipt "))


async def test_store_with_unpinned_log_settings_grants_nothing(
    *, control_plane: Any, pg_dsn: str, store: MemoryStore, api: client.CustomObjectsApi,
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 14, finding 4: StoreReady verifies the pinned settings (memory/bounds.py)."""
    global NS  # noqa: PLW0603
    NS = f"memory-{uuid.uuid4().hex[:8]}"
    control_plane.ensure_namespace(NS)
    database = pg_dsn.rsplit("/", 1)[1]
    admin = await asyncpg.connect(pg_dsn)
    await admin.execute(f'ALTER DATABASE "{database}" RESET log_min_error_statement')
    monkeypatch.setenv("FGENTIC_STORE_SETTINGS_SECONDS", "1")
    op = Operator(control_plane.kubeconfig, pg_dsn, tmp_path)
    op.start()
    try:
        name = "unsafe-settings"
        _create(api, "memoryscopes", _scope(name))
        _create(api, "consentrecords", _consent(name))
        status = (await until_status(api, "memoryscopes", NS, name,
                                     phase("Failed", "STORE_SETTINGS_UNSAFE")))["status"]
        ready = {c["type"]: c for c in status["conditions"]}["StoreReady"]
        assert ready["status"] == "False" and ready["reason"] == "STORE_SETTINGS_UNSAFE"
        with pytest.raises(StoreRefusal) as untouched:  # Nothing was granted, or even written.
            await store.scope_state(f"{NS}/{name}")
        assert untouched.value.reason is Reason.SCOPE_MISSING
        assert "content store settings unsafe: log_min_error_statement" in op.log.read_text()
        # Pinned again by a DBA: the next check publishes the store as fit, and consent applies.
        await admin.execute(
            f"ALTER DATABASE \"{database}\" SET log_min_error_statement = 'panic'")
        await until_status(api, "memoryscopes", NS, name, phase("Enabled", "OK"))
        assert (await store.scope_state(f"{NS}/{name}")).enabled
    finally:
        op.stop()
        await admin.close()


async def test_store_with_an_outdated_pgvector_grants_nothing(
    *, control_plane: Any, pg_dsn: str, api: client.CustomObjectsApi, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 36 §5: pgvector before 0.8.4 can corrupt or fail an HNSW index while vacuuming it,
    which the store does all the time: StoreReady refuses it with its own code. The test
    database's extension is made at 0.8.2 (the wheel's own script, kept beside 0.8.6's), so
    the operator reads a real catalog row; the library is 0.8.6's, as after a package upgrade
    whose ALTER EXTENSION ... UPDATE is still due, which is refused the same way."""
    global NS  # noqa: PLW0603
    NS = f"memory-{uuid.uuid4().hex[:8]}"
    control_plane.ensure_namespace(NS)
    admin = await asyncpg.connect(pg_dsn)
    await admin.execute("DROP EXTENSION vector")
    await admin.execute("CREATE EXTENSION vector VERSION '0.8.2'")
    assert await extension.installed(admin) == "0.8.2"
    pool = await migrated_pool(pg_dsn, max_size=2)
    store = MemoryStore(pool)
    monkeypatch.setenv("FGENTIC_STORE_SETTINGS_SECONDS", "1")
    op = Operator(control_plane.kubeconfig, pg_dsn, tmp_path)
    op.start()
    try:
        name = "outdated-pgvector"
        _create(api, "memoryscopes", _scope(name))
        _create(api, "consentrecords", _consent(name))
        status = (await until_status(api, "memoryscopes", NS, name,
                                     phase("Failed", "STORE_EXTENSION_OUTDATED")))["status"]
        ready = {c["type"]: c for c in status["conditions"]}["StoreReady"]
        assert ready["status"] == "False" and ready["reason"] == "STORE_EXTENSION_OUTDATED"
        assert "older than 0.8.4" in ready["message"]
        with pytest.raises(StoreRefusal) as untouched:  # Nothing was granted, or even written.
            await store.scope_state(f"{NS}/{name}")
        assert untouched.value.reason is Reason.SCOPE_MISSING
        assert "content store pgvector 0.8.2 is older than 0.8.4" in op.log.read_text()
        # Updated by a DBA: the next check publishes the store as fit, and consent applies.
        await admin.execute("ALTER EXTENSION vector UPDATE")
        assert not extension.outdated(await extension.installed(admin))
        await until_status(api, "memoryscopes", NS, name, phase("Enabled", "OK"))
        assert (await store.scope_state(f"{NS}/{name}")).enabled
    finally:
        op.stop()
        await pool.close()
        await admin.close()


def _ready(obj: dict[str, Any]) -> dict[str, Any] | None:
    return next((c for c in (obj.get("status") or {}).get("conditions", [])
                 if c["type"] == "Ready"), None)


async def test_every_kind_reports_ready_with_a_message_and_events(
    operator: Operator, api: client.CustomObjectsApi, k8s_client: client.ApiClient,
    control_plane: Any,
) -> None:
    """Issue 27: `kubectl wait --for=condition=Ready` returns for a MemoryScope (reconciled:
    Disabled without consent is Ready, Failed is not), a ConsentRecord (once its receipt says
    Applied; an invalid one is never Ready) and a PrincipalOffboarding; every condition has a
    human message and the generation it observed; ConsentRecord and PrincipalOffboarding post
    events reported as the product (the offboarding's in `default`: it is cluster-scoped)."""
    name = "ready"
    _create(api, "memoryscopes", _scope(name))
    consent = _create(api, "consentrecords", _consent(name))
    consent_name = consent["metadata"]["name"]
    offboarding = example("PrincipalOffboarding")
    offboarding["metadata"] = {"name": f"bob-{uuid.uuid4().hex[:6]}"}
    api.create_cluster_custom_object(GROUP, VERSION, "principaloffboardings", offboarding)
    off_name = offboarding["metadata"]["name"]
    try:
        for kind, target in (("memoryscope", f"{name}"), ("consentrecord", consent_name)):
            await asyncio.to_thread(control_plane.kubectl, "wait", "-n", NS,
                                    f"{kind}/{target}", "--for=condition=Ready",
                                    "--timeout=60s")
        await asyncio.to_thread(control_plane.kubectl, "wait",
                                f"principaloffboarding/{off_name}", "--for=condition=Ready",
                                "--timeout=60s")
        scope = get_object(api, "memoryscopes", NS, name)
        record = get_object(api, "consentrecords", NS, consent_name)
        for obj in (scope, record):
            for cond in obj["status"]["conditions"]:
                assert cond["message"] and cond["observedGeneration"] == 1, cond
                assert "@alice" not in cond["message"]
        assert _ready(record) is not None and _ready(record)["reason"] == "OK"  # type: ignore[index]
        assert [c["type"] for c in record["status"]["conditions"]] == ["Ready", "Valid"]
        core = client.CoreV1Api(k8s_client)

        async def events_of(involved: str, namespace: str) -> set[tuple[str, str]]:
            return await until_async(lambda: {
                (e.reason, e.source.component) for e in core.list_namespaced_event(
                    namespace, field_selector=f"involvedObject.name={involved}").items},
                f"events of {involved}", 20, interval=0.3)

        # A transition's Event follows once the watch shows its status written (issue 39).
        await until_async(lambda: posted(k8s_client, "", off_name, "ReadyForDeactivation"),
                          "the offboarding's ReadyForDeactivation event", 20)
        assert ("Applied", "fgentic-governance-operator") in await events_of(consent_name, NS)
        assert ("ReadyForDeactivation", "fgentic-governance-operator") in await events_of(
            off_name, "default")
    finally:
        api.delete_cluster_custom_object(GROUP, VERSION, "principaloffboardings", off_name)


def _route_condition(scope: dict[str, Any]) -> tuple[str, str] | None:
    found = {c["type"]: c for c in (scope.get("status") or {}).get("conditions", [])}
    cond = found.get("ModelRouteGoverned")
    return None if cond is None else (cond["status"], cond["reason"])


async def test_each_scope_reports_whether_its_agents_model_route_is_governed(
    operator: Operator, api: client.CustomObjectsApi,
) -> None:
    """Issue 26 (ADR 0023 §42, per Agent): a scope's ModelRouteGoverned condition says whether
    its Agent's model and memory embedding ModelConfigs use the governed model route: False
    while no route is configured, while the Agent is missing, and when a ModelConfig points
    elsewhere; True when both are at the memory API's /v1."""
    route = "http://fgentic-memory-api.fgentic-system.svc:8083/v1"
    _create(api, "memoryscopes", _scope("routed", agent={"namespace": NS, "name": "routed"}))

    def route_is(expected: tuple[str, str]) -> Any:
        return lambda _status: _route_condition(get_object(api, "memoryscopes", NS,
                                                           "routed")) == expected

    await until_status(api, "memoryscopes", NS, "routed",
                       route_is(("False", "MODEL_ROUTE_UNCONFIGURED")))
    operator.stop()
    operator.args += ["--memory-model-url", route]
    operator.start()
    await until_status(api, "memoryscopes", NS, "routed",
                       route_is(("False", "AGENT_NOT_FOUND")), timeout=60)
    kagent = ("kagent.dev", "v1alpha2", NS)
    for name, model in (("chat", "gpt-4o-mini"), ("embed", "text-embedding-3-small")):
        api.create_namespaced_custom_object(*kagent, "modelconfigs", {
            "apiVersion": "kagent.dev/v1alpha2", "kind": "ModelConfig",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"model": model, "provider": "OpenAI", "openAI": {"baseUrl": route}}})
    api.create_namespaced_custom_object(*kagent, "agents", {
        "apiVersion": "kagent.dev/v1alpha2", "kind": "Agent",
        "metadata": {"name": "routed", "namespace": NS},
        "spec": {"type": "Declarative", "declarative": {
            "modelConfig": "chat", "systemMessage": "You help.",
            "memory": {"modelConfig": "embed", "ttlDays": 3}}}})
    ok = await until_status(api, "memoryscopes", NS, "routed", route_is(("True", "OK")),
                            timeout=60)
    cond = {c["type"]: c for c in ok["status"]["conditions"]}["ModelRouteGoverned"]
    assert cond["message"] and "http" not in cond["message"]  # constant text, no value
    api.patch_namespaced_custom_object(*kagent, "modelconfigs", "chat",
                                       {"spec": {"openAI": {"baseUrl": "http://llm.example/v1"}}})
    await until_status(api, "memoryscopes", NS, "routed",
                       route_is(("False", "MODEL_ROUTE_UNGOVERNED")), timeout=60)


async def _at_rest(api: client.CustomObjectsApi, pool: asyncpg.Pool) -> dict[str, Any]:
    """What any write would change: every object's resourceVersion in the namespace (scopes,
    consents, Events) and every scope row's version in the store (xmin: a new one per UPDATE,
    exact where pg_stat's n_tup_upd is flushed by each backend only now and then)."""
    objects = {f"{plural}/{o['metadata']['name']}": o["metadata"]["resourceVersion"]
               for plural in ("memoryscopes", "consentrecords")
               for o in api.list_namespaced_custom_object(GROUP, VERSION, NS, plural)["items"]}
    events = client.CoreV1Api(api.api_client).list_namespaced_event(NS).items
    rows = await pool.fetch("SELECT scope_key, xmin::text AS v FROM fgentic_memory.scope"
                            " WHERE scope_key LIKE $1", f"{NS}/%")
    return {"objects": objects, "events": len(events),
            "rows": {r["scope_key"]: r["v"] for r in rows}}


async def test_a_sweep_that_finds_nothing_new_writes_nothing(
    operator: Operator, api: client.CustomObjectsApi, store: MemoryStore, pool: asyncpg.Pool
) -> None:
    """Issue 39: converged scopes cost no API write and no store row write, round after round
    (the per-scope timer this replaces UPSERTed every scope row every second here); a store
    fact that changes (an entry saved) is still picked up, for that scope alone."""
    names = [f"rest-{i}" for i in range(3)]
    for i, name in enumerate(names):  # one subject, Agent and room each: rooms differ
        room = {"controlRoom": f"!alice-rest-{i}:fgentic.local"} if i else {}
        _create(api, "memoryscopes", _scope(name, **room))
        _create(api, "consentrecords", _consent(name))
    for name in names:
        await until_status(api, "memoryscopes", NS, name, phase("Enabled", "OK"))
    await operator.sweeps(2)  # any poke of the convergence itself has been reconciled
    before, pokes = await _at_rest(api, pool), operator.series("fgentic_scope_sweep_pokes_total")
    assert len(before["rows"]) == len(names)
    await operator.sweeps(3)
    assert await _at_rest(api, pool) == before
    assert operator.series("fgentic_scope_sweep_pokes_total") == pokes
    generation = (await asyncio.to_thread(get_object, api, "memoryscopes", NS, names[0])
                  )["status"]["consentGeneration"]
    await store.save(_access(names[0], generation), "prefers green tea")
    counted = await until_status(api, "memoryscopes", NS, names[0],
                                 lambda s: s.get("entryCount") == 1 and bool(s.get("hardExpiry")))
    await operator.sweeps(2)
    after = await _at_rest(api, pool)
    assert operator.series("fgentic_scope_sweep_pokes_total") == pokes + 1
    assert after["events"] == before["events"]  # a count moved, not a phase: no Event
    changed = {k for k, v in after["objects"].items() if before["objects"][k] != v}
    assert changed == {f"memoryscopes/{names[0]}"}
    assert counted["metadata"]["resourceVersion"] != before["objects"][f"memoryscopes/{names[0]}"]


async def test_a_deleted_consent_record_withdraws_and_erases_without_a_resync(
    operator: Operator, api: client.CustomObjectsApi, store: MemoryStore
) -> None:
    """Deleting the ConsentRecord is a withdrawal; its scope erases at once, not when a resync
    happens to look (here none does within the hour): before issue 39 only the per-scope timer
    noticed, since the consent index just loses the record."""
    operator.stop()
    operator.start(resync="3600")
    name = "consent-deleted"
    _create(api, "memoryscopes", _scope(name))
    consent = _create(api, "consentrecords", _consent(name))
    generation = (await until_status(api, "memoryscopes", NS, name, phase("Enabled", "OK"))
                  )["status"]["consentGeneration"]
    await store.save(_access(name, generation), "prefers green tea")
    api.delete_namespaced_custom_object(GROUP, VERSION, NS, "consentrecords",
                                        consent["metadata"]["name"])
    status = (await until_status(api, "memoryscopes", NS, name, phase("Disabled")))["status"]
    assert status["entryCount"] == 0 and status["lastErasure"]
    state = await store.scope_state(f"{NS}/{name}")
    assert not state.enabled and state.entry_count == 0


def _labelled(name: str, agent: str = "docs-agent") -> dict[str, Any]:
    obj = _scope(name, agent={"namespace": "fgentic-demo", "name": agent})
    obj["metadata"]["labels"] = {REFUSED: "true"}
    return obj


async def test_a_phase_change_is_announced_only_once_its_status_is_written(
    operator: Operator, api: client.CustomObjectsApi,
) -> None:
    """Issue 39: the Event belongs to the transition actually recorded. While the API server
    refuses the scope's status writes the store grants it, yet no `Enabled` Event is posted;
    once the write goes through, exactly one is (before 2120fd3: one posted with the refused
    write, another with the one that went through)."""
    def create(name: str) -> None:  # its own Agent: no two scopes share a store identity
        _create(api, "memoryscopes", _labelled(name, name))
        _create(api, "consentrecords", _consent(name))

    await announced_once_written(api, operator.log, "memoryscopes", NS, create,
                                 phase("Enabled", "OK"), "Enabled")


CONSENT_POKE = f"{GROUP}/consent-revision"
# A change of the consent poke's annotation is refused; any other update of the scope is not.
POKE_REFUSED = (f"!has(object.metadata.annotations) || !('{CONSENT_POKE}' in "
                f"object.metadata.annotations) || (has(oldObject.metadata.annotations) && "
                f"'{CONSENT_POKE}' in oldObject.metadata.annotations && "
                f"oldObject.metadata.annotations['{CONSENT_POKE}'] == "
                f"object.metadata.annotations['{CONSENT_POKE}'])")


async def test_a_consent_poke_refused_by_the_api_is_sent_again(
    operator: Operator, api: client.CustomObjectsApi, k8s_client: client.ApiClient,
) -> None:
    """Issue 39: the ConsentRecord's poke of its scope fails (the API server refuses it) after
    the record's status was written. The scope still learns of the consent once the API
    accepts pokes again (before: the retry saw the status written and skipped the poke, and
    the sweep, finding the store unchanged, never looked: the scope stayed CONSENT_MISSING)."""
    def poke(scope: str) -> Callable[[], object]:
        return _poke(api, scope)

    _create(api, "memoryscopes", _labelled("probe-poke", "probe-agent"))
    name = "poke-refused"
    _create(api, "memoryscopes", _labelled(name))
    await until_status(api, "memoryscopes", NS, name, phase("Disabled", "CONSENT_MISSING"))
    with refusing(k8s_client, resource="memoryscopes", label=REFUSED, allow=POKE_REFUSED):
        await until_refused(poke("probe-poke"))
        consent = _create(api, "consentrecords", _consent(name))["metadata"]["name"]
        await until_async(lambda: _retry_pending(api, "consentrecords", consent),
                          "the consent's poke refused (a retry scheduled)", 30)
        status = get_object(api, "memoryscopes", NS, name)["status"]
        assert (status["phase"], status["reasonCode"]) == ("Disabled", "CONSENT_MISSING")
    await until_refused(poke("probe-poke"), refused=False)
    await until_status(api, "memoryscopes", NS, name, phase("Enabled", "OK"), timeout=60)


def _poke(api: client.CustomObjectsApi, scope: str, key: str = CONSENT_POKE
          ) -> Callable[[], object]:
    """A call that annotates ``scope`` as a consent's poke does (refused or not)."""
    return lambda: api.patch_namespaced_custom_object(
        GROUP, VERSION, NS, "memoryscopes", scope,
        {"metadata": {"annotations": {key: uuid.uuid4().hex}}})


def _retry_pending(api: client.CustomObjectsApi, plural: str, name: str) -> bool:
    """Kopf's progress storage (its annotations) shows a handler's retry scheduled."""
    notes = get_object(api, plural, NS, name)["metadata"].get("annotations") or {}
    return any(key.startswith("kopf.zalando.org/") and '"retries"' in value
               for key, value in notes.items())


async def test_a_consent_its_scope_has_read_does_not_poke_it(
    operator: Operator, api: client.CustomObjectsApi, k8s_client: client.ApiClient,
) -> None:
    """Issue 39: a consent's poke is one PATCH and one more reconcile of its scope; when the
    scope's reconcile has already read the record (Kopf indexed it first), the poke is
    redundant. Here the consent's first poke is refused; the scope, reconciled meanwhile for
    another reason, reads the record and is Enabled; the consent's retry then writes nothing
    to the scope (before: it poked it all the same)."""
    def poke(scope: str, key: str = CONSENT_POKE) -> Callable[[], object]:
        return _poke(api, scope, key)

    _create(api, "memoryscopes", _labelled("probe-read", "probe-agent"))
    name = "read-already"
    _create(api, "memoryscopes", _labelled(name))
    await until_status(api, "memoryscopes", NS, name, phase("Disabled", "CONSENT_MISSING"))
    with refusing(k8s_client, resource="memoryscopes", label=REFUSED, allow=POKE_REFUSED):
        await until_refused(poke("probe-read"))
        consent = _create(api, "consentrecords", _consent(name))["metadata"]["name"]
        await until_status(api, "consentrecords", NS, consent,
                           lambda _: _retry_pending(api, "consentrecords", consent))
        await asyncio.to_thread(poke(name, f"{GROUP}/resync-revision"))  # not refused
        await until_status(api, "memoryscopes", NS, name, phase("Enabled", "OK"))
    await until_refused(poke("probe-read"), refused=False)
    # The retry ran (Kopf clears its progress once the handler succeeds, after any poke).
    await until_status(api, "consentrecords", NS, consent,
                       lambda _: not _retry_pending(api, "consentrecords", consent), timeout=60)
    scope = await asyncio.to_thread(get_object, api, "memoryscopes", NS, name)
    assert CONSENT_POKE not in (scope["metadata"].get("annotations") or {})
