"""RetrievalBinding through the real operator process and kube-apiserver: render, server-side
apply with owner references or binding labels, drift correction on the timer, pruning, conflict
between two bindings for one Agent, and cleanup on delete and by `detach` (the uninstall hook):
everything rendered goes, an object merely labelled like ours stays."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from fgentic_governance.api.common import GROUP, VERSION
from fgentic_governance.api.registry import RETRIEVAL_BINDING
from fgentic_governance.api.retrieval import RetrievalBindingSpec
from fgentic_governance.retrieval.render import names as n
from fgentic_governance.retrieval.render import ownership
from fgentic_governance.retrieval.render.binding import render
from tests.support import processes
from tests.support.announcements import REFUSED, announced_once_written
from tests.support.objects import api_prefix, example, object_path, raw_request
from tests.support.polling import until_async
from tests.support.render import JWKS, Env

pytestmark = pytest.mark.integration
PLURAL = RETRIEVAL_BINDING.plural


@pytest.fixture
def env(control_plane: Any, k8s_client: client.ApiClient, tmp_path: Path) -> Iterator[Env]:
    e = Env()
    control_plane.ensure_namespace(e.ns)
    control_plane.ensure_namespace(e.retrieval)
    client.CoreV1Api(k8s_client).create_namespaced_config_map(e.ns, {
        "metadata": {"name": "partner-jwks"}, "data": {"jwks.json": JWKS}})
    log = tmp_path / "operator.log"
    proc = processes.spawn_cli(["operator", "--kubeconfig", str(control_plane.kubeconfig),
                                "--namespace", e.ns], log,
                               env={"FGENTIC_BINDING_RESYNC_SECONDS": "1"})
    e.operator = proc
    yield e
    processes.stop(proc)


@pytest.fixture(scope="module")
def api(k8s_client: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(k8s_client)


def _get(api: client.CustomObjectsApi, env: Env, name: str) -> dict[str, Any]:
    return api.get_namespaced_custom_object(  # type: ignore[no-any-return]
        GROUP, VERSION, env.ns, PLURAL, name)


def _condition(status: dict[str, Any], kind: str) -> str | None:
    return next((c["status"] for c in status.get("conditions", []) if c["type"] == kind), None)


async def _until(check: Callable[[], Any], what: str, timeout: float = 45) -> Any:
    """``check`` (a blocking call) until it returns something true; API errors (a 404 before
    the object exists) count as not yet."""
    return await until_async(lambda: asyncio.to_thread(check), what, timeout, interval=0.25,
                             tolerate=(ApiException,))


async def _applied(api: client.CustomObjectsApi, env: Env, name: str) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        status = _get(api, env, name).get("status", {})
        return status if _condition(status, "Applied") == "True" else None

    result: dict[str, Any] = await _until(check, f"{name} Applied")
    return result


def _raw_get(api: client.CustomObjectsApi, path: str, **query: str) -> dict[str, Any]:
    return dict(raw_request(api.api_client, "GET", path, **query))


def _labelled(api: client.CustomObjectsApi, label: str) -> list[tuple[str, str, str]]:
    found = []
    for (api_version, kind), plural in n.RENDERED_KINDS.items():
        items = _raw_get(api, f"{api_prefix(api_version)}/{plural}",
                         labelSelector=f"{n.BINDING_LABEL}={label}")
        found += [(kind, i["metadata"]["namespace"], i["metadata"]["name"])
                  for i in items["items"]]
    return sorted(found)


def _object(api: client.CustomObjectsApi, obj: dict[str, Any]) -> dict[str, Any]:
    return _raw_get(api, object_path(obj, ownership.plural(obj)))


def _expected(env: Env, name: str, **changes: Any) -> Any:
    obj = env.binding(name, **changes)
    return render(env.ns, name, RetrievalBindingSpec.model_validate(obj["spec"]), jwks=JWKS)


async def test_binding_renders_and_applies_with_owner_references(
    env: Env, api: client.CustomObjectsApi
) -> None:
    created = api.create_namespaced_custom_object(GROUP, VERSION, env.ns, PLURAL,
                                                  env.binding("docs"))
    status = await _applied(api, env, "docs")
    expected = _expected(env, "docs")
    assert status["renderedDigest"] == expected.digest
    assert status["renderedObjects"] == len(expected.objects) == 15
    assert status["deviations"] == ["A2A_HOP_AGENT_SERVICE", "A2A_WIRE_0_3", "NO_TASK_POLL"]
    assert status["unenforceable"] == list(expected.unenforceable)
    assert _condition(status, "Rendered") == "True"
    assert _condition(status, "Conflict") == "False"
    uid = created["metadata"]["uid"]
    for obj in expected.objects:
        live = await asyncio.to_thread(_object, api, obj)
        assert live["metadata"]["labels"][n.BINDING_LABEL] == f"{env.ns}.docs"
        refs = live["metadata"].get("ownerReferences", [])
        if obj["metadata"]["namespace"] == env.ns:
            assert [(r["kind"], r["name"], r["uid"], r["controller"]) for r in refs] == [
                ("RetrievalBinding", "docs", uid, True)]
        else:  # Cross-namespace: no owner reference, only the label.
            assert refs == []
        managers = {m["manager"] for m in live["metadata"]["managedFields"]}
        assert managers == {n.FIELD_MANAGER}


async def test_manual_edits_are_corrected_and_deleted_objects_come_back(
    env: Env, api: client.CustomObjectsApi
) -> None:
    api.create_namespaced_custom_object(GROUP, VERSION, env.ns, PLURAL, env.binding("drift"))
    await _applied(api, env, "drift")
    expected = {o["metadata"]["name"].rsplit(".", 1)[1]: o
                for o in _expected(env, "drift").objects}
    policy = expected["retrieval-service"]
    meta = policy["metadata"]
    api.patch_namespaced_custom_object(
        "networking.k8s.io", "v1", meta["namespace"], "networkpolicies", meta["name"],
        {"spec": {"ingress": [{"ports": [{"protocol": "TCP", "port": 9999}]}]}})
    assert _object(api, policy)["spec"]["ingress"][0]["ports"][0]["port"] == 9999
    route = expected["local"]
    api.delete_namespaced_custom_object("gateway.networking.k8s.io", "v1", env.ns, "httproutes",
                                        route["metadata"]["name"])

    def corrected() -> bool:
        live = _object(api, policy)["spec"]["ingress"]
        return bool(live == policy["spec"]["ingress"] and _object(api, route))

    await _until(corrected, "drift correction")


RENDERED_RESOURCES = ("networkpolicies", "httproutes", "agentgatewaypolicies",
                      "agentgatewaybackends", "configmaps")


def _requests(control_plane: Any, verb: str) -> float:
    """apiserver_request_total for ``verb`` on the rendered kinds (cumulative, whole server)."""
    total = 0.0
    for line in control_plane.kubectl("get", "--raw", "/metrics").splitlines():
        if line.startswith("apiserver_request_total{") and f'verb="{verb}"' in line and any(
                f'resource="{r}"' in line for r in RENDERED_RESOURCES):
            total += float(line.rsplit(" ", 1)[1])
    return total


async def test_quiet_resyncs_list_versions_and_apply_nothing(
    env: Env, api: client.CustomObjectsApi, control_plane: Any
) -> None:
    """With nothing drifted, a resync round costs the shared metadata LISTs, not 13 applies
    per binding (controller/retrieval_apply.py); the edit test above shows drift is still
    corrected. Nor does it write anything else (issue 39): no status patch, no Event, for a
    binding that is Ready and for one whose Agent is missing alike."""
    ready = env.binding("quiet-ready")
    ready["spec"]["mcpServer"]["namespace"] = env.ns
    ready["spec"]["agent"]["name"] = "quiet-agent"
    agent = _agent(env, ["search_knowledge"])
    agent["metadata"]["name"] = "quiet-agent"
    api.create_namespaced_custom_object("kagent.dev", "v1alpha2", env.ns, "agents", agent)
    api.create_namespaced_custom_object(GROUP, VERSION, env.ns, PLURAL, ready)
    api.create_namespaced_custom_object(GROUP, VERSION, env.ns, PLURAL, env.binding("quiet"))
    for name in ("quiet-ready", "quiet"):
        await _applied(api, env, name)
    # Two resync rounds (1 s each) have compared the applied versions; then three more must
    # apply nothing. Counted in LISTs, not seconds, so a slow host only makes it wait longer.
    await _refreshes(control_plane, 2)
    applies = _requests(control_plane, "APPLY")
    before = await asyncio.to_thread(_at_rest, api, env)
    assert len(before["bindings"]) == 2 and len(before["rendered"]) == 30
    await _refreshes(control_plane, 3)  # The timers ran and compared versions...
    assert _requests(control_plane, "APPLY") == applies  # ...and applied nothing...
    assert await asyncio.to_thread(_at_rest, api, env) == before  # ...nor wrote anything.


async def _refreshes(control_plane: Any, rounds: int, timeout: float = 60.0) -> None:
    """Wait (bounded) for ``rounds`` version refreshes: one LIST of each rendered kind each."""
    want = _requests(control_plane, "LIST") + rounds * len(RENDERED_RESOURCES)
    await until_async(lambda: _requests(control_plane, "LIST"), f"{rounds} refreshes", timeout,
                      interval=0.5, holds=lambda lists: lists >= want)


async def test_second_binding_for_the_same_agent_conflicts_and_applies_nothing(
    env: Env, api: client.CustomObjectsApi
) -> None:
    api.create_namespaced_custom_object(GROUP, VERSION, env.ns, PLURAL, env.binding("first"))
    await _applied(api, env, "first")
    api.create_namespaced_custom_object(GROUP, VERSION, env.ns, PLURAL, env.binding("second"))

    def conflicted() -> dict[str, Any] | None:
        status = _get(api, env, "second").get("status", {})
        return status if _condition(status, "Conflict") == "True" else None

    status = await _until(conflicted, "Conflict on the second binding")
    assert _condition(status, "Applied") == "False"
    assert status.get("renderedObjects") == 0 and "renderedDigest" not in status
    await asyncio.sleep(2.5)  # a few resync rounds: still nothing applied
    assert _labelled(api, f"{env.ns}.second") == []
    first = _get(api, env, "first")["status"]
    assert _condition(first, "Conflict") == "False" and _condition(first, "Applied") == "True"
    assert len(_labelled(api, f"{env.ns}.first")) == 15


async def test_spec_change_prunes_and_delete_removes_cross_namespace_objects(
    env: Env, api: client.CustomObjectsApi
) -> None:
    api.create_namespaced_custom_object(GROUP, VERSION, env.ns, PLURAL, env.binding("gone"))
    await _applied(api, env, "gone")
    api.patch_namespaced_custom_object(GROUP, VERSION, env.ns, PLURAL, "gone",
                                       {"spec": {"publicRoute": None}})

    def pruned() -> bool:
        return len(_labelled(api, f"{env.ns}.gone")) == 13

    await _until(pruned, "public route objects pruned")
    [config_map] = [o for o in _expected(env, "gone", publicRoute=None).objects
                    if o["kind"] == "ConfigMap" and "projector.json" in o["data"]]

    def reconfigured() -> bool:  # The projector's configuration loses its public route too.
        data = _object(api, config_map)["data"]
        return bool(data == config_map["data"] and '"public"' not in data["projector.json"])

    await _until(reconfigured, "projector ConfigMap updated")
    status = _get(api, env, "gone")["status"]
    assert status["renderedDigest"] == _expected(env, "gone", publicRoute=None).digest
    foreign = _foreign(api, env, "gone")
    rendered = {o[1] for o in _labelled(api, f"{env.ns}.gone")}
    assert rendered == {env.ns, env.retrieval}
    api.delete_namespaced_custom_object(GROUP, VERSION, env.ns, PLURAL, "gone")

    def cleaned() -> bool:
        # No garbage collector runs in this control plane, so only what the operator
        # deletes disappears: in every namespace, the cross-namespace ones included.
        return _labelled(api, f"{env.ns}.gone") == [foreign]

    await _until(cleaned, "every rendered object removed")
    # The finalizer waited for the cleanup; the look-alike is still there.
    await _until(lambda: not api.list_namespaced_custom_object(
        GROUP, VERSION, env.ns, PLURAL)["items"], "binding gone")
    assert _labelled(api, f"{env.ns}.gone") == [foreign]


def _foreign(api: client.CustomObjectsApi, env: Env, binding: str) -> tuple[str, str, str]:
    """Someone's ConfigMap in the retrieval namespace, named like the rendered one and carrying
    the binding's label (copied from ours), but not managed by us: never ours to delete."""
    name = n.BindingId(env.ns, binding).object_name(n.SERVER_CONFIG_SUFFIX) + "-copy"
    client.CoreV1Api(api.api_client).create_namespaced_config_map(env.retrieval, {
        "metadata": {"name": name, "labels": {n.BINDING_LABEL: f"{env.ns}.{binding}",
                                              n.MANAGED_BY[0]: "kubectl"}},
        "data": {"note": "mine"}})
    return ("ConfigMap", env.retrieval, name)


async def test_detach_removes_what_bindings_rendered_and_the_operator_lease(
    env: Env, api: client.CustomObjectsApi, control_plane: Any
) -> None:
    """The uninstall hook: the operator is stopped, the bindings stay (the CRDs go later, and
    with them any chance of a prune), so detach deletes what they rendered itself."""
    api.create_namespaced_custom_object(GROUP, VERSION, env.ns, PLURAL, env.binding("kept"))
    await _applied(api, env, "kept")
    processes.stop(env.operator)  # as the hook scales the operator to 0 first
    foreign = _foreign(api, env, "kept")
    leases = client.CoordinationV1Api(api.api_client)
    leases.create_namespaced_lease(env.ns, {"metadata": {"name": "fg-operator"}})
    result = await asyncio.to_thread(
        subprocess.run, [sys.executable, "-m", "fgentic_governance.cli", "detach",
                         "--kubeconfig", str(control_plane.kubeconfig),
                         f"--operator-lease={env.ns}/fg-operator"],
        capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    assert _labelled(api, f"{env.ns}.kept") == [foreign]
    with pytest.raises(ApiException) as gone:
        leases.read_namespaced_lease("fg-operator", env.ns)
    assert gone.value.status == 404
    # The binding itself is the user's: it stays, for a reinstalled operator to render again.
    assert _get(api, env, "kept")["metadata"]["name"] == "kept"


def _agent(env: Env, tools: list[str]) -> dict[str, Any]:
    agent = example("Agent")
    agent["metadata"] = {"name": env.binding("x")["spec"]["agent"]["name"], "namespace": env.ns}
    declarative = agent["spec"]["declarative"]
    declarative.pop("memory", None)
    declarative["tools"] = [{"type": "McpServer", "mcpServer": {
        "apiGroup": "kagent.dev", "kind": "RemoteMCPServer", "namespace": env.ns,
        "name": "knowledge-retrieval", "toolNames": tools}}]
    return agent


async def test_a_binding_is_ready_only_with_its_agent_and_tool(
    env: Env, api: client.CustomObjectsApi, k8s_client: client.ApiClient
) -> None:
    """Issue 27: `kubectl wait --for=condition=Ready` works, and a binding whose Agent or tool
    does not exist is not Ready (it was Applied=True); each Ready change is one event
    reported by the product; conditions carry a human message and observedGeneration."""
    obj = env.binding("ready")
    obj["spec"]["mcpServer"]["namespace"] = env.ns
    api.create_namespaced_custom_object(GROUP, VERSION, env.ns, PLURAL, obj)

    def ready_reason() -> tuple[str, str] | None:
        status = _get(api, env, "ready").get("status", {})
        found = [c for c in status.get("conditions", []) if c["type"] == "Ready"]
        return (found[0]["status"], found[0]["reason"]) if found else None

    assert await _until(ready_reason, "Ready") == ("False", "AGENT_NOT_FOUND")
    assert _condition(await _applied(api, env, "ready"), "Applied") == "True"
    agents = ("kagent.dev", "v1alpha2", env.ns, "agents")
    api.create_namespaced_custom_object(*agents, _agent(env, ["another_tool"]))

    def reason_is(want: str) -> Any:
        got = ready_reason()
        return got if got and got[1] == want else None

    assert await _until(lambda: reason_is("TOOL_NOT_BOUND"), "TOOL_NOT_BOUND") == (
        "False", "TOOL_NOT_BOUND")
    name = obj["spec"]["agent"]["name"]
    api.patch_namespaced_custom_object(*agents, name, _agent(env, ["search_knowledge"]))
    assert await _until(lambda: reason_is("OK"), "Ready") == ("True", "OK")
    status = _get(api, env, "ready")["status"]
    (cond,) = [c for c in status["conditions"] if c["type"] == "Ready"]
    assert cond["message"] == "Reconciled." and cond["observedGeneration"] == 1
    missing = [c for c in status["conditions"] if not c["message"]]
    assert missing == []
    events = client.CoreV1Api(k8s_client).list_namespaced_event(
        env.ns, field_selector="involvedObject.name=ready").items
    said = sorted((e.reason, e.message, e.source.component) for e in events)
    assert ("NotReady", "reason AGENT_NOT_FOUND", "fgentic-governance-operator") in said
    assert ("Ready", "reason OK", "fgentic-governance-operator") in said


def _at_rest(api: client.CustomObjectsApi, env: Env) -> dict[str, Any]:
    """What any write would change: the bindings' and their rendered objects'
    resourceVersions, and the namespace's Events (uid → count: Kopf posts each Event as a new
    object; a repeated one is the same object with its count raised)."""
    bindings = {o["metadata"]["name"]: o["metadata"]["resourceVersion"]
                for o in api.list_namespaced_custom_object(GROUP, VERSION, env.ns,
                                                           PLURAL)["items"]}
    rendered = {}
    for (api_version, _kind), plural in n.RENDERED_KINDS.items():
        items = _raw_get(api, f"{api_prefix(api_version)}/{plural}",
                         labelSelector=n.BINDING_LABEL)["items"]
        rendered |= {(plural, i["metadata"]["namespace"], i["metadata"]["name"]):
                     i["metadata"]["resourceVersion"] for i in items  # this test's bindings'
                     if i["metadata"]["labels"][n.BINDING_LABEL].startswith(f"{env.ns}.")}
    events = {e.metadata.uid: e.count for e in
              client.CoreV1Api(api.api_client).list_namespaced_event(env.ns).items}
    return {"bindings": bindings, "rendered": rendered, "events": events}



async def test_a_ready_change_is_announced_only_once_its_status_is_written(
    env: Env, api: client.CustomObjectsApi, tmp_path: Path
) -> None:
    """Issue 39: while the API server refuses the binding's status writes, its objects are
    applied but no `NotReady` Event is posted; once the write goes through, exactly one is
    (before: one with the refused write, another with the one that went through)."""
    def create(name: str) -> None:  # its own missing Agent: not ready, and no conflict
        obj = env.binding(name)
        obj["metadata"]["labels"] = {REFUSED: "true"}
        obj["spec"]["agent"]["name"] = name
        api.create_namespaced_custom_object(GROUP, VERSION, env.ns, PLURAL, obj)

    def not_ready(status: dict[str, Any]) -> bool:
        return [(c["status"], c["reason"]) for c in status.get("conditions", [])
                if c["type"] == "Ready"] == [("False", "AGENT_NOT_FOUND")]

    await announced_once_written(api, tmp_path / "operator.log", PLURAL, env.ns, create,
                                 not_ready, "NotReady")
