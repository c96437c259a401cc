"""Start-up of the operator process: settings, login, store, handler registration, run."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
import threading
import uuid
from pathlib import Path
from typing import Any

import kopf

from fgentic_governance.api.common import FINALIZER
from fgentic_governance.controller import (
    erasure_process,
    lanes,
    leadership,
    metrics,
    prepopulation,
    tuning,
    watchstream,
)
from fgentic_governance.controller import login as kube_login  # (also registers the login handler)
from fgentic_governance.controller.context import OperatorContext, memo_of, of
from fgentic_governance.controller.model_route_condition import ModelRoutes
from fgentic_governance.kube import shards
from fgentic_governance.kube.lease import LeaseElector, parse_lease
from fgentic_governance.reasons import Reason

log = logging.getLogger("fgentic_governance")
STORE_RETRY = 10.0
FIRST_OPEN_SECONDS = 30.0  # connect + migrate before Kopf watches; the store loop retries after
# Expired rows are unreadable at once; physical deletion follows within 24 h (ADR 0023 §27):
# a cleanup every tuning.STORE_CLEANUP (an hour), a failed one retried every store check
# (tuning.STORE_SETTINGS: a DBA may loosen the pinned settings at any time).


def _settings(settings: kopf.OperatorSettings) -> None:
    # A watch that the server silently stops feeding would freeze reconciliation.
    settings.watching.server_timeout = 60
    settings.watching.client_timeout = 90
    settings.watching.connect_timeout = 10
    # Only our explicit, content-free kopf.event() calls become Kubernetes events; Kopf's own
    # log records are never posted (loggers=False), and they log object diffs only at DEBUG.
    settings.posting.loggers = False
    settings.posting.level = logging.INFO
    # Events name the product, not the framework ("From" in `kubectl describe`).
    settings.posting.reporting_component = "fgentic-governance-operator"
    settings.persistence.finalizer = FINALIZER
    # A timer still finishing its run (its status patch in flight) when its object is deleted
    # is re-checked only after this polling interval, and the finalizer waits for it: Kopf's
    # 60 s default held a deleted RetrievalBinding for a minute (seen in CI).
    settings.background.cancellation_polling = 1.0
    settings.execution.max_workers = 8
    # Listed in pages (client-go's size), one ungated kind's listing at a time
    # (controller.prepopulation): not every namespace's whole list in memory at once.
    settings.watching.chunk_size = prepopulation.LIST_PAGE
    # No settings.queueing.worker_limit: each object's worker indexes it and then waits until
    # every listed object is indexed, so with more objects at start-up than the limit, the
    # workers holding the slots wait for objects that can never get one (a limit of 32
    # deadlocked a cluster-wide operator in CI). Kopf also holds a slot through retry delays.


def _configured(settings: kopf.OperatorSettings, who: str) -> kopf.OperatorSettings:
    """The settings of both of this process's Kopf operators (the main one, the erasure lane's)."""
    _settings(settings)
    settings.posting.reporting_instance = who  # each Event names the replica that acted
    from fgentic_governance.controller.handlers import diffbase

    settings.persistence.diffbase_storage = diffbase.DIFFBASE
    return settings


async def open_store(ctx: OperatorContext, dsn_file: Path) -> None:
    """Connect, migrate the fenced schema idempotently, and publish the store to handlers."""
    from fgentic_governance.memory import MemoryStore, bounds, migrate
    from fgentic_governance.memory.dsn import from_file

    # Every fence, erasure and read-back on the primary (memory/dsn.py, docs/ha.md).
    dsn = from_file(dsn_file)
    pool = await leadership.gated_pool(dsn, tuning.RECONCILE_SLOTS.read())
    try:
        async with pool.acquire(timeout=bounds.ACQUIRE_SECONDS) as conn:
            version = await migrate(conn)
        # The store and its fitness in one step: published first and checked after, a
        # reconcile in between saw no problem and granted on an outdated pgvector (CI, 98dfd91).
        problem = await _store_problem(pool)
        # The erasure lane's own connections, on its own loop: an offboarding never waits for
        # the scope pool, nor for turns of this loop.
        erasure_pool = await lanes.on_erasure_lane(
            leadership.gated_pool(dsn, lanes.ERASURE_POOL_SIZE))
    except BaseException:
        await pool.close()
        raise
    ctx.update(store=MemoryStore(pool), erasure_store=MemoryStore(erasure_pool),
               store_schema_version=version, store_pool=pool, erasure_pool=erasure_pool,
               store_problem=problem)
    log.info("content store ready at schema version %d", version)


async def check_settings(ctx: OperatorContext) -> None:
    """Publish whether the store's pinned settings hold and its pgvector is recent enough
    (StoreReady; nothing granted if not)."""
    ctx.update(store_problem=await _store_problem(ctx.store_pool))


async def _store_problem(pool: Any) -> Reason | None:
    """Why the store may grant nothing: unsafe pinned settings or an outdated pgvector."""
    from fgentic_governance.memory import bounds, extension
    from fgentic_governance.memory.errors import guarded

    async def unsafe() -> tuple[list[str], str | None]:
        async with pool.acquire(timeout=bounds.ACQUIRE_SECONDS) as conn:
            return await bounds.unsafe_settings(conn), await extension.installed(conn)

    names, pgvector = await guarded(unsafe())
    if names:  # Names from our own closed set (bounds.PINNED), never a server value.
        log.error("content store settings unsafe: %s", ",".join(names))
    outdated = extension.outdated(pgvector)
    if outdated:  # The version rebuilt from its numbers, never the server's text.
        log.error("content store pgvector %s is older than %s", extension.spelt(pgvector),
                  extension.MIN_PGVECTOR_TEXT)
    return (Reason.STORE_SETTINGS_UNSAFE if names
            else Reason.STORE_EXTENSION_OUTDATED if outdated else None)


async def cleanup(ctx: OperatorContext) -> bool:
    """Delete expired rows now; publish the outcome, never silently: the failure counter or
    the last success's time, and the scopes' ExpiryCleanup condition (next resync). Returns
    whether it succeeded."""
    from fgentic_governance.memory.errors import reason_for

    store = ctx.store
    if store is None:
        return False
    try:
        await store.cleanup_expired()
    except Exception as exc:  # The reason code only: a driver's text may quote a row.
        reason = reason_for(exc) or Reason.INTERNAL_ERROR
        metrics.CLEANUP_FAILURES.labels(reason=reason.value).inc()
        if ctx.cleanup != reason:
            log.error("expired memory cleanup failed (%s); retrying every %.0f s",
                      reason.value, tuning.STORE_SETTINGS.read())
        ctx.update(cleanup=reason)
        return False
    metrics.CLEANUP_LAST_SUCCESS.set_to_current_time()
    if ctx.cleanup not in (None, Reason.OK):
        log.info("expired memory cleanup succeeded again")
    ctx.update(cleanup=Reason.OK)
    return True


async def _store_loop(ctx: OperatorContext, dsn_file: Path, cleanup_every: float) -> None:
    """Connect (retrying while the store is down), then check the pinned settings every
    minute and delete expired rows every ``cleanup_every`` (a failed cleanup: every minute).

    Until the store is ready every MemoryScope stays Failed (STORE_UNAVAILABLE); the scope
    sweep's next round pokes them once it is (`handlers.sweep`).
    """
    from fgentic_governance.controller.handlers import sweep

    while ctx.store is None:
        try:
            await open_store(ctx, dsn_file)
        except Exception as exc:
            log.warning("content store unavailable (%s); retrying", type(exc).__name__)
            await asyncio.sleep(STORE_RETRY)
    sweep.wake()  # Scopes failed for want of the store: poked now, not at the interval's end.
    loop = asyncio.get_running_loop()
    due = loop.time()
    while True:
        problem = ctx.store_problem
        with contextlib.suppress(Exception):  # Retried next round; counted in metrics.
            await check_settings(ctx)
        if ctx.store_problem != problem:
            sweep.wake()
        if loop.time() >= due and await cleanup(ctx):
            due = loop.time() + cleanup_every
        await asyncio.sleep(min(tuning.STORE_SETTINGS.read(), cleanup_every))


def run_operator(args: argparse.Namespace) -> int:
    if args.kubeconfig:
        os.environ["KUBECONFIG"] = str(args.kubeconfig)
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    from fgentic_governance.kube.client import api_client as build_api_client

    tuning.check()  # every interval from the environment, bounded, before anything starts
    sys.setswitchinterval(lanes.GIL_SWITCH_SECONDS)  # the erasure lane's thread, promptly
    api_client = build_api_client(args.kubeconfig)
    # The one context of this process, handed to Kopf as its memo (``_serve``): every handler
    # reads it, the API client included, from its ``memo`` argument.
    ctx = OperatorContext(local_homeserver=args.local_homeserver,
                          appservice=args.appservice_namespaces,
                          memory_model_url=args.memory_model_url, model_routes=ModelRoutes(),
                          cluster_kinds=args.cluster_kinds, api=api_client)

    from fgentic_governance.controller.handlers import (  # noqa: F401  (registration by import)
        diffbase,
        memoryscope,
        offboarding,
        retrievalbinding,
        sweep,
    )

    diffbase.register(cluster_kinds=args.cluster_kinds)

    if args.cluster_kinds:  # Not even watched elsewhere: Kopf strips a finalizer it does not
        # need, so a shard without the floors' handlers would lift another shard's finalizer.
        from fgentic_governance.controller.handlers import floors  # noqa: F401

    if args.erasure_process and args.store_dsn_file and args.cluster_kinds:
        erasure_process.fork(args.store_dsn_file)  # offboardings: their flow in its own process
    cleanup_every = tuning.STORE_CLEANUP.read()
    tasks: list[asyncio.Task[None]] = []
    who = _identity(args.identity)

    @kopf.on.startup()
    async def _startup(settings: kopf.OperatorSettings, memo: kopf.Memo,
                       **indices: Any) -> None:
        ctx = of(memo)  # (what ``_serve`` handed Kopf; the store loop and the sweep get it)
        _configured(settings, who)
        lanes.open_lanes()
        if args.store_dsn_file:
            # Kopf watches only once the start-up handlers are done: a store that answers now
            # is there before the first reconcile, which would otherwise find none and report
            # the scope Failed until the sweep's next round. A store that does not: retried.
            with contextlib.suppress(Exception):
                await asyncio.wait_for(open_store(ctx, args.store_dsn_file),
                                       FIRST_OPEN_SECONDS)
            tasks.append(asyncio.create_task(_store_loop(ctx, args.store_dsn_file,
                                                         cleanup_every)))
        # One sweep for every scope (a live index: it fills as Kopf lists the scopes).
        tasks.append(asyncio.create_task(sweep.run(ctx, indices["scope_views"])))
        ctx.update(scopes_by_subject=indices["scopes_by_subject"])  # live, as above
        if ctx.cluster_kinds:  # PrincipalOffboardings: on the erasure lane's own operator
            loop = asyncio.get_running_loop()
            await lanes.on_erasure_lane(erasure_process.connect(
                ended=lambda: _lost(loop, stop, erasure_lost)))
            lanes.start_erasure_operator(_configured(kopf.OperatorSettings(), who), memo_of(ctx),
                                         ended=lambda: _lost(loop, stop, erasure_lost))

    stop = asyncio.Event()  # bound to a loop only when awaited: asyncio.run's, in _serve
    erasure_lost = threading.Event()

    @kopf.on.cleanup()
    async def _cleanup(memo: kopf.Memo, **_: Any) -> None:
        await wind_down(of(memo), tasks, stop)

    namespaces = args.namespace or []
    kube_login.expect_namespaces(namespaces)
    watchstream.install()  # before Kopf opens its first watch stream: trimmed, paced
    prepopulation.install(ungated=memoryscope.WITHOUT_BARRIER)  # before Kopf lists
    elector = _elector(api_client, args.leader_lease, who)
    if elector is not None:  # claim this shard's namespaces, refuse to overlap another's
        shards.check(api_client, elector.namespace, elector.name,
                     shards.Claim.of(namespaces, args.cluster_kinds))
    code = asyncio.run(_serve(args.metrics_port, namespaces, elector, stop, ctx))
    return 1 if erasure_lost.is_set() else code


def _lost(loop: asyncio.AbstractEventLoop, stop: asyncio.Event, lost: threading.Event) -> None:
    """The erasure operator ended on its own (from its thread): no offboarding would be handled
    any more, so the whole process stops, and exits 1 to be restarted."""
    log.error("the erasure lane's operator or process ended; stopping")
    lost.set()
    loop.call_soon_threadsafe(stop.set)


async def wind_down(ctx: OperatorContext, tasks: list[asyncio.Task[None]],
                    stop: asyncio.Event) -> None:
    """Kopf's cleanup: end our tasks, close the pools and lanes, and raise ``stop``. Kopf
    stopped by its own SIGTERM handler leaves its task waiting on ``stop`` pending, and then
    waits 5 s for every pending task before it returns: raised, that task ends now."""
    stop.set()
    for task in tasks:
        task.cancel()
    await asyncio.to_thread(lanes.stop_erasure_operator)  # before the pools it uses close
    await lanes.on_erasure_lane(erasure_process.disconnect())
    if ctx.store_pool is not None:
        await ctx.store_pool.close()
    if ctx.erasure_pool is not None:  # on the loop it belongs to
        await lanes.on_erasure_lane(ctx.erasure_pool.close())
    lanes.close_lanes()


def _identity(identity: str) -> str:
    """This replica's name, in its Lease and in the Events it posts. Unique per process: a
    restarted Pod keeps its host name but is not the old holder."""
    return identity or f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"


def _elector(api_client: Any, lease: str, who: str) -> LeaseElector | None:
    """The Lease that elects one running replica (none: this process runs alone)."""
    if not lease:
        return None
    namespace, name = parse_lease(lease, "--leader-lease")
    return LeaseElector(api_client, namespace, name, who)


async def _serve(metrics_port: int | None, namespaces: list[str],
                 elector: LeaseElector | None, stop: asyncio.Event,
                 ctx: OperatorContext) -> int:
    """Probes and metrics from the start (a standby is live), then the handlers once this
    replica leads; exit 1 when leadership is lost, so the Pod restarts as a standby."""
    runner: Any = None
    if metrics_port:
        from fgentic_governance.serving import http as serving

        serving.scrub_library_logs()
        runner = await serving.serve(serving.health_handler(), "0.0.0.0", metrics_port)  # noqa: S104
    # Until Kopf installs its own: a SIGTERM while standing by, or between taking the Lease
    # and Kopf's start, stops this process cleanly (and hands the Lease over) too.
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    keeper: asyncio.Task[None] | None = None
    try:
        if elector is not None:
            if not await leadership.acquire(elector, stop):
                return 0  # stopped as a standby
            metrics.LEADING.set(1)
            keeper = asyncio.create_task(leadership.keep(elector, stop))
            keeper.add_done_callback(lambda _: stop.set())  # no renewals, no handlers
        await kopf.operator(clusterwide=not namespaces, namespaces=namespaces,
                            standalone=True, stop_flag=stop, memo=memo_of(ctx))
    finally:
        metrics.LEADING.set(0)
        if keeper is not None:
            keeper.cancel()
        if runner is not None:
            await runner.cleanup()
    if elector is None:
        return 0
    if elector.leading:  # a clean stop (SIGTERM): hand over at once
        await asyncio.to_thread(elector.release)
        return 0
    return 1
