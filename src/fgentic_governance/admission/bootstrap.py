"""Self-bootstrapped webhook TLS, the way cert-manager's webhook does it.

The webhook keeps its CA and serving certificate in one Secret. On start, whenever the Secret
changes (a watch) and at least every WATCH_SECONDS, each replica makes sure the Secret holds a
valid pair for the Service's DNS names (creating it, or renewing it once two thirds of the
leaf's lifetime have passed), injects the CA bundle into our webhook configurations and only
then writes the files the TLS listener reads (which reloads them). Replicas race benignly: a
create that loses (409) adopts the winner's Secret; an update that loses (409) re-reads and
retries.

No fail-closed window at a rollover: a renewal mints a new CA and leaf and keeps the previous
CA in the bundle (``ca.crt`` holds both), so the API server trusts both the replicas that
already serve the new leaf and those that still serve the old one until their watch sees the
change.
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from fgentic_governance.serving.tls import CertificateAuthority

log = logging.getLogger("fgentic_governance.admission.bootstrap")
RENEW_AT: Final = 2 / 3
"""Renew once this fraction of the leaf's lifetime has passed (cert-manager's default)."""
WATCH_SECONDS: Final = 300


@dataclass(frozen=True)
class Target:
    namespace: str
    secret: str
    service: str
    webhook_config: str
    extra_hosts: tuple[str, ...] = ()

    @property
    def hosts(self) -> list[str]:
        svc = self.service
        return [f"{svc}.{self.namespace}.svc", f"{svc}.{self.namespace}", svc,
                f"{svc}.{self.namespace}.svc.cluster.local", *self.extra_hosts]


def renewal_due(cert: x509.Certificate, now: dt.datetime) -> bool:
    """Two thirds of the certificate's lifetime have passed."""
    start, end = cert.not_valid_before_utc, cert.not_valid_after_utc
    return now >= start + (end - start) * RENEW_AT


def _usable(data: dict[str, str] | None, hosts: list[str]) -> bool:
    """The Secret holds a pair for our names that is not yet due for renewal."""
    if not data or not {"tls.crt", "tls.key", "ca.crt"} <= data.keys():
        return False
    try:
        cert = x509.load_pem_x509_certificate(base64.b64decode(data["tls.crt"]))
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName)
        dns = set(names.value.get_values_for_type(x509.DNSName)) | {
            str(ip) for ip in names.value.get_values_for_type(x509.IPAddress)}
    except (ValueError, x509.ExtensionNotFound):
        return False
    return not renewal_due(cert, dt.datetime.now(dt.UTC)) and set(hosts) <= dns


def _current_ca(data: dict[str, str] | None) -> bytes:
    """The CA the Secret's leaf was issued by (the bundle's first), if it is still valid."""
    try:
        bundle = base64.b64decode((data or {}).get("ca.crt", ""))
        [first, *_] = x509.load_pem_x509_certificates(bundle)
    except ValueError:
        return b""
    if first.not_valid_after_utc <= dt.datetime.now(dt.UTC):
        return b""
    return first.public_bytes(serialization.Encoding.PEM)


def _generate(hosts: list[str], previous: dict[str, str] | None = None) -> dict[str, str]:
    """A new CA and leaf; the bundle keeps the CA of ``previous`` after the new one."""
    ca = CertificateAuthority("fgentic-governance-webhook-ca")
    leaf = ca.issue_server(hosts)
    bundle = ca.cert_pem + _current_ca(previous)
    return {"tls.crt": base64.b64encode(leaf.cert_pem).decode(),
            "tls.key": base64.b64encode(leaf.key_pem).decode(),
            "ca.crt": base64.b64encode(bundle).decode()}


def ensure_secret(core: client.CoreV1Api, target: Target) -> dict[str, str]:
    """The Secret's data after making sure it is usable (created or renewed if needed)."""
    for _ in range(5):
        try:
            secret = core.read_namespaced_secret(target.secret, target.namespace)
        except ApiException as exc:
            if exc.status != 404:
                raise
            body = client.V1Secret(metadata=client.V1ObjectMeta(name=target.secret),
                                   type="kubernetes.io/tls", data=_generate(target.hosts))
            try:
                core.create_namespaced_secret(target.namespace, body)
                log.info("webhook TLS secret created")
            except ApiException as race:
                if race.status != 409:
                    raise
            continue  # Read back whichever replica won.
        data = {k: str(v) for k, v in (secret.data or {}).items()}
        if _usable(data, target.hosts):
            return data
        secret.data = _generate(target.hosts, data)  # type: ignore[assignment]
        try:
            core.replace_namespaced_secret(target.secret, target.namespace, secret)
            log.info("webhook TLS secret renewed")
        except ApiException as race:
            if race.status != 409:
                raise
    raise RuntimeError("could not settle the webhook TLS secret")


def write_files(data: dict[str, str], tls_dir: Path) -> None:
    """Write only what changed: the listener reloads on modification."""
    tls_dir.mkdir(parents=True, exist_ok=True)
    for name in ("ca.crt", "tls.crt", "tls.key"):
        content = base64.b64decode(data[name])
        path = tls_dir / name
        if not path.exists() or path.read_bytes() != content:
            tmp = path.with_suffix(".tmp")
            tmp.write_bytes(content)
            tmp.replace(path)


def inject_ca(admission: client.AdmissionregistrationV1Api, target: Target, ca_b64: str) -> None:
    config = admission.read_validating_webhook_configuration(target.webhook_config)
    # "add" sets the member whether or not it is there (the chart renders none while empty).
    patch = [{"op": "add", "path": f"/webhooks/{i}/clientConfig/caBundle", "value": ca_b64}
             for i, hook in enumerate(config.webhooks or [])
             if hook.client_config.ca_bundle != ca_b64]
    if patch:
        admission.patch_validating_webhook_configuration(target.webhook_config, patch)
        log.info("CA injected into the webhook configuration")
    _inject_mutating(admission, target, ca_b64)


def _inject_mutating(admission: client.AdmissionregistrationV1Api, target: Target,
                     ca_b64: str) -> None:
    """The Pod routing's MutatingWebhookConfiguration (same name), when it is installed."""
    try:
        config = admission.read_mutating_webhook_configuration(target.webhook_config)
    except client.ApiException as exc:
        if exc.status == 404:
            return
        raise
    # "add" sets the member whether or not it is there (the chart renders none while empty).
    patch = [{"op": "add", "path": f"/webhooks/{i}/clientConfig/caBundle", "value": ca_b64}
             for i, hook in enumerate(config.webhooks or [])
             if hook.client_config.ca_bundle != ca_b64]
    if patch:
        admission.patch_mutating_webhook_configuration(target.webhook_config, patch)
        log.info("CA injected into the Pod routing configuration")


def settle(api_client: client.ApiClient, target: Target, tls_dir: Path) -> None:
    """The bundle is trusted before this replica serves a leaf it signs: inject, then write."""
    data = ensure_secret(client.CoreV1Api(api_client), target)
    inject_ca(client.AdmissionregistrationV1Api(api_client), target, data["ca.crt"])
    write_files(data, tls_dir)


def _watch_once(api_client: client.ApiClient, target: Target, tls_dir: Path) -> None:
    """Settle on every change of the Secret, for at most WATCH_SECONDS (then the caller
    settles anyway, which also renews a pair that came due without any change)."""
    core = client.CoreV1Api(api_client)
    stream = watch.Watch().stream(  # type: ignore[no-untyped-call]
        core.list_namespaced_secret, target.namespace,
        field_selector=f"metadata.name={target.secret}", timeout_seconds=WATCH_SECONDS,
        _request_timeout=WATCH_SECONDS + 30)
    for event in stream:
        if event["type"] in ("ADDED", "MODIFIED", "DELETED"):
            settle(api_client, target, tls_dir)


async def keep_settled(api_client: client.ApiClient, target: Target, tls_dir: Path) -> None:
    while True:
        try:
            await asyncio.to_thread(_watch_once, api_client, target, tls_dir)
            await asyncio.to_thread(settle, api_client, target, tls_dir)
        except Exception as exc:
            log.warning("TLS bootstrap check failed: %s", type(exc).__name__)
            await asyncio.sleep(5)
