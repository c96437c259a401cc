"""The webhook serves TLS from certificates made with `cryptography` (not Kopf's generator),
and the real API server calls it through our own ValidatingWebhookConfiguration."""

from __future__ import annotations

import base64
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from fgentic_governance.admission.render import webhook_configuration
from fgentic_governance.serving.tls import write_serving_bundle
from tests.support import processes
from tests.support.objects import api_message, example
from tests.support.polling import until

pytestmark = pytest.mark.integration
NS = "webhook-tls"


@pytest.fixture(scope="module")
def webhook(control_plane: Any, tmp_path_factory: pytest.TempPathFactory,
            k8s_client: client.ApiClient) -> Iterator[dict[str, Any]]:
    control_plane.ensure_namespace(NS)
    work: Path = tmp_path_factory.mktemp("webhook")
    _, _, ca_path = write_serving_bundle(work / "tls", ["127.0.0.1", "localhost"])
    port, health_port = processes.free_port(), processes.free_port()
    log = work / "webhook.log"
    proc = processes.spawn_and_wait(
        ["webhook", "--kubeconfig", str(control_plane.kubeconfig), "--tls-dir",
         str(work / "tls"), "--host", "127.0.0.1", "--port", str(port),
         "--health-port", str(health_port), "--tls-reload-seconds", "0.5"], log, port)
    admission = client.AdmissionregistrationV1Api(k8s_client)
    name = f"fgentic-test-{uuid.uuid4().hex[:6]}"
    config = webhook_configuration(name, f"https://127.0.0.1:{port}", ca_path.read_bytes())
    # Only this test's namespace: other tests create objects without a webhook running.
    for hook in config["webhooks"]:
        hook["namespaceSelector"] = {"matchLabels": {"kubernetes.io/metadata.name": NS}}
    admission.create_validating_webhook_configuration(config)
    yield {"proc": proc, "log": log, "port": port, "health_port": health_port,
           "tls": work / "tls", "config": config}
    processes.stop(proc)
    admission.delete_validating_webhook_configuration(name)


def _agent(headers: list[str] | None = None) -> dict[str, Any]:
    agent = example("Agent")
    agent["metadata"] = {"name": f"agent-{uuid.uuid4().hex[:8]}", "namespace": NS}
    if headers is not None:
        agent["spec"]["declarative"]["tools"][0]["mcpServer"]["allowedHeaders"] = headers
    return agent


def _create(k8s_client: client.ApiClient, agent: dict[str, Any]) -> dict[str, Any]:
    return client.CustomObjectsApi(k8s_client).create_namespaced_custom_object(  # type: ignore[no-any-return]
        "kagent.dev", "v1alpha2", NS, "agents", agent)


def test_safe_agent_is_admitted(webhook: dict[str, Any], k8s_client: client.ApiClient) -> None:
    assert _create(k8s_client, _agent())["metadata"]["uid"]


def test_authorization_propagation_is_denied_through_the_api_server(
    webhook: dict[str, Any], k8s_client: client.ApiClient
) -> None:
    with pytest.raises(ApiException) as info:
        _create(k8s_client, _agent(["Authorization"]))
    message = api_message(info.value)
    assert info.value.status == 403
    assert 'admission webhook "agents.governance.fgentic.dev" denied the request' in message
    assert "FORBIDDEN_HEADER" in message and "authorization" in message


def _served_certificate(port: int) -> bytes:
    import ssl

    pem = ssl.get_server_certificate(("127.0.0.1", port))
    return pem.encode()


def test_health_readiness_and_metrics(webhook: dict[str, Any],
                                      k8s_client: client.ApiClient) -> None:
    import urllib.request

    base = f"http://127.0.0.1:{webhook['health_port']}"
    assert urllib.request.urlopen(f"{base}/healthz", timeout=5).read() == b"ok"
    assert urllib.request.urlopen(f"{base}/readyz", timeout=5).status == 200
    with pytest.raises(ApiException):
        _create(k8s_client, _agent(["Cookie"]))
    metrics = urllib.request.urlopen(f"{base}/metrics", timeout=5).read().decode()
    assert 'fgentic_admission_decisions_total{allowed="false",reason="FORBIDDEN_HEADER",' \
           'webhook="agents"}' in metrics
    assert "fgentic_admission_review_seconds_bucket" in metrics
    assert NS not in metrics and "agent-" not in metrics  # No object names in labels.


def test_certificate_is_reloaded_when_the_files_change(webhook: dict[str, Any],
                                                       k8s_client: client.ApiClient) -> None:

    before = _served_certificate(webhook["port"])
    tls: Path = webhook["tls"]
    _, _, ca = write_serving_bundle(tls, ["127.0.0.1", "localhost"])  # A new CA and leaf.
    bundle = base64.b64encode(ca.read_bytes()).decode()
    patch = [{"op": "replace", "path": f"/webhooks/{i}/clientConfig/caBundle", "value": bundle}
             for i in range(len(webhook["config"]["webhooks"]))]
    client.AdmissionregistrationV1Api(k8s_client).patch_validating_webhook_configuration(
        webhook["config"]["metadata"]["name"], patch)
    until(lambda: _served_certificate(webhook["port"]), "the renewed certificate served", 20,
          holds=lambda served: served != before)
    assert _served_certificate(webhook["port"]) == (tls / "tls.crt").read_bytes()
    # And the API server (trusting only the new CA) still reaches it.
    with pytest.raises(ApiException) as info:
        _create(k8s_client, _agent(["Authorization"]))
    assert "FORBIDDEN_HEADER" in api_message(info.value)


def test_with_a_client_ca_only_the_api_servers_certificate_is_answered(
        control_plane: Any, tmp_path: Path) -> None:
    """N9: the review port answered any client, and every client that reaches it takes a
    share of the review budget. With --client-ca-file only a client certificate of that CA
    (the API server's, from its admission kubeconfig) completes the handshake."""
    import json
    import ssl
    import urllib.request

    from fgentic_governance.serving.tls import CertificateAuthority

    _, _, server_ca = write_serving_bundle(tmp_path / "tls", ["127.0.0.1"])
    api_server = CertificateAuthority("api-server-clients")
    (tmp_path / "client-ca.crt").write_bytes(api_server.cert_pem)
    api_server.issue_client("kube-apiserver").write(tmp_path / "ok.crt", tmp_path / "ok.key")
    CertificateAuthority("stranger").issue_client("kube-apiserver").write(
        tmp_path / "other.crt", tmp_path / "other.key")
    port = processes.free_port()
    proc = processes.spawn_and_wait(
        ["webhook", "--kubeconfig", str(control_plane.kubeconfig), "--tls-dir",
         str(tmp_path / "tls"), "--host", "127.0.0.1", "--port", str(port), "--health-port",
         str(processes.free_port()), "--audit-interval", "0", "--client-ca-file",
         str(tmp_path / "client-ca.crt")], tmp_path / "webhook.log", port)
    body = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                       "request": {"uid": "u-1", "operation": "CREATE",
                                   "object": _agent()}}).encode()

    def review(pair: str | None) -> dict[str, Any]:
        context = ssl.create_default_context(cafile=str(server_ca))
        if pair is not None:
            context.load_cert_chain(tmp_path / f"{pair}.crt", tmp_path / f"{pair}.key")
        request = urllib.request.Request(f"https://127.0.0.1:{port}/agents", data=body,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, context=context, timeout=10) as answer:
            return json.load(answer)  # type: ignore[no-any-return]

    try:
        assert review("ok")["response"] == {"uid": "u-1", "allowed": True}
        for pair in (None, "other"):  # No certificate; one of another CA.
            with pytest.raises(OSError):  # ssl.SSLError, a reset, or urllib's URLError
                review(pair)
    finally:
        processes.stop(proc)


def test_stopped_webhook_fails_closed(
    webhook: dict[str, Any], k8s_client: client.ApiClient
) -> None:
    processes.stop(webhook["proc"])
    with pytest.raises(ApiException) as info:
        _create(k8s_client, _agent())
    assert info.value.status == 500
    assert "failed calling webhook" in api_message(info.value)
