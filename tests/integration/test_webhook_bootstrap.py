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
from tests.support.kube import replay
from tests.support.objects import api_message, example
from tests.support.polling import until

pytestmark = pytest.mark.integration


def _args(cp: Any, work: Path, ns: str, config_name: str, port: int, *,
          service: str = "fgentic-governance-webhook") -> list[str]:
    return ["webhook", "--kubeconfig", str(cp.kubeconfig), "--tls-dir", str(work),
            "--host", "127.0.0.1", "--port", str(port), "--health-port",
            str(processes.free_port()), "--audit-interval", "0", "--tls-reload-seconds", "0.5",
            "--bootstrap-secret", "webhook-tls", "--bootstrap-namespace", ns,
            "--bootstrap-webhook-config", config_name, "--bootstrap-service", service,
            "--bootstrap-host", "127.0.0.1"]


def _start(cp: Any, work: Path, ns: str, config_name: str, port: int) -> Any:
    return processes.spawn_and_wait(_args(cp, work, ns, config_name, port),
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
    # A broken leaf is re-issued by the same CA: the injected bundle does not change.
    secret = core.read_namespaced_secret("webhook-tls", ns)
    secret.data["tls.crt"] = base64.b64encode(b"not a certificate").decode()
    core.replace_namespaced_secret("webhook-tls", ns, secret)
    third = _start(control_plane, tmp_path / "c", ns, name, port)
    processes.stop(third)
    reissued = core.read_namespaced_secret("webhook-tls", ns).data
    assert reissued["ca.crt"] == ca and reissued["tls.crt"] != secret.data["tls.crt"]
    _verify(base64.b64decode(reissued["tls.crt"]), base64.b64decode(ca))
    # A Secret without its CA key (an earlier release's) gets a new CA, injected.
    secret = core.read_namespaced_secret("webhook-tls", ns)
    del secret.data["ca.key"]
    core.replace_namespaced_secret("webhook-tls", ns, secret)
    fourth = _start(control_plane, tmp_path / "d", ns, name, port)
    processes.stop(fourth)
    renewed = core.read_namespaced_secret("webhook-tls", ns).data["ca.crt"]
    assert renewed != ca
    until(lambda: [h.client_config.ca_bundle
                   for h in admission.read_validating_webhook_configuration(name).webhooks],
          "the renewed CA injected into every hook", 5, interval=0.1,
          holds=lambda bundles: all(b == renewed for b in bundles))
    admission.delete_validating_webhook_configuration(name)


def test_a_rollover_keeps_the_old_ca_and_reaches_running_replicas(
        control_plane: Any, k8s_client: client.ApiClient, tmp_path: Path) -> None:
    """Issue 27: a new CA keeps the previous one in the bundle (so replicas still serving the
    old leaf stay trusted), and a running replica sees the Secret change through its watch
    within seconds (it used to re-read it hourly); the webhook keeps answering through the
    rollover. (Since issue 36 a new CA is minted only when the stored one is unusable.)"""
    ns = f"roll-{uuid.uuid4().hex[:6]}"
    control_plane.ensure_namespace(ns)
    core = client.CoreV1Api(k8s_client)
    admission = client.AdmissionregistrationV1Api(k8s_client)
    port = processes.free_port()
    name = _configuration(admission, ns, port)
    running = _start(control_plane, tmp_path / "a", ns, name, port)
    try:
        first = core.read_namespaced_secret("webhook-tls", ns).data
        # The CA becomes unusable (as one due for renewal is; here its key is gone): the
        # running replica's watch sees the change and mints a new CA and leaf at once,
        # keeping the old CA in the bundle.
        secret = core.read_namespaced_secret("webhook-tls", ns)
        del secret.data["ca.key"]
        core.replace_namespaced_secret("webhook-tls", ns, secret)
        renewed = until(lambda: core.read_namespaced_secret("webhook-tls", ns).data,
                        "the running replica to see the change and re-issue", 15,
                        holds=lambda data: data["tls.crt"] != secret.data["tls.crt"])
        bundle = base64.b64decode(renewed["ca.crt"])
        assert bundle.endswith(base64.b64decode(first["ca.crt"]))  # the old CA kept, last
        assert bundle.count(b"BEGIN CERTIFICATE") == 2
        until(lambda: (tmp_path / "a" / "ca.crt").read_bytes() == bundle,
              "the replica to write the new files", 15)
        assert all(h.client_config.ca_bundle == renewed["ca.crt"]
                   for h in admission.read_validating_webhook_configuration(name).webhooks)
        agent = example("Agent")
        agent["metadata"] = {"name": "leaky", "namespace": ns}
        agent["spec"]["declarative"]["tools"][0]["mcpServer"]["allowedHeaders"] = ["Cookie"]

        def refusal() -> str:
            with pytest.raises(ApiException) as info:
                client.CustomObjectsApi(k8s_client).create_namespaced_custom_object(
                    "kagent.dev", "v1alpha2", ns, "agents", agent)
            return api_message(info.value)

        # Served with the new chain (the listener reloads its files): our refusal, not TLS's.
        until(refusal, "the webhook's refusal under the new chain", 15, interval=0.5,
              holds=lambda message: "FORBIDDEN_HEADER" in message)
    finally:
        processes.stop(running)
        admission.delete_validating_webhook_configuration(name)


def _verify(leaf_pem: bytes, bundle_pem: bytes) -> None:
    """The leaf was issued by a CA of the bundle (ValueError or InvalidSignature otherwise)."""
    from cryptography import x509

    leaf = x509.load_pem_x509_certificate(leaf_pem)
    cas = x509.load_pem_x509_certificates(bundle_pem)
    failures = []
    for ca in cas:
        try:
            leaf.verify_directly_issued_by(ca)
            return
        except Exception as exc:
            failures.append(exc)
    raise AssertionError(f"the leaf chains to none of {len(cas)} CAs: {failures!r}")


def _events(list_call: Any, *args: Any, name: str, since: str) -> list[Any]:
    """Every change of object ``name`` after resourceVersion ``since``."""
    return replay(list_call, *args, since=since, field_selector=f"metadata.name={name}")


def _handshake(port: int, bundle: bytes, host: str) -> bool:
    """Whether the replica on ``port`` serves a leaf that verifies for ``host`` against
    ``bundle`` (as the API server checks it: chain and name)."""
    import socket
    import ssl

    context = ssl.create_default_context(cadata=bundle.decode())
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, \
                context.wrap_socket(raw, server_hostname=host):
            return True
    except ssl.SSLCertVerificationError:
        return False


def test_replicas_with_different_names_share_one_ca_and_settle(
        control_plane: Any, k8s_client: client.ApiClient, tmp_path: Path) -> None:
    """Issue 36 §2: two replicas whose names differ (a renamed Service, two releases sharing
    the Secret) each minted a CA and leaf for their own names, about 95 times a second; the
    caBundle flapped and no served leaf chained to the bundle injected a moment before. Now
    they share one CA and a leaf for both names: started together, they settle after a
    bounded number of writes, the bundles never change after the first injection, and every
    leaf either serves verifies against every injected bundle, for every name."""
    from fgentic_devenv import wait_until
    from fgentic_devenv.up import port_open

    ns = f"names-{uuid.uuid4().hex[:6]}"
    control_plane.ensure_namespace(ns)
    core = client.CoreV1Api(k8s_client)
    admission = client.AdmissionregistrationV1Api(k8s_client)
    ports = {"a": processes.free_port(), "b": processes.free_port()}
    configs = {r: _configuration(admission, ns, port) for r, port in ports.items()}
    since_secret = core.list_namespaced_secret(ns).metadata.resource_version
    since_config = admission.list_validating_webhook_configuration().metadata.resource_version
    replicas = {r: processes.spawn_cli(_args(control_plane, tmp_path / r, ns, configs[r],
                                             ports[r], service=f"webhook-{r}"),
                                       tmp_path / f"{r}.log") for r in ports}
    names = {"127.0.0.1", *(f"webhook-{r}.{ns}.svc" for r in ports)}
    try:
        for r, proc in replicas.items():
            wait_until(lambda r=r: port_open(ports[r]), proc, what=r, log=tmp_path / f"{r}.log",
                       timeout=60)

        def bundles() -> list[bytes]:
            return [base64.b64decode(h.client_config.ca_bundle) for name in configs.values()
                    for h in admission.read_validating_webhook_configuration(name).webhooks]

        def served_everywhere() -> bool:
            return all(_handshake(port, bundle, host) for port in ports.values()
                       for bundle in bundles() for host in names)

        until(served_everywhere, "every replica serving a leaf for every name", 60,
              tolerate=(Exception,))  # a placeholder or no bundle until injected
        # Settled: later samples still verify, through the API server too (both replicas'
        # configurations call them; a safe Agent needs both answers).
        for _ in range(5):
            assert all(_handshake(port, bundle, "127.0.0.1") for port in ports.values()
                       for bundle in bundles())
            time.sleep(0.5)
        agent = example("Agent")
        agent["metadata"] = {"name": "safe", "namespace": ns}
        client.CustomObjectsApi(k8s_client).create_namespaced_custom_object(
            "kagent.dev", "v1alpha2", ns, "agents", agent)
        secret = core.read_namespaced_secret("webhook-tls", ns).data
        writes = _events(core.list_namespaced_secret, ns, name="webhook-tls", since=since_secret)
        injected = {r: [tuple(h.client_config.ca_bundle for h in c.webhooks)
                        for c in _events(admission.list_validating_webhook_configuration,
                                         name=name, since=since_config)]
                    for r, name in configs.items()}
    finally:
        for proc in replicas.values():
            processes.stop(proc)
        for name in configs.values():
            admission.delete_validating_webhook_configuration(name)
    # One create, then at most one write per replica adding its names (on the old code:
    # hundreds within the wait above).
    assert 1 <= len(writes) <= 1 + len(replicas), len(writes)
    assert base64.b64decode(secret["ca.crt"]).count(b"BEGIN CERTIFICATE") == 1  # one CA
    # Each configuration: created without a bundle (or a placeholder), then given the one
    # CA's and kept (on the old code: a new bundle with every write).
    placeholder = base64.b64encode(b"placeholder").decode()
    for r, history in injected.items():
        bundles_seen = {b for hooks in history for b in hooks if b and b != placeholder}
        assert bundles_seen == {secret["ca.crt"]}, (r, len(bundles_seen))


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
