"""A RetrievalBinding on a real kube-apiserver without agentgateway's and Gateway API's CRDs
(docs/install.md's prerequisites skipped, as a new user did): its conditions name each kind
that is not served (`KIND_NOT_SERVED`, not a bare `APPLY_FAILED`), it can still be deleted,
and running the page's prerequisites block as written makes it `Applied`."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes import config as k8s_config

from fgentic_devenv.binaries import upstream_crds, upstream_dir
from fgentic_devenv.controlplane import LocalControlPlane
from fgentic_governance.api.common import GROUP, VERSION
from fgentic_governance.api.registry import RETRIEVAL_BINDING
from fgentic_governance.retrieval.render import names as n
from tests.support import install_doc, processes
from tests.support.kube import project_crds, until_status
from tests.support.polling import until_async
from tests.support.render import JWKS, Env

pytestmark = pytest.mark.integration
PLURAL = RETRIEVAL_BINDING.plural
# In apply order (names.RENDERED_KINDS): the kinds whose CRDs the prerequisites install.
MISSING = ("AgentgatewayBackend (agentgateway.dev/v1alpha1), "
           "HTTPRoute (gateway.networking.k8s.io/v1), "
           "AgentgatewayPolicy (agentgateway.dev/v1alpha1)")


class Bare:
    """An API server of this test alone with kagent's and our CRDs only, and an operator."""

    def __init__(self, plane: LocalControlPlane, api: client.ApiClient) -> None:
        self.plane, self.env = plane, Env()
        self.custom = client.CustomObjectsApi(api)
        self.core = client.CoreV1Api(api)


@pytest.fixture
def bare(tmp_path: Path) -> Iterator[Bare]:
    with LocalControlPlane(tmp_path / "bare-controlplane") as plane:
        kagent = [p for p in upstream_crds() if p.name.startswith("kagent.dev_")]
        plane.install_crds([*kagent, *project_crds()])
        api = k8s_config.new_client_from_config(  # type: ignore[no-untyped-call]
            config_file=str(plane.kubeconfig))
        setup = Bare(plane, api)
        env = setup.env
        plane.ensure_namespace(env.ns)
        plane.ensure_namespace(env.retrieval)
        setup.core.create_namespaced_config_map(env.ns, {
            "metadata": {"name": "partner-jwks"}, "data": {"jwks.json": JWKS}})
        proc = processes.spawn_cli(["operator", "--kubeconfig", str(plane.kubeconfig),
                                    "--namespace", env.ns], tmp_path / "operator.log",
                                   env={"FGENTIC_BINDING_RESYNC_SECONDS": "1"})
        try:
            yield setup
        finally:
            processes.stop(proc)
            api.close()


def _condition(status: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in status.get("conditions", []) if c["type"] == kind), {})


def _not_served(status: dict[str, Any]) -> bool:
    return _condition(status, "Applied").get("reason") == "KIND_NOT_SERVED"


def _served_labelled(bare: Bare, binding: str) -> list[str]:
    """Rendered ConfigMaps and NetworkPolicies (the served kinds) of ``binding``."""
    selector = f"{n.BINDING_LABEL}={bare.env.ns}.{binding}"
    maps = bare.core.list_config_map_for_all_namespaces(label_selector=selector).items
    policies = client.NetworkingV1Api(bare.core.api_client).list_network_policy_for_all_namespaces(
        label_selector=selector).items
    return [o.metadata.name for o in [*maps, *policies]]


async def test_a_binding_names_the_kinds_not_served_until_the_prerequisites_are_installed(
    bare: Bare,
) -> None:
    env, api = bare.env, bare.custom
    api.create_namespaced_custom_object(GROUP, VERSION, env.ns, PLURAL, env.binding("early"))
    obj = await until_status(api, PLURAL, env.ns, "early", _not_served, timeout=45)
    applied, ready = _condition(obj["status"], "Applied"), _condition(obj["status"], "Ready")
    assert applied["status"] == "False"
    # Each missing kind named, the served ones (ConfigMap, NetworkPolicy) not, and the fix.
    assert f"Not served by the API server: {MISSING}." in applied["message"]
    assert "Install their CRDs (docs/install.md)." in applied["message"]
    assert (ready["status"], ready["reason"], ready["message"]) == (
        "False", "KIND_NOT_SERVED", applied["message"])
    # The served kinds were applied before the first missing one.
    assert _served_labelled(bare, "early")

    # Deleting it does not wait for kinds that cannot exist: the finalizer is released and
    # what was applied is removed.
    api.delete_namespaced_custom_object(GROUP, VERSION, env.ns, PLURAL, "early")
    await until_async(lambda: not api.list_namespaced_custom_object(
        GROUP, VERSION, env.ns, PLURAL)["items"], what="the binding deleted", timeout=45)
    assert _served_labelled(bare, "early") == []

    # docs/install.md's prerequisites block, as written, is the fix.
    api.create_namespaced_custom_object(GROUP, VERSION, env.ns, PLURAL, env.binding("late"))
    await until_status(api, PLURAL, env.ns, "late", _not_served, timeout=45)
    ran = await asyncio.to_thread(install_doc.apply_prerequisites, bare.plane.kubectl,
                                  upstream_dir())
    assert all("--server-side" in argv for argv in ran if argv[1] == "apply")
    obj = await until_status(
        api, PLURAL, env.ns, "late",
        lambda s: _condition(s, "Applied").get("status") == "True", timeout=60)
    assert obj["status"]["renderedObjects"] == 15
    assert _condition(obj["status"], "Applied")["reason"] == "OK"
