"""The local control plane is a real, RBAC-enforcing kube-apiserver with the upstream CRDs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException

from fgentic_devenv.controlplane import LocalControlPlane

pytestmark = pytest.mark.integration

NS = "controlplane-tests"
KAGENT, KAGENT_VERSION = "kagent.dev", "v1alpha2"


@pytest.fixture(scope="module")
def agents(control_plane: LocalControlPlane, k8s_client: k8s.ApiClient) -> k8s.CustomObjectsApi:
    control_plane.ensure_namespace(NS)
    return k8s.CustomObjectsApi(k8s_client)


def _agent(name: str, declarative: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": f"{KAGENT}/{KAGENT_VERSION}",
        "kind": "Agent",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"type": "Declarative", "description": "test agent", "declarative": declarative},
    }


def _message(error: ApiException) -> str:
    return str(json.loads(error.body or "{}")["message"])


def test_server_is_the_pinned_kubernetes_version(k8s_client: k8s.ApiClient) -> None:
    assert k8s.VersionApi(k8s_client).get_code().git_version == "v1.36.3"


@pytest.mark.parametrize(
    ("crd", "version"),
    [
        ("agents.kagent.dev", "v1alpha2"),
        ("remotemcpservers.kagent.dev", "v1alpha2"),
        ("agentgatewaypolicies.agentgateway.dev", None),
        ("agentgatewaybackends.agentgateway.dev", None),
        ("httproutes.gateway.networking.k8s.io", None),
    ],
)
def test_upstream_crds_are_established(
    k8s_client: k8s.ApiClient, crd: str, version: str | None
) -> None:
    obj = k8s.ApiextensionsV1Api(k8s_client).read_custom_resource_definition(crd)
    assert obj.status is not None
    conditions = {c.type: c.status for c in obj.status.conditions or []}
    assert conditions.get("Established") == "True", conditions
    if version:
        assert version in {v.name for v in obj.spec.versions if v.served}


def test_valid_agent_is_accepted(agents: k8s.CustomObjectsApi) -> None:
    body = _agent("valid", {"systemMessage": "You are helpful.", "modelConfig": "default"})
    agents.create_namespaced_custom_object(KAGENT, KAGENT_VERSION, NS, "agents", body)
    stored: dict[str, Any] = agents.get_namespaced_custom_object(  # type: ignore[assignment]
        KAGENT, KAGENT_VERSION, NS, "agents", "valid"
    )
    assert stored["spec"]["declarative"]["systemMessage"] == "You are helpful."


def test_agent_violating_upstream_schema_is_rejected(agents: k8s.CustomObjectsApi) -> None:
    body = _agent("wrong-type", {"systemMessage": "hi", "modelConfig": "default", "stream": "yes"})
    with pytest.raises(ApiException) as caught:
        agents.create_namespaced_custom_object(KAGENT, KAGENT_VERSION, NS, "agents", body)
    assert caught.value.status == 422
    message = _message(caught.value)
    assert "spec.declarative.stream" in message
    assert "boolean" in message


def test_rbac_denies_a_user_without_bindings(
    control_plane: LocalControlPlane, tmp_path: Path
) -> None:
    config = control_plane.write_kubeconfig(tmp_path / "kubeconfig", "nobody", ("nobodies",))
    api = k8s_config.new_client_from_config(  # type: ignore[no-untyped-call]
        config_file=str(config)
    )
    try:
        with pytest.raises(ApiException) as caught:
            k8s.CoreV1Api(api).list_namespace()
    finally:
        api.close()
    assert caught.value.status == 403
    message = _message(caught.value)
    assert 'User "nobody" cannot list resource "namespaces"' in message
