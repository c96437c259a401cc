"""The admission webhook process.

Reviews are served over TLS by our own listener on the shared content-free server
(``fgentic_governance.serving.http``): ``POST /agents`` and ``POST /governance`` go to the
:class:`Reviewer`; any other path is 404 and counted under the fixed route label ``other``.
Certificates are files (written by ``bootstrap`` or mounted by the chart), polled for changes
and swapped in for new connections (hot reload). Kopf is not used here: its webhook server
took its metric labels from the request path, kept aiohttp's 1 MiB body limit and its own
timeouts; our configuration (``admission/render.py``, the chart) is not Kopf's
either.

Health, readiness and metrics are plain HTTP on a separate port, on the same server base.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import functools
import json
import logging
import socket
import ssl
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from aiohttp import web
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from fgentic_governance.admission import audit, bootstrap, enforcement, metrics
from fgentic_governance.admission.informer import Informer
from fgentic_governance.admission.policy import AdmissionCode, PolicyState
from fgentic_governance.admission.review import (
    Lookups,
    MemoryRouting,
    Reviewer,
    Unanswerable,
    count_malformed,
)
from fgentic_governance.admission.views import build_state
from fgentic_governance.api import kagent
from fgentic_governance.api.common import GROUP, VERSION
from fgentic_governance.api.registry import MEMORY_SCOPE, PRINCIPAL_OFFBOARDING, RETRIEVAL_BINDING
from fgentic_governance.kube import client as kube_client
from fgentic_governance.kube.lease import LeaseElector, parse_lease
from fgentic_governance.serving import http as serving
from fgentic_governance.serving import process, strict_json

log = logging.getLogger("fgentic_governance.admission")
access = logging.getLogger("fgentic_governance.admission.access")

ETCD_MAX_OBJECT_BYTES: Final = 3 * 512 * 1024
"""etcd's default ``--max-request-bytes`` (1.5 MiB): no stored object (an oldObject) is larger."""
API_SERVER_MAX_BODY_BYTES: Final = 3 * 1024 * 1024
"""kube-apiserver's request body limit (3 MiB): a new object is reviewed before etcd sees it."""
REVIEW_ENVELOPE_BYTES: Final = 512 * 1024
"""uid, kind, resource, userInfo (groups, extra), options: far below this."""
MAX_REVIEW_BYTES: Final = API_SERVER_MAX_BODY_BYTES + ETCD_MAX_OBJECT_BYTES + REVIEW_ENVELOPE_BYTES
"""The largest review the API server can send: an UPDATE with a new object as large as a
request body, the stored old object, and the envelope (5 MiB). aiohttp's default 1 MiB refused
a label-only patch of a 640 KB Agent."""
BODY_BUDGET: Final = MAX_REVIEW_BYTES + 1024 * 1024
"""Review bytes held at once: one review of the largest size plus small ones. The chart limits
the webhook to 256 MiB (its pods measured ~155 MiB resident); a 5 MiB review made of many small JSON
objects takes about 40 MiB while parsed, so two at once could get it killed (fail closed:
every Agent write refused). A review over the budget is answered 503 BUSY instead. Bytes count
as they arrive (``serving.BodyBudget``), so a declared length alone holds nothing."""
SOURCE_BODY_BUDGET: Final = MAX_REVIEW_BYTES
"""Review bytes one source address may hold at once: the API server's largest review still
fits, and BODY_BUDGET - SOURCE_BODY_BUDGET (1 MiB) stays for every other source, so one
unauthenticated client sending slow bodies cannot refuse the API server's reviews. Where the
API server shares its address with other clients (host-network Pods on its node, a SNAT),
the chart's ``webhook.networkPolicy.apiServerSources`` is what keeps them apart."""
PATHS: Final = {f"/{route}": route for route in metrics.ROUTES}
"""The paths of our ValidatingWebhookConfiguration (``render.py`` here, the chart)."""


class StateSource:
    """Informer-backed caches plus live reads, for the reviewer and the audit."""

    def __init__(self, api_client: client.ApiClient) -> None:
        self.api = client.CustomObjectsApi(api_client)
        self.bindings = Informer(api_client, GROUP, VERSION, RETRIEVAL_BINDING.plural,
                                 self._rebuild)
        self.scopes = Informer(api_client, GROUP, VERSION, MEMORY_SCOPE.plural, self._rebuild)
        self._state: PolicyState | None = None

    def start(self) -> None:
        self.bindings.start()
        self.scopes.start()

    @property
    def synced(self) -> bool:
        return self.bindings.synced.is_set() and self.scopes.synced.is_set()

    def _rebuild(self) -> None:
        if self.synced:
            self._state = build_state(self.bindings.items(), self.scopes.items())

    def cached(self) -> PolicyState | None:
        return self._state

    async def live(self) -> PolicyState:
        bindings, scopes = await asyncio.gather(self._list(RETRIEVAL_BINDING.plural),
                                                self._list(MEMORY_SCOPE.plural))
        return build_state(bindings, scopes)

    async def _list(self, plural: str) -> list[dict[str, Any]]:
        listing: dict[str, Any] = await asyncio.to_thread(
            self.api.list_cluster_custom_object, GROUP, VERSION, plural)
        return list(listing.get("items", []))

    async def get_scope(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        try:
            return await asyncio.to_thread(self.api.get_namespaced_custom_object, GROUP,
                                           VERSION, namespace, MEMORY_SCOPE.plural, name)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    async def list_bindings(self) -> Sequence[Mapping[str, Any]]:
        return await self._list(RETRIEVAL_BINDING.plural)

    async def offboarding(self, subject: Mapping[str, Any]) -> bool:
        """Any PrincipalOffboarding for this exact principal refuses new consent."""
        items = await self._list(PRINCIPAL_OFFBOARDING.plural)
        return any((o.get("spec") or {}).get("principal") == dict(subject) for o in items)

    def lookups(self) -> Lookups:
        return Lookups(cached_state=self.cached, live_state=self.live,
                       get_scope=self.get_scope, list_bindings=self.list_bindings,
                       offboarding=self.offboarding)


# -- memory routing: kagent's runtime reaches memory only through the memory API ---------------

READY_SECONDS: Final = 1.0
READY_CACHE_SECONDS: Final = 5.0


class MemoryApiReadiness:
    """Whether the memory API answers ``GET /readyz`` with 200, asked at most every
    READY_CACHE_SECONDS with a READY_SECONDS bound; ``last`` is the latest answer (the audit's)."""

    def __init__(self, url: str) -> None:
        self._url = url.rstrip("/") + "/readyz"
        self._checked = -READY_CACHE_SECONDS
        self.last = False

    async def __call__(self) -> bool:
        now = asyncio.get_running_loop().time()
        if now - self._checked < READY_CACHE_SECONDS:
            return self.last
        import aiohttp

        ready = False
        try:
            timeout = aiohttp.ClientTimeout(total=READY_SECONDS)
            async with aiohttp.ClientSession(timeout=timeout) as session, \
                    session.get(self._url, allow_redirects=False) as answer:
                ready = answer.status == 200
        except (aiohttp.ClientError, TimeoutError, OSError):
            ready = False
        self._checked, self.last = now, ready
        return ready


def memory_routing(api_client: client.ApiClient, url: str, ready_url: str = "",
                   model_url: str = "") -> MemoryRouting | None:
    """The routing, or None when no memory API is configured (memory Agents are refused)."""
    if not url:
        return None
    custom = client.CustomObjectsApi(api_client)

    async def agents(namespace: str) -> Sequence[Mapping[str, Any]]:
        listing: dict[str, Any] = await asyncio.to_thread(
            custom.list_namespaced_custom_object, kagent.GROUP, kagent.VERSION, namespace,
            kagent.AGENT.plural, _request_timeout=2.0)
        return list(listing.get("items", []))

    async def model_config(namespace: str, name: str) -> Mapping[str, Any] | None:
        try:
            found: dict[str, Any] = await asyncio.to_thread(
                custom.get_namespaced_custom_object, kagent.GROUP, kagent.VERSION, namespace,
                kagent.MODEL_CONFIG.plural, name, _request_timeout=2.0)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return found

    return MemoryRouting(url, MemoryApiReadiness(ready_url or url), agents, model_url,
                         model_config)


# -- the review port ---------------------------------------------------------------------------


def _text(status: int, code: str) -> web.Response:
    return web.Response(status=status, text=code + "\n")


class ReviewService:
    """Fixed routes to the reviewer; every answer is counted and logged by bounded labels."""

    def __init__(self, reviewer: Reviewer) -> None:
        self._reviewer = reviewer
        self._budget = serving.BodyBudget(BODY_BUDGET, SOURCE_BODY_BUDGET)

    async def __call__(self, request: web.BaseRequest) -> web.StreamResponse:
        route = PATHS.get(request.path, metrics.OTHER)  # Never the path itself.
        answer = await self._answer(route, request)
        metrics.REQUESTS.labels(route, metrics.status_label(answer.status)).inc()
        access.info("review route=%s method=%s status=%d", route,
                    serving.method_label(request.method), answer.status)
        return answer

    async def _answer(self, route: str, request: web.BaseRequest) -> web.StreamResponse:
        if route == metrics.OTHER:
            return _text(404, "NOT_FOUND")
        if request.method != "POST":
            return _text(405, "METHOD_NOT_ALLOWED")
        try:
            with self._budget.hold(request) as holding:
                raw = await serving.read_body(request, MAX_REVIEW_BYTES, holding=holding)
                return await self._review(route, raw)
        except strict_json.Refused as refused:
            answer = _text(refused.status, refused.code.value)
            answer.force_close()  # The rest of the body is not worth waiting for.
            return answer

    async def _review(self, route: str, raw: bytes) -> web.StreamResponse:
        try:
            review = strict_json.loads(raw)
        except strict_json.Refused:
            count_malformed(route)
            return _text(400, AdmissionCode.REVIEW_MALFORMED.value)
        try:
            verdict = await self._reviewer(review, webhook=route)
        except Unanswerable:
            return _text(400, AdmissionCode.REVIEW_MALFORMED.value)
        return web.Response(body=json.dumps(verdict).encode(), content_type="application/json")


# -- certificates ------------------------------------------------------------------------------


def _server_context(cert: Path, key: Path, client_ca: Path | None = None) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.set_alpn_protocols(["http/1.1"])
    context.load_cert_chain(cert, key)
    if client_ca is not None:
        # Only a client with a certificate of this CA (the API server's, from its admission
        # kubeconfig) completes a handshake: no other client reaches a body or the budget.
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(cafile=client_ca)
    return context


class ServingCertificate:
    """tls.crt/tls.key, reloaded when they change: each handshake picks the newest context.

    The listener's context only selects (its SNI callback runs for every ClientHello, with or
    without a server name); a pair that fails to load (say, half written) keeps the old one
    until the next poll. With ``client_ca`` every context requires a client certificate of that
    CA (the listener's too: OpenSSL keeps the first context's verify mode for the connection),
    reloaded with the pair.
    """

    def __init__(self, tls_dir: Path, client_ca: Path | None = None) -> None:
        self._cert, self._key = tls_dir / "tls.crt", tls_dir / "tls.key"
        self._client_ca = client_ca
        self._stamp = self._files()
        self.current = self._context()
        self.listener = self._context()
        self.listener.sni_callback = self._select
        self._record_expiry()

    def _record_expiry(self) -> None:
        """The served certificate's notAfter as a metric (alert before it lapses: the webhook
        fails closed)."""
        from cryptography import x509

        try:
            leaf = x509.load_pem_x509_certificate(self._cert.read_bytes())
        except (OSError, ValueError):
            return
        metrics.CERTIFICATE_EXPIRY.set(leaf.not_valid_after_utc.timestamp())

    def _context(self) -> ssl.SSLContext:
        return _server_context(self._cert, self._key, self._client_ca)

    def _select(self, connection: ssl.SSLObject | ssl.SSLSocket, _name: str | None,
                _context: ssl.SSLContext) -> None:
        connection.context = self.current

    def _files(self) -> tuple[tuple[int, int, int], ...]:
        paths = (self._cert, self._key, *((self._client_ca,) if self._client_ca else ()))
        return tuple((s.st_mtime_ns, s.st_size, s.st_ino) for s in (p.stat() for p in paths))

    def refresh(self) -> bool:
        """Load the files if they changed; True when a new pair is now served."""
        try:
            stamp = self._files()
            if stamp == self._stamp:
                return False
            fresh = self._context()
        except (OSError, ssl.SSLError, ValueError) as exc:
            log.warning("TLS certificate not reloaded: %s", type(exc).__name__)
            return False
        self.current, self._stamp = fresh, stamp
        self._record_expiry()
        log.info("TLS certificate loaded")
        return True

    async def watch(self, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            self.refresh()


# -- the process -------------------------------------------------------------------------------


async def serve(args: argparse.Namespace, shell: process.Shell,
                warned: frozenset[AdmissionCode] = frozenset(),
                audit_lease: tuple[str, str] | None = None, *,
                audit_only: bool = False) -> None:
    """Listening, with the rules in ``warned`` warning (enforcement.py), or every rule with
    ``audit_only``, and the audit written by the holder of ``audit_lease`` (none: this
    process writes it); the audit's reports say ``warn`` only for ``warned``. At the stop the
    background tasks are cancelled, then the review port and the health port closed, in that
    order (:func:`process.serve_until_stopped`)."""
    api_client = kube_client.api_client(args.kubeconfig)
    if args.bootstrap_secret:
        # cert-manager style: own CA in a Secret, files written for the listener, CA injected.
        target = bootstrap.Target(namespace=args.bootstrap_namespace,
                                  secret=args.bootstrap_secret, service=args.bootstrap_service,
                                  webhook_config=args.bootstrap_webhook_config,
                                  extra_hosts=tuple(args.bootstrap_host or ()),
                                  # The chart passes a memory API URL exactly when it renders
                                  # the Pod routing and grants its read.
                                  pod_routing=bool(args.memory_api_url))
        pacer = bootstrap.Pacer()  # one for all of this replica's writes
        await asyncio.to_thread(bootstrap.settle, api_client, target, Path(args.tls_dir), pacer)
        shell.background(bootstrap.keep_settled(api_client, target, Path(args.tls_dir), pacer))
    source = StateSource(api_client)
    source.start()
    await shell.serve(serving.health_handler(ready=lambda: source.synced),
                      args.host, args.health_port)
    routing = memory_routing(api_client, args.memory_api_url, args.memory_api_ready_url,
                             args.memory_model_url)

    def audited_state() -> PolicyState | None:
        state = source.cached()
        ready = routing is not None and isinstance(routing.ready, MemoryApiReadiness) \
            and routing.ready.last
        return None if state is None else dataclasses.replace(state, memory_routed=ready)

    if args.audit_interval > 0:
        shell.background(audit.run(api_client, audited_state, args.audit_interval,
                                   _elector(api_client, audit_lease, args.identity),
                                   warned))
    certificate = ServingCertificate(Path(args.tls_dir), args.client_ca_file)
    shell.background(certificate.watch(args.tls_reload_seconds))
    await shell.serve(ReviewService(Reviewer(source.lookups(), args.local_homeserver, routing,
                                             warned, audit_only=audit_only,
                                             appservice=args.appservice_namespaces)),
                      args.host, args.port, tls=certificate.listener)
    if audit_only:
        log.warning(enforcement.AUDIT_RISK)
    log.info("webhook serving on %s:%d", args.host, args.port)


def _elector(api_client: client.ApiClient, lease: tuple[str, str] | None,
             identity: str) -> LeaseElector | None:
    if lease is None:
        return None
    namespace, name = lease
    return LeaseElector(api_client, namespace, name, identity or socket.gethostname())


def run_webhook(args: argparse.Namespace) -> int:
    warned = enforcement.warned_rules(args.warn_rule or ())  # before anything serves
    # A bare NAME named a Lease nobody can hold, so no replica wrote the audit, silently.
    audit_lease = parse_lease(args.audit_lease, "--audit-lease") if args.audit_lease else None
    # uvloop roughly halves the per-review overhead of the event loop.
    audit_only = enforcement.Mode(args.enforcement) is enforcement.Mode.AUDIT
    return process.run(functools.partial(serve, args, warned=warned, audit_lease=audit_lease,
                                         audit_only=audit_only),
                       fast_loop=True)
