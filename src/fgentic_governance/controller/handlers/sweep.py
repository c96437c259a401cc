"""One periodic sweep of every MemoryScope instead of a Kopf timer per scope (issue 39).

A per-scope timer re-ran the whole reconcile of every scope every interval: three pool round
trips and an UPSERT that rewrote each scope row, ~2 ms of operator CPU per scope (64 % of a core
at 10,000 scopes) for nothing new. The sweep instead compares, once per interval, a compact
view of each scope's recorded status (a Kopf index) with one paged read-only query of the store
(`MemoryStore.scope_overview`) and the store-wide conditions, and pokes (one annotation) only
the scopes that differ; their own reconcile does the rest. A round that finds nothing new
writes nothing, neither to the API nor to the store.

What the timer covered without saying so is covered here or by an explicit handler:
- the store connecting later, going down and coming back, its settings or pgvector check, the
  expiry cleanup's outcome, the schema version: the store-wide comparison;
- entries saved, forgotten or expired, a control-API hold, an unverified erasure: the facts;
- an Agent's ModelConfigs moving on or off the governed route: each Agent judged once a round;
- a ConsentRecord deleted (a withdrawal: the index just loses it) and a PrincipalOffboarding
  deleted (the gate lifts): the DELETED-event handlers below poke the scopes concerned.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

import kopf
from kubernetes.client import ApiClient

from fgentic_governance.api.common import GROUP, VERSION
from fgentic_governance.api.memory import ScopePhase
from fgentic_governance.api.registry import CONSENT_RECORD, MEMORY_SCOPE, PRINCIPAL_OFFBOARDING
from fgentic_governance.controller import kube_calls as kube
from fgentic_governance.controller.context import OperatorContext, of
from fgentic_governance.controller.handlers.common import revision
from fgentic_governance.controller.metrics import SCOPE_SWEEP_POKES, SCOPE_SWEEPS
from fgentic_governance.controller.tuning import SCOPE_RESYNC
from fgentic_governance.memory import MemoryStore, ScopeState, StoreRefusal
from fgentic_governance.reasons import Reason

log = logging.getLogger("fgentic_governance.controller.sweep")
PAGE: Final = 1000  # scopes per store round trip
POKES_AT_ONCE: Final = 4  # annotate calls in flight (the API client's executor is shared)
POKE: Final = f"{GROUP}/resync-revision"
"""The sweep's own annotation (a consent or offboarding poke in the same second would otherwise
leave the value, and so the object, unchanged)."""
# The store-wide outcomes a scope's reconcile may have returned early with (no store, or one
# unfit to grant): those scopes are not retried by Kopf, so the sweep compares them too.
_STORE_WIDE: Final = frozenset({Reason.STORE_UNAVAILABLE.value,
                                Reason.STORE_SETTINGS_UNSAFE.value,
                                Reason.STORE_EXTENSION_OUTDATED.value})


@dataclass(frozen=True, slots=True)
class ScopeView:
    """What the sweep compares of one scope's recorded status (a few hundred bytes)."""

    generation: int
    observed: int | None
    phase: str
    reason: str
    agent: tuple[str, str]
    schema: int | None = None
    consent_generation: int | None = None
    entry_count: int | None = None
    hard_expiry: str | None = None
    withheld: tuple[tuple[str, int], ...] = ()
    conditions: tuple[tuple[str, str, str], ...] = ()
    """(type, status, reason) of the store-wide and model-route conditions."""

    def condition(self, type_: str) -> tuple[str, str] | None:
        return next(((s, r) for t, s, r in self.conditions if t == type_), None)


_COMPARED: Final = ("StoreReady", "ExpiryCleanup", "ModelRouteGoverned")


def view_of(meta: Mapping[str, Any], spec: Mapping[str, Any],
            status: Mapping[str, Any]) -> ScopeView:
    agent = spec.get("agent") or {}
    withheld = tuple(sorted((str(w.get("reasonCode")), _int(w.get("count")) or 0)
                            for w in status.get("recallWithheld") or []))
    return ScopeView(
        generation=int(meta.get("generation", 0)), observed=_int(status.get("observedGeneration")),
        phase=str(status.get("phase", "")), reason=str(status.get("reasonCode", "")),
        agent=(str(agent.get("namespace", "")), str(agent.get("name", ""))),
        schema=_int(status.get("storeSchemaVersion")),
        consent_generation=_int(status.get("consentGeneration")),
        entry_count=_int(status.get("entryCount")),
        hard_expiry=status.get("hardExpiry"), withheld=withheld,
        conditions=tuple((str(c.get("type")), str(c.get("status")), str(c.get("reason")))
                         for c in status.get("conditions") or [] if c.get("type") in _COMPARED))


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@kopf.index(GROUP, VERSION, MEMORY_SCOPE.plural)
async def scope_views(namespace: str, name: str, meta: kopf.Meta, spec: kopf.Spec,
                status: kopf.Status, **_: Any) -> dict[str, ScopeView]:
    """scope key → the compact view of its recorded status (the sweep's side of the compare)."""
    return {f"{namespace}/{name}": view_of(meta, spec, status)}


@dataclass(frozen=True)
class World:
    """The store-wide state every scope's status should show (as `memoryscope._status`)."""

    store_ready: tuple[str, str]
    cleanup: Reason | None
    schema: int

    @classmethod
    def of(cls, ctx: OperatorContext) -> World:
        problem = ctx.store_problem
        ready = ctx.store is not None and problem is None
        return cls(("True", Reason.OK.value) if ready
                   else ("False", (problem or Reason.STORE_UNAVAILABLE).value),
                   ctx.cleanup, ctx.store_schema_version)


def stale(view: ScopeView, fact: tuple[ScopeState, datetime | None] | None, world: World,
          route: Reason | None) -> bool:
    """Whether the scope's status differs from what its reconcile would now record.

    A scope whose current generation no change handler has finished is left to them, and one
    that failed on its own (not for a store-wide reason) to Kopf's retry. Facts are compared
    only once the flow has run for the scope (its status records a consent generation)."""
    if view.observed != view.generation:
        return False
    if view.phase == ScopePhase.FAILED.value and view.reason not in _STORE_WIDE:
        return False
    if view.condition("StoreReady") != world.store_ready or (
            world.cleanup is not None and view.condition("ExpiryCleanup")
            != ("True" if world.cleanup is Reason.OK else "False", world.cleanup.value)) \
            or view.schema != world.schema:
        return True
    if view.phase == ScopePhase.FAILED.value or view.consent_generation is None:
        return False
    if route is not None and view.condition("ModelRouteGoverned") != (
            "True" if route is Reason.OK else "False", route.value):
        return True
    return fact is None or _facts_differ(view, *fact)


def _facts_differ(view: ScopeView, state: ScopeState, latest: datetime | None) -> bool:
    enabled = view.phase == ScopePhase.ENABLED.value
    expiry = latest.strftime("%Y-%m-%dT%H:%M:%SZ") if latest else None
    withheld = tuple(sorted((reason.value, n) for reason, n in state.recall_withheld))
    return (state.consent_generation != view.consent_generation
            or state.entry_count != view.entry_count
            or (state.enabled and not state.held) != enabled
            or (state.held and not enabled) or expiry != view.hard_expiry
            or withheld != view.withheld)


async def sweep_once(ctx: OperatorContext, views: kopf.Index[str, ScopeView]) -> int:
    """One round: returns how many scopes it poked. Reads only; writes only pokes."""
    world = World.of(ctx)
    # A snapshot taken without awaiting: Kopf updates the index on the same loop meanwhile.
    snapshot = {key: next(iter(store)) for key, store in views.items() if len(store)}
    routes = await _routes(ctx, {v.agent for v in snapshot.values()
                                 if v.consent_generation is not None})
    facts: dict[str, tuple[ScopeState, datetime | None]] = {}
    if ctx.store is not None:
        try:
            facts = await _facts(ctx.store, snapshot)
        except StoreRefusal as refusal:
            if refusal.reason is not Reason.STORE_UNAVAILABLE:
                raise
            # The store is down: every scope's StoreReady must say so (and a scope that read
            # Enabled, fail closed), as their reconcile will once poked; facts are unknown.
            world = dataclasses.replace(world, store_ready=("False", refusal.reason.value))
            return await _poke(ctx.kube(), [
                key for key, view in snapshot.items() if view.observed == view.generation
                and view.condition("StoreReady") != world.store_ready])
    return await _poke(ctx.kube(), [key for key, view in snapshot.items()
                                    if stale(view, facts.get(key), world, routes.get(view.agent))])


async def _facts(store: MemoryStore, snapshot: Mapping[str, ScopeView]
                 ) -> dict[str, tuple[ScopeState, datetime | None]]:
    """Every watched scope's store facts, a page of rows per round trip."""
    facts: dict[str, tuple[ScopeState, datetime | None]] = {}
    after = ""
    while True:
        page = await store.scope_overview(after, PAGE)
        facts.update((state.scope_key, (state, latest)) for state, latest in page
                     if state.scope_key in snapshot)
        if len(page) < PAGE:
            return facts
        after = page[-1][0].scope_key


async def _routes(ctx: OperatorContext, agents: Iterable[tuple[str, str]]
                  ) -> dict[tuple[str, str], Reason | None]:
    if ctx.model_routes is None:
        return {}
    return {agent: await ctx.model_routes.reason(ctx.kube(), *agent, ctx.memory_model_url)
            for agent in agents}


async def _poke(api: ApiClient, keys: list[str]) -> int:
    slots = asyncio.Semaphore(POKES_AT_ONCE)

    async def one(key: str) -> None:
        namespace, name = key.split("/", 1)
        async with slots:
            await kube.annotate(api, group=GROUP, version=VERSION, plural=MEMORY_SCOPE.plural,
                                namespace=namespace, name=name, annotations={POKE: revision()})
        SCOPE_SWEEP_POKES.inc()

    await asyncio.gather(*(one(key) for key in keys))
    return len(keys)


_WAKE: asyncio.Event | None = None
"""Set to run the next round now; made by :func:`run` on the loop it runs on."""


def wake() -> None:
    """Run the next round now, not at the interval's end: the store-wide conditions changed
    (the store connected, or its fitness did). A scope whose reconcile found no store returned
    Failed without a retry, and with a long interval would stay so until the round."""
    if _WAKE is not None:
        _WAKE.set()


async def run(ctx: OperatorContext, views: kopf.Index[str, ScopeView]) -> None:
    """The sweep, every FGENTIC_SCOPE_RESYNC_SECONDS while the operator runs (it starts with
    Kopf, i.e. only in the leading replica; every poke goes through the leader gate too), and
    at once when woken (:func:`wake`). ``ctx``: the operator's, from the start-up handler's
    memo (the sweep runs outside Kopf's handler calls)."""
    global _WAKE  # noqa: PLW0603 (one sweep per process, on the operator's loop)
    _WAKE = woken = asyncio.Event()
    while True:
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(woken.wait(), SCOPE_RESYNC.read())
        woken.clear()
        try:
            poked = await sweep_once(ctx, views)
        except Exception as exc:  # The next round compares again; the type only, never text.
            SCOPE_SWEEPS.labels(result="failed").inc()
            log.warning("scope sweep failed (%s); next round in %.0f s", type(exc).__name__,
                        SCOPE_RESYNC.read())
            continue
        SCOPE_SWEEPS.labels(result="ok").inc()
        if poked:
            log.info("scope sweep: %d scopes differ from the store and were poked", poked)


@kopf.on.event(GROUP, VERSION, CONSENT_RECORD.plural,
               when=lambda event, **_: event.get("type") == "DELETED")
async def consent_deleted(*, namespace: str, spec: kopf.Spec, memo: kopf.Memo,
                          **_: Any) -> None:
    """A deleted ConsentRecord is a withdrawal: its scope re-evaluates (and erases) now. (The
    consent index just loses the record; nothing else would make the scope look again.)"""
    scope = (spec.get("scopeRef") or {}).get("name")
    if scope:
        await kube.annotate(of(memo).kube(), group=GROUP, version=VERSION,
                            plural=MEMORY_SCOPE.plural, namespace=namespace, name=str(scope),
                            annotations={POKE: revision()})


@kopf.on.event(GROUP, VERSION, PRINCIPAL_OFFBOARDING.plural,
               when=lambda event, **_: event.get("type") == "DELETED")
async def offboarding_deleted(*, spec: kopf.Spec, scopes_by_subject: kopf.Index[Any, Any],
                              memo: kopf.Memo, **_: Any) -> None:
    """A deleted PrincipalOffboarding lifts its gate: the principal's scopes re-evaluate."""
    principal = spec.get("principal") or {}
    keys: Iterable[str] = scopes_by_subject.get(
        (str(principal.get("mxid")), str(principal.get("originKind"))), [])
    await _poke(of(memo).kube(), list(keys))
