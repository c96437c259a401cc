"""Self-bootstrapped webhook TLS, the way cert-manager's webhook does it.

The webhook keeps one CA (its key ``ca.key``; the bundle ``ca.crt``, the CA first) and one
serving pair (``tls.crt``, ``tls.key``) in one Secret. On start, whenever the Secret changes (a
watch) and at least every WATCH_SECONDS, each replica makes sure the Secret holds a pair for its
own names, injects the bundle into our webhook configurations and only then writes the files
the TLS listener reads (which reloads them).

Replicas whose names differ (a rollout that renames the Service or ``--bootstrap-host``, two
releases sharing the Secret) converge instead of taking the Secret from each other in turn
(issue 36 §2: each minted a CA and leaf for its own names, ~95 times a second, and no served
leaf chained to the bundle injected a moment before):

- One CA per Secret. A leaf that lacks a replica's names, is due for renewal or broken is
  re-issued by the stored CA: ``ca.crt``, the injected caBundle, does not change for a leaf. A
  new CA is minted only when the stored one is missing (a Secret of an earlier release), broken
  or itself due for renewal.
- A leaf's names are the union of the stored leaf's and the replica's own. Every write adds
  a missing name and none drops one, so replicas with different names settle after at most one
  write each, and every replica serves a leaf valid for every name (a renamed Service's
  replicas may still be reached through the old name, and the old ones through the new). A
  replica refusing a Secret it does not own would instead leave its own name unserved: every
  review through it would fail until the others were gone. Names of replicas long gone stay in
  the leaf; they widen only what our own CA, trusted by our own configurations alone, vouches
  for.
- A write that loses (409) re-reads and retries: at most MAX_ATTEMPTS attempts, with jittered
  exponential backoff. A replica's writes are also paced (:class:`Pacer`), so a writer we cannot
  converge with (an earlier release with names of its own) costs a write every PACE_CAP seconds,
  not a hundred a second.
- A new CA keeps every earlier CA that is still valid (KEPT_CAS at most) after it in the
  bundle, so the API server trusts both the replicas that already serve a leaf of the new CA
  and those still serving an older one until their watch sees the change.
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from fgentic_governance.api.common import MANAGED_BY
from fgentic_governance.kube.client import request
from fgentic_governance.kube.failures import RequestFailed, named
from fgentic_governance.serving.tls import CertificateAuthority, pair_matches

log = logging.getLogger("fgentic_governance.admission.bootstrap")
RENEW_AT: Final = 2 / 3
"""Renew once this fraction of a certificate's lifetime has passed (cert-manager's default)."""
WATCH_SECONDS: Final = 300
REQUEST_SECONDS: Final = 10
"""Bound of each read and write of the Secret and the webhook configurations."""
_LABELS: Final = dict([MANAGED_BY])
MAX_ATTEMPTS: Final = 5
"""Reads of the Secret per settle: a write that lost (409) is retried after a re-read."""
BACKOFF_BASE: Final = 0.1
BACKOFF_CAP: Final = 2.0
"""Seconds before the retry of a lost write: BACKOFF_BASE doubling, at most BACKOFF_CAP, jittered
(replicas that lost the same round do not collide again)."""
PACE_BASE: Final = 0.5
PACE_CAP: Final = 30.0
PACE_QUIET: Final = 300.0
"""A replica's writes in a row wait PACE_BASE doubling up to PACE_CAP seconds before each; the
streak ends after PACE_QUIET seconds without a write (settling takes one or two writes)."""
KEPT_CAS: Final = 4
"""CAs in the bundle at most: the current one and the newest still-valid earlier ones."""
CA_NAME: Final = "fgentic-governance-webhook-ca"
KEYS: Final = ("ca.crt", "ca.key", "tls.crt", "tls.key")
VALIDATING: Final = "validatingwebhookconfigurations"
MUTATING: Final = "mutatingwebhookconfigurations"


@dataclass(frozen=True)
class Target:
    namespace: str
    secret: str
    service: str
    webhook_config: str
    extra_hosts: tuple[str, ...] = ()
    pod_routing: bool = False
    """The Pod routing's MutatingWebhookConfiguration (the memory API's) is ours to inject.
    Without the memory API the chart renders neither it nor the right to read it, and a 403
    for a read we do not need crash-looped the webhook (issue 37 §1): it is not read at all."""

    @property
    def secret_resource(self) -> str:
        return named("secrets", self.secret, self.namespace)

    @property
    def hosts(self) -> list[str]:
        svc = self.service
        return [f"{svc}.{self.namespace}.svc", f"{svc}.{self.namespace}", svc,
                f"{svc}.{self.namespace}.svc.cluster.local", *self.extra_hosts]


def renewal_due(cert: x509.Certificate, now: dt.datetime) -> bool:
    """Two thirds of the certificate's lifetime have passed."""
    start, end = cert.not_valid_before_utc, cert.not_valid_after_utc
    return now >= start + (end - start) * RENEW_AT


class Pacer:
    """Spaces one replica's writes to the Secret (see PACE_BASE)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self._clock, self._sleep = clock, sleep
        self._streak, self._last = 0, -PACE_QUIET

    def before_write(self) -> None:
        if self._clock() - self._last >= PACE_QUIET:
            self._streak = 0
        if self._streak:
            delay = min(PACE_CAP, PACE_BASE * 2.0 ** (self._streak - 1))
            log.warning("webhook TLS secret written %d times in a row; next write in %.1f s",
                        self._streak, delay)
            self._sleep(delay)

    def wrote(self) -> None:
        self._streak, self._last = self._streak + 1, self._clock()


# -- what the Secret holds ---------------------------------------------------------------------


def _decoded(data: dict[str, str], key: str) -> bytes:
    return base64.b64decode(data.get(key, ""))


def _bundle(data: dict[str, str]) -> list[x509.Certificate]:
    try:
        return x509.load_pem_x509_certificates(_decoded(data, "ca.crt"))
    except ValueError:
        return []


def _authority(data: dict[str, str], now: dt.datetime) -> CertificateAuthority | None:
    """The stored CA (the bundle's first, with its key) while it is not due for renewal."""
    bundle = _bundle(data)
    if not bundle:
        return None
    try:
        ca = CertificateAuthority.from_pem(bundle[0].public_bytes(serialization.Encoding.PEM),
                                           _decoded(data, "ca.key"))
    except ValueError:
        return None
    return None if renewal_due(ca.certificate, now) else ca


def _leaf(data: dict[str, str]) -> x509.Certificate | None:
    try:
        return x509.load_pem_x509_certificate(_decoded(data, "tls.crt"))
    except ValueError:
        return None


def _names(leaf: x509.Certificate | None) -> list[str]:
    """The leaf's DNS names and IP addresses (none for a missing or unreadable leaf)."""
    if leaf is None:
        return []
    try:
        sans = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return []
    return [*sans.get_values_for_type(x509.DNSName),
            *(str(ip) for ip in sans.get_values_for_type(x509.IPAddress))]


def _serves(data: dict[str, str], ca: CertificateAuthority, hosts: list[str],
            now: dt.datetime) -> bool:
    """The stored pair is the CA's, for (at least) ``hosts``, and not due for renewal."""
    leaf = _leaf(data)
    return leaf is not None and ca.signed(leaf) and not renewal_due(leaf, now) \
        and set(hosts) <= set(_names(leaf)) and pair_matches(leaf, _decoded(data, "tls.key"))


def _pem(certs: list[x509.Certificate]) -> bytes:
    return b"".join(c.public_bytes(serialization.Encoding.PEM) for c in certs)


def planned(data: dict[str, str] | None, hosts: list[str]) -> dict[str, str] | None:
    """The Secret's new data for a replica serving ``hosts``, or None when it already serves
    them. A new CA only when the stored one is unusable; the leaf for the union of names."""
    stored = data or {}
    now = dt.datetime.now(dt.UTC)
    ca = _authority(stored, now)
    if ca is not None and _serves(stored, ca, hosts, now):
        return None
    if ca is None:
        ca = CertificateAuthority(CA_NAME)
        earlier = [c for c in _bundle(stored) if c.not_valid_after_utc > now]
        bundle = ca.cert_pem + _pem(earlier[:KEPT_CAS - 1])
        log.info("webhook TLS secret: new CA (%s)", "created" if data is None else "replaced")
    else:
        bundle = _decoded(stored, "ca.crt")  # unchanged: the injected caBundle stays
    names = list(dict.fromkeys([*hosts, *_names(_leaf(stored))]))
    leaf = ca.issue_server(names)
    return {"ca.crt": base64.b64encode(bundle).decode(),
            "ca.key": base64.b64encode(ca.keypair.key_pem).decode(),
            "tls.crt": base64.b64encode(leaf.cert_pem).decode(),
            "tls.key": base64.b64encode(leaf.key_pem).decode()}


# -- the Secret --------------------------------------------------------------------------------


def _backoff(attempt: int) -> float:
    return min(BACKOFF_CAP, BACKOFF_BASE * 2.0 ** attempt) * random.uniform(0.5, 1.0)  # noqa: S311


def ensure_secret(core: client.CoreV1Api, target: Target,
                  pacer: Pacer | None = None) -> dict[str, str]:
    """The Secret's data after making sure it serves this replica's names (created, or its
    leaf or CA replaced, only when needed)."""
    lost: tuple[str, ApiException] | None = None
    for attempt in range(MAX_ATTEMPTS):
        try:
            with request("get", target.secret_resource, expected=(404,)):
                secret = core.read_namespaced_secret(target.secret, target.namespace,
                                                     _request_timeout=REQUEST_SECONDS)
        except ApiException:  # 404 only (``request`` turns any other answer into a failure)
            secret = None
        data = None if secret is None else {k: str(v) for k, v in (secret.data or {}).items()}
        new = planned(data, target.hosts)
        if new is None:
            return data or {}
        if pacer is not None:
            pacer.before_write()
        verb = "create" if secret is None else "update"
        try:
            with request(verb, target.secret_resource, expected=(409,)):
                _write(core, target, secret, new)
        except ApiException as race:  # 409 only: another replica wrote first
            lost = (verb, race)
            time.sleep(_backoff(attempt))  # read what it wrote
            continue
        if pacer is not None:
            pacer.wrote()
        return new
    assert lost is not None  # every attempt that did not return lost a race
    raise RequestFailed(lost[0], target.secret_resource, lost[1])


def _write(core: client.CoreV1Api, target: Target, secret: client.V1Secret | None,
           data: dict[str, str]) -> None:
    """Create the Secret, or replace it at the resourceVersion read (a concurrent writer: 409)."""
    if secret is None:
        body = client.V1Secret(metadata=client.V1ObjectMeta(name=target.secret, labels=_LABELS),
                               type="kubernetes.io/tls", data=data)
        core.create_namespaced_secret(target.namespace, body, _request_timeout=REQUEST_SECONDS)
        log.info("webhook TLS secret created")
        return
    secret.data = {**(secret.data or {}), **data}
    # One of an earlier release gains the label, so the removal recipe finds it.
    if secret.metadata is not None:
        secret.metadata.labels = {**(secret.metadata.labels or {}), **_LABELS}
    core.replace_namespaced_secret(target.secret, target.namespace, secret,
                                   _request_timeout=REQUEST_SECONDS)
    log.info("webhook TLS secret updated")


def write_files(data: dict[str, str], tls_dir: Path) -> None:
    """Write only what changed: the listener reloads on modification. The CA key stays in the
    Secret."""
    tls_dir.mkdir(parents=True, exist_ok=True)
    for name in ("ca.crt", "tls.crt", "tls.key"):
        content = base64.b64decode(data[name])
        path = tls_dir / name
        if not path.exists() or path.read_bytes() != content:
            tmp = path.with_suffix(".tmp")
            tmp.write_bytes(content)
            tmp.replace(path)


def _ca_patch(config: Any, ca_b64: str) -> list[dict[str, str]]:
    # "add" sets the member whether or not it is there (the chart renders none while empty).
    return [{"op": "add", "path": f"/webhooks/{i}/clientConfig/caBundle", "value": ca_b64}
            for i, hook in enumerate(config.webhooks or [])
            if hook.client_config.ca_bundle != ca_b64]


def inject_ca(admission: client.AdmissionregistrationV1Api, target: Target, ca_b64: str) -> None:
    """Into our ValidatingWebhookConfiguration and, with the Pod routing, its mutating one."""
    what = named(VALIDATING, target.webhook_config)
    with request("get", what):
        config = admission.read_validating_webhook_configuration(
            target.webhook_config, _request_timeout=REQUEST_SECONDS)
    patch = _ca_patch(config, ca_b64)
    if patch:
        with request("patch", what):
            admission.patch_validating_webhook_configuration(
                target.webhook_config, patch, _request_timeout=REQUEST_SECONDS)
        log.info("CA injected into the webhook configuration")
    if target.pod_routing:
        _inject_mutating(admission, target, ca_b64)


def _inject_mutating(admission: client.AdmissionregistrationV1Api, target: Target,
                     ca_b64: str) -> None:
    """The Pod routing's MutatingWebhookConfiguration (same name). Not there yet (an install
    still applying it, a configuration rendered by hand without it): nothing to inject, and
    memory-enabled Agents' Pods stay refused by the validating hooks until it is. A refused
    read fails: the Pod routing is on and its configuration would never get our CA."""
    what = named(MUTATING, target.webhook_config)
    try:
        with request("get", what, expected=(404,)):
            config = admission.read_mutating_webhook_configuration(
                target.webhook_config, _request_timeout=REQUEST_SECONDS)
    except ApiException:
        log.warning("%s not found: the Pod routing has no CA yet", what)
        return
    patch = _ca_patch(config, ca_b64)
    if patch:
        with request("patch", what):
            admission.patch_mutating_webhook_configuration(
                target.webhook_config, patch, _request_timeout=REQUEST_SECONDS)
        log.info("CA injected into the Pod routing configuration")


def settle(api_client: client.ApiClient, target: Target, tls_dir: Path,
           pacer: Pacer | None = None) -> None:
    """The bundle is trusted before this replica serves a leaf it signs: inject, then write."""
    data = ensure_secret(client.CoreV1Api(api_client), target, pacer)
    inject_ca(client.AdmissionregistrationV1Api(api_client), target, data["ca.crt"])
    write_files(data, tls_dir)


def _watch_once(api_client: client.ApiClient, target: Target, tls_dir: Path,
                pacer: Pacer) -> None:
    """Settle on every change of the Secret, for at most WATCH_SECONDS (then the caller
    settles anyway, which also renews a pair that came due without any change)."""
    core = client.CoreV1Api(api_client)
    stream = watch.Watch().stream(  # type: ignore[no-untyped-call]
        core.list_namespaced_secret, target.namespace,
        field_selector=f"metadata.name={target.secret}", timeout_seconds=WATCH_SECONDS,
        _request_timeout=WATCH_SECONDS + 30)
    for event in stream:
        if event["type"] in ("ADDED", "MODIFIED", "DELETED"):
            settle(api_client, target, tls_dir, pacer)


async def keep_settled(api_client: client.ApiClient, target: Target, tls_dir: Path,
                       pacer: Pacer | None = None) -> None:
    pacer = pacer or Pacer()
    while True:
        try:
            await asyncio.to_thread(_watch_once, api_client, target, tls_dir, pacer)
            await asyncio.to_thread(settle, api_client, target, tls_dir, pacer)
        except RequestFailed as exc:
            log.warning("TLS bootstrap check failed: %s", exc)
            await asyncio.sleep(5)
        except Exception as exc:
            log.warning("TLS bootstrap check failed: %s", type(exc).__name__)
            await asyncio.sleep(5)
