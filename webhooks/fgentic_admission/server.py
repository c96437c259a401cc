"""The admission webhook process.

TLS is served by Kopf's `WebhookServer` from certificate files we make with `cryptography`
(Kopf's own generator fails on this OpenSSL); it re-reads them when they change (hot reload).
Only its TLS listener is used: reviews go straight to our `Reviewer`, not through Kopf's
handler machinery, which keeps the added latency of a create low. Kopf's managed webhook
configuration is not used either: it hard-codes a 30 s timeout, has no namespaceSelector and
is deleted on shutdown. The chart and the tests ship their own.

Health, readiness and metrics are plain HTTP on a separate port.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import kopf
from aiohttp import web
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from fgentic_admission import audit, bootstrap
from fgentic_admission.informer import Informer
from fgentic_admission.policy import PolicyState
from fgentic_admission.review import Lookups, Reviewer
from fgentic_admission.views import build_state

log = logging.getLogger("fgentic_admission")
GROUP, VERSION = "governance.fgentic.dev", "v1alpha1"


class StateSource:
    """Informer-backed caches plus live reads, for the reviewer and the audit."""

    def __init__(self, api_client: client.ApiClient) -> None:
        self.api = client.CustomObjectsApi(api_client)
        self.bindings = Informer(api_client, GROUP, VERSION, "retrievalbindings", self._rebuild)
        self.scopes = Informer(api_client, GROUP, VERSION, "memoryscopes", self._rebuild)
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
        bindings, scopes = await asyncio.gather(self._list("retrievalbindings"),
                                                self._list("memoryscopes"))
        return build_state(bindings, scopes)

    async def _list(self, plural: str) -> list[dict[str, Any]]:
        listing: dict[str, Any] = await asyncio.to_thread(  # type: ignore[assignment]
            self.api.list_cluster_custom_object, GROUP, VERSION, plural)
        return list(listing.get("items", []))

    async def get_scope(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        try:
            return await asyncio.to_thread(self.api.get_namespaced_custom_object, GROUP,  # type: ignore[no-any-return]
                                           VERSION, namespace, "memoryscopes", name)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    async def list_bindings(self) -> Sequence[Mapping[str, Any]]:
        return await self._list("retrievalbindings")

    async def offboarding(self, subject: Mapping[str, Any]) -> bool:
        """Any PrincipalOffboarding for this exact principal refuses new consent."""
        items = await self._list("principaloffboardings")
        return any((o.get("spec") or {}).get("principal") == dict(subject) for o in items)

    def lookups(self) -> Lookups:
        return Lookups(cached_state=self.cached, live_state=self.live,
                       get_scope=self.get_scope, list_bindings=self.list_bindings,
                       offboarding=self.offboarding)


def health_app(source: StateSource) -> web.Application:
    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def readyz(_: web.Request) -> web.Response:
        return web.Response(text="ok") if source.synced else web.Response(status=503,
                                                                          text="syncing")

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(body=generate_latest(), headers={"Content-Type": CONTENT_TYPE_LATEST})

    app = web.Application()
    app.add_routes([web.get("/healthz", healthz), web.get("/readyz", readyz),
                    web.get("/metrics", metrics)])
    return app


async def serve(args: argparse.Namespace) -> None:
    api_client = config.new_client_from_config(  # type: ignore[no-untyped-call]
        config_file=str(args.kubeconfig)) if args.kubeconfig else _in_cluster()
    tasks = []
    if args.bootstrap_secret:
        # cert-manager style: own CA in a Secret, files written for the listener, CA injected.
        target = bootstrap.Target(namespace=args.bootstrap_namespace,
                                  secret=args.bootstrap_secret, service=args.bootstrap_service,
                                  webhook_config=args.bootstrap_webhook_config,
                                  extra_hosts=tuple(args.bootstrap_host or ()))
        await asyncio.to_thread(bootstrap.settle, api_client, target, Path(args.tls_dir))
        tasks.append(asyncio.create_task(
            bootstrap.keep_settled(api_client, target, Path(args.tls_dir))))
    source = StateSource(api_client)
    source.start()
    runner = web.AppRunner(health_app(source), handle_signals=False)
    await runner.setup()
    await web.TCPSite(runner, args.host, args.health_port).start()
    if args.audit_interval > 0:
        tasks.append(asyncio.create_task(audit.run(api_client, source.cached,
                                                   args.audit_interval)))
    server = kopf.WebhookServer(
        addr=args.host, port=args.port,
        certfile=os.path.join(args.tls_dir, "tls.crt"),
        pkeyfile=os.path.join(args.tls_dir, "tls.key"),
        cafile=os.path.join(args.tls_dir, "ca.crt"),
        file_check_interval=args.tls_reload_seconds,
    )
    reviewer = Reviewer(source.lookups(), args.local_homeserver)
    log.info("webhook serving on %s:%d", args.host, args.port)
    async for _ in server(reviewer):  # type: ignore[arg-type]
        log.info("TLS certificate loaded")


def _in_cluster() -> client.ApiClient:
    config.load_incluster_config()  # type: ignore[no-untyped-call]
    return client.ApiClient()


def run_webhook(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:  # uvloop roughly halves the per-review overhead of the event loop.
        import uvloop

        uvloop.run(serve(args))
    except ImportError:
        asyncio.run(serve(args))
    return 0
