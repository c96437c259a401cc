"""cert-manager-style TLS bootstrap: the webhook makes its own CA, keeps it in a Secret,
serves with it and injects it into our ValidatingWebhookConfiguration."""

from __future__ import annotations

import base64
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from fgentic_governance.admission.render import webhook_configuration
from tests.support import processes
from tests.support.objects import api_message, example

pytestmark = pytest.mark.integration


def _start(cp: Any, work: Path, ns: str, config_name: str, port: int) -> Any:
    return processes.spawn_and_wait(
        ["webhook", "--kubeconfig", str(cp.kubeconfig), "--tls-dir", str(work),
         "--host", "127.0.0.1", "--port", str(port), "--health-port",
         str(processes.free_port()), "--audit-interval", "0",
         "--bootstrap-secret", "webhook-tls", "--bootstrap-namespace", ns,
         "--bootstrap-webhook-config", config_name, "--bootstrap-host", "127.0.0.1"],
        work.parent / f"{work.name}.log", port)


def _configuration(admission: client.AdmissionregistrationV1Api, ns: str, port: int) -> str:
    """Our webhook configuration for a webhook on ``port``, for ``ns`` only, its name. The
    first hook has no CA (as the chart renders bootstrap mode), the other a placeholder: the
    bootstrap sets both."""
    config = webhook_configuration(f"boot-{uuid.uuid4().hex[:6]}", f"https://127.0.0.1:{port}",
                                   b"placeholder")
    del config["webhooks"][0]["clientConfig"]["caBundle"]
    for hook in config["webhooks"]:
        hook["namespaceSelector"] = {"matchLabels": {"kubernetes.io/metadata.name": ns}}
    admission.create_validating_webhook_configuration(config)
    return str(config["metadata"]["name"])


def test_bootstrap_creates_adopts_and_renews(control_plane: Any, k8s_client: client.ApiClient,
                                             tmp_path: Path) -> None:
    ns = f"boot-{uuid.uuid4().hex[:6]}"
    control_plane.ensure_namespace(ns)
    core = client.CoreV1Api(k8s_client)
    admission = client.AdmissionregistrationV1Api(k8s_client)
    port = processes.free_port()
    name = _configuration(admission, ns, port)
    first = _start(control_plane, tmp_path / "a", ns, name, port)
    try:
        secret = core.read_namespaced_secret("webhook-tls", ns)
        ca = secret.data["ca.crt"]
        hooks = admission.read_validating_webhook_configuration(name).webhooks
        assert all(h.client_config.ca_bundle == ca for h in hooks)
        agent = example("Agent")
        agent["metadata"] = {"name": "leaky", "namespace": ns}
        agent["spec"]["declarative"]["tools"][0]["mcpServer"]["allowedHeaders"] = ["Cookie"]
        with pytest.raises(ApiException) as info:  # Served with the bootstrapped chain.
            client.CustomObjectsApi(k8s_client).create_namespaced_custom_object(
                "kagent.dev", "v1alpha2", ns, "agents", agent)
        assert "FORBIDDEN_HEADER" in api_message(info.value)
    finally:
        processes.stop(first)
    # A second replica adopts the stored pair instead of minting its own.
    second = _start(control_plane, tmp_path / "b", ns, name, port)
    processes.stop(second)
    assert core.read_namespaced_secret("webhook-tls", ns).data["ca.crt"] == ca
    assert (tmp_path / "b" / "ca.crt").read_bytes() == base64.b64decode(ca)
    # A broken pair is renewed, and the new CA injected.
    secret = core.read_namespaced_secret("webhook-tls", ns)
    secret.data["tls.crt"] = base64.b64encode(b"not a certificate").decode()
    core.replace_namespaced_secret("webhook-tls", ns, secret)
    third = _start(control_plane, tmp_path / "c", ns, name, port)
    processes.stop(third)
    renewed = core.read_namespaced_secret("webhook-tls", ns).data["ca.crt"]
    assert renewed != ca
    deadline = time.monotonic() + 5
    while any(h.client_config.ca_bundle != renewed
              for h in admission.read_validating_webhook_configuration(name).webhooks):
        assert time.monotonic() < deadline
        time.sleep(0.1)
    admission.delete_validating_webhook_configuration(name)


def test_a_rollover_keeps_the_old_ca_and_reaches_running_replicas(
        control_plane: Any, k8s_client: client.ApiClient, tmp_path: Path) -> None:
    """Issue 27: a renewal mints a new CA and keeps the previous one in the bundle (so replicas
    still serving the old leaf stay trusted), and a running replica sees the Secret change
    through its watch within seconds (it used to re-read it hourly); the webhook keeps
    answering through the rollover."""
    ns = f"roll-{uuid.uuid4().hex[:6]}"
    control_plane.ensure_namespace(ns)
    core = client.CoreV1Api(k8s_client)
    admission = client.AdmissionregistrationV1Api(k8s_client)
    port = processes.free_port()
    name = _configuration(admission, ns, port)
    running = _start(control_plane, tmp_path / "a", ns, name, port)
    try:
        first = core.read_namespaced_secret("webhook-tls", ns).data
        # The pair becomes unusable (as one due for renewal is): the running replica's watch
        # sees the change and renews it at once, keeping the old CA in the bundle.
        secret = core.read_namespaced_secret("webhook-tls", ns)
        secret.data["tls.crt"] = base64.b64encode(b"not a certificate").decode()
        core.replace_namespaced_secret("webhook-tls", ns, secret)
        deadline = time.monotonic() + 15
        while True:
            renewed = core.read_namespaced_secret("webhook-tls", ns).data
            if renewed["tls.crt"] != secret.data["tls.crt"]:
                break
            assert time.monotonic() < deadline, "the running replica never saw the change"
            time.sleep(0.2)
        bundle = base64.b64decode(renewed["ca.crt"])
        assert bundle.endswith(base64.b64decode(first["ca.crt"]))  # the old CA kept, last
        assert bundle.count(b"BEGIN CERTIFICATE") == 2
        while (tmp_path / "a" / "ca.crt").read_bytes() != bundle:
            assert time.monotonic() < deadline, "the replica did not write the new files"
            time.sleep(0.2)
        assert all(h.client_config.ca_bundle == renewed["ca.crt"]
                   for h in admission.read_validating_webhook_configuration(name).webhooks)
        agent = example("Agent")
        agent["metadata"] = {"name": "leaky", "namespace": ns}
        agent["spec"]["declarative"]["tools"][0]["mcpServer"]["allowedHeaders"] = ["Cookie"]
        deadline = time.monotonic() + 15
        while True:  # served with the new chain (the listener reloads its files)
            with pytest.raises(ApiException) as info:
                client.CustomObjectsApi(k8s_client).create_namespaced_custom_object(
                    "kagent.dev", "v1alpha2", ns, "agents", agent)
            if "FORBIDDEN_HEADER" in api_message(info.value):
                break
            assert time.monotonic() < deadline, api_message(info.value)
            time.sleep(0.5)
    finally:
        processes.stop(running)
        admission.delete_validating_webhook_configuration(name)


def test_renewal_is_due_at_two_thirds_of_the_lifetime() -> None:

    from cryptography import x509

    from fgentic_governance.admission.bootstrap import renewal_due
    from fgentic_governance.serving.tls import CertificateAuthority

    leaf = x509.load_pem_x509_certificate(
        CertificateAuthority().issue_server(["x"]).cert_pem)
    start, end = leaf.not_valid_before_utc, leaf.not_valid_after_utc
    lifetime = end - start
    assert not renewal_due(leaf, start + lifetime * 0.66)
    assert renewal_due(leaf, start + lifetime * 0.67)
