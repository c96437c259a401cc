"""MemoryScope and ConsentRecord registrations: evaluate the gates, drive the store, report
content-free status. The flow itself lives in `consent.flow`."""

from __future__ import annotations

import contextvars
import functools
import json
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Final

import kopf
from kopf._core.engines import posting
from kubernetes.client import ApiClient

from fgentic_governance.api.common import GROUP, VERSION
from fgentic_governance.api.memory import ConsentRecordSpec, MemoryScopeSpec, Posture, ScopePhase
from fgentic_governance.api.registry import CONSENT_RECORD, MEMORY_SCOPE
from fgentic_governance.consent import flow
from fgentic_governance.consent.gates import Environment, Verdict, consent_standing, evaluate
from fgentic_governance.controller import heap, lanes, prepopulation
from fgentic_governance.controller import kube_calls as kube
from fgentic_governance.controller import workqueue as wq
from fgentic_governance.controller.context import OperatorContext, of, scope_lock
from fgentic_governance.controller.handlers.common import (
    Transition,
    announce,
    announced,
    backoff,
    condition,
    differs,
    handled,
    merge_conditions,
    now,
    parse,
    ready,
    revision,
)
from fgentic_governance.controller.leadership import gated
from fgentic_governance.controller.metrics import SCOPE_STATUS_WRITES, SCOPE_TRANSITIONS
from fgentic_governance.controller.tuning import RECONCILE_SLOTS
from fgentic_governance.memory import ScopeRecord, StoreRefusal
from fgentic_governance.reasons import Reason

POKE = f"{GROUP}/consent-revision"
# Re-evaluated when the store's facts or the store-wide conditions differ from the status:
# one sweep for every scope pokes it (`handlers.sweep`), not a timer per scope.


@kopf.index(GROUP, VERSION, CONSENT_RECORD.plural)
async def consents_by_scope(
    namespace: str, spec: kopf.Spec, meta: kopf.Meta, **_: Any
) -> dict[tuple[str, str], tuple[str, str, str]]:
    """(namespace, scope) → (creationTimestamp, name, spec as compact JSON) of each record: one
    string per record, not the watched body's dicts kept alive for as long as it exists."""
    key = (namespace, str(spec.get("scopeRef", {}).get("name", "")))
    return {key: (str(meta.get("creationTimestamp", "")), str(meta.get("name")),
                  _compact(spec))}


def _compact(fields: Any) -> str:
    """A spec or status as the indices hold it: one compact string."""
    return json.dumps(dict(fields), separators=(",", ":"))


@dataclass(frozen=True, slots=True)
class Latest:
    """What a queued scope's reconcile reads of it: its latest watched state, compact (two
    JSON strings, not the body's dicts)."""

    uid: str
    generation: int
    deleting: bool
    spec: str
    status: str
    memo: kopf.Memo = field(compare=False)
    """Kopf's own memo of the object (held by Kopf anyway): where a transition waits for its
    status to be seen written (``common.announce``), and the operator's context the queue's
    worker runs with (``context.of``; every object's memo is a copy of the operator's)."""


@kopf.index(GROUP, VERSION, MEMORY_SCOPE.plural)
async def scope_latest(*, namespace: str, name: str, meta: kopf.Meta, spec: kopf.Spec,
                 status: kopf.Status, memo: kopf.Memo, **_: Any) -> dict[str, Latest]:
    """scope key → its latest state. Kopf indexes each event before it runs the event's
    handlers, so a key queued by a handler is read here at least as new as that event."""
    key = f"{namespace}/{name}"
    written = _WRITTEN.get(key)
    if written is not None and not differs(status, written):
        del _WRITTEN[key]  # The watch shows our write: the index is as new as we are.
    return {key: Latest(str(meta.get("uid", "")), int(meta.get("generation", 0)),
                        meta.get("deletionTimestamp") is not None, _compact(spec),
                        _compact(status), memo)}


WITHOUT_BARRIER: Final = ((GROUP, MEMORY_SCOPE.plural), (GROUP, CONSENT_RECORD.plural))
"""The kinds whose workers need not wait for Kopf to index every listed object at start-up
(``controller.prepopulation``): a MemoryScope's handler only queues its key, and the queue's
runs, which read every index, wait for it (``prepopulation.lifted``); a ConsentRecord's reads
only its own index entry, made before its handler runs (``_poke_needed``)."""

_WRITTEN: dict[str, dict[str, Any]] = {}
"""scope key → the status fields this process wrote that the watch has not shown yet: a key
queued again meanwhile reads them over its indexed status (as Kopf waits for its own patch's
resourceVersion), instead of rewriting the same status from a stale one."""
_INDEX: dict[str, kopf.Index[Any, Any]] = {}
"""The Kopf indices the queue's workers read (handed over by each handler call; Kopf's index
objects live as long as the operator)."""


async def _reconcile_key(key: str) -> None:
    """One worker's run for a queued key: the object's latest state, or nothing if it is gone
    or being deleted (the finalizer, ``erase_on_delete``, owns it then)."""
    latest = _latest(key)
    if latest is None:
        _WRITTEN.pop(key, None)
        return
    await _reconcile(key, latest)


def _latest(key: str) -> Latest | None:
    index = _INDEX.get("scope_latest")
    found = index.get(key) if index is not None else None
    latest = next(iter(found), None) if found else None
    return None if latest is None or latest.deleting else latest


KOPF_POSTING: Final[tuple[contextvars.ContextVar[Any], ...]] = (
    posting.settings_var, posting.event_queue_var, posting.event_queue_loop_var)
"""Kopf's private context variables that ``kopf.event`` reads (kopf/_core/engines/posting.py),
set by Kopf for its per-object tasks (kopf/_core/reactor/processing.py, running.py): what the
workers copy. tests/unit/test_scope_queue.py fails if a Kopf upgrade moves them."""


def _start_workers() -> None:
    """Start the workers on this loop, once. Started from a handler, not at start-up: they post
    Events (``kopf.event``), which reads Kopf's posting queue from the context Kopf sets for
    its per-object tasks only. Only those variables are copied (not the handler's cause)."""
    if lanes.SCOPES.running:
        return
    fresh = contextvars.Context()
    for var in KOPF_POSTING:
        value = var.get(None)
        if value is not None:  # (unset only outside a running Kopf, e.g. in unit tests)
            fresh.run(var.set, value)
    # The queue's workers are the reconcile slots: one per pooled store connection.
    lanes.SCOPES.start(RECONCILE_SLOTS.read(), _reconcile_key, backoff, fresh,
                       drained=heap.AfterBursts(lanes.SCOPES).drained, ready=prepopulation.lifted)


@kopf.on.resume(GROUP, VERSION, MEMORY_SCOPE.plural)
@kopf.on.create(GROUP, VERSION, MEMORY_SCOPE.plural)
@kopf.on.update(GROUP, VERSION, MEMORY_SCOPE.plural)
@gated
async def reconcile_scope(
    *, namespace: str, name: str, scope_latest: kopf.Index[Any, Any],
    consents_by_scope: kopf.Index[Any, Any], offboarding_principals: kopf.Index[Any, Any],
    **_: Any,
) -> None:
    """Queue the scope's key and return: Kopf's part is done. The handler returns None, so
    Kopf writes no result into the status (``progression.deliver_results``) and, having
    nothing to retry, moves its in-memory diff base on (``diffbase``): "handled" means the
    latest state is queued. The reconcile itself, its status write and its retries are the
    queue's (``lanes.SCOPES``); the body, cause and handler state go back to Kopf at once."""
    _INDEX.update(scope_latest=scope_latest, consents_by_scope=consents_by_scope,
                  offboarding_principals=offboarding_principals)
    _start_workers()
    lanes.SCOPES.add(f"{namespace}/{name}")


_READ: dict[str, frozenset[tuple[str, str, str]]] = {}
"""scope key → the consent index entries its latest run read (the index's own strings)."""


async def _reconcile(key: str, latest: Latest) -> None:
    """One run: decide what the scope's state is (``_decide``), then report it (``_report``)."""
    seen = json.loads(latest.status)
    status = {**seen, **_WRITTEN.get(key, {})}
    namespace, name = key.split("/", 1)
    records = sorted(_INDEX["consents_by_scope"].get((namespace, name), []))
    # What this run read of the consent index, before its first await: a consent so read
    # need not poke the scope (`_poke_needed`).
    _READ[key] = frozenset(records)
    decision = await _decide(of(latest.memo), key, latest, status, records)
    if decision is not None:
        await _report(key, latest, status, records, decision, seen=seen)


@dataclass(frozen=True, slots=True)
class Decision:
    """What a run found: the phase and reason to report, the status fields to write, the
    flow's outcome when it ran (its erasure's Event and the consent's receipt), and whether
    the queue runs the scope again (after its backoff)."""

    phase: ScopePhase
    reason: Reason
    fields: dict[str, Any]
    outcome: flow.Outcome | None = None
    retry: bool = False


async def _decide(ctx: OperatorContext, key: str, latest: Latest, status: dict[str, Any],
                  records: list[tuple[str, str, str]]) -> Decision | None:
    """The gates and, when they may run, the store's flow; None when the scope was deleted
    meanwhile (nothing to report: the finalizer's erasure stands)."""
    namespace, name = key.split("/", 1)
    generation, previous = latest.generation, status.get("conditions")
    scope = parse(MemoryScopeSpec, json.loads(latest.spec))
    consents = [_consent(r[2]) for r in records]
    verdict, standing = _verdict(ctx, scope, consents, _INDEX["offboarding_principals"])
    if scope is None:
        return Decision(ScopePhase.DISABLED, verdict.reason,
                        _status(ctx, generation, previous, ScopePhase.DISABLED, verdict.reason))
    route = None if ctx.model_routes is None else await ctx.model_routes.reason(
        ctx.kube(), scope.agent.namespace, scope.agent.name, ctx.memory_model_url)
    if ctx.store is None or (verdict.enabled and ctx.store_problem is not None):
        # Without the store nothing is fenced, and an earlier enablement may still stand
        # there: report a failure, not a disabled scope. A store unfit to grant (its settings
        # could log content) grants nothing, but a withdrawal still erases (below). Not
        # connected yet (start-up) or lost: retried with backoff, not left to the sweep's
        # next round (up to an hour).
        problem = ctx.store_problem or Reason.STORE_UNAVAILABLE
        return _failed(ctx, generation, previous, problem, route, retry=ctx.store is None)
    record = ScopeRecord.from_spec(namespace, name, scope)
    try:
        async with scope_lock(record.scope_key):  # The finalizer may overlap.
            if _latest(key) is None:  # Deleted (or being) while this run waited for the lock:
                return None  # the finalizer's erasure stands; granting now would undo it.
            outcome = await flow.reconcile(ctx.store, record, verdict,
                                           _int_or_none(status.get("consentGeneration")))
    except StoreRefusal as refusal:
        return _failed(ctx, generation, previous, refusal.reason, route, retry=True)
    return Decision(outcome.phase, outcome.reason,
                    _outcome_status(ctx, generation, previous, outcome, model_route=route,
                                    standing=standing), outcome,
                    retry=outcome.phase is ScopePhase.FAILED)


CONSENTS_PARSED: Final = 1024
"""Parsed consent specs kept (the latest versions used): bounded memory, one frozen model
each; a version read again past it is parsed again, which costs only time."""


@functools.lru_cache(maxsize=CONSENTS_PARSED)
def _consent(compact: str) -> ConsentRecordSpec | None:
    """A consent index entry's spec, parsed once per version of the record: the entry's
    compact JSON is the version (a changed record is a new string), and the model is frozen.
    A resync, a retry or a poke of its scope reads the same version again."""
    return parse(ConsentRecordSpec, json.loads(compact))


def _failed(ctx: OperatorContext, generation: int, previous: list[dict[str, Any]] | None,
            reason: Reason, route: Reason | None, *, retry: bool) -> Decision:
    return Decision(ScopePhase.FAILED, reason, _status(
        ctx, generation, previous, ScopePhase.FAILED, reason, model_route=route), retry=retry)


async def _report(key: str, latest: Latest, status: dict[str, Any],
                  records: list[tuple[str, str, str]], decision: Decision, *,
                  seen: dict[str, Any]) -> None:
    """The one place a run reports: its transition noted (announced once the watch shows the
    write, so noted before it), its status written, the erasure's Event and the consent's
    receipt when the flow ran, then a retry asked of the queue if the run failed."""
    namespace, name = key.split("/", 1)
    api = of(latest.memo).kube()
    # Against the status the watch has shown, not ours over it: a run right after our own
    # unseen write would otherwise find its transition "already shown" and drop the Event.
    _announce(latest.memo, seen, decision.phase, decision.reason)
    await _commit(api, key, status, decision.fields)
    outcome = decision.outcome
    if outcome is not None and outcome.erasure is not None and outcome.last_erasure is not None:
        receipt = outcome.erasure
        kopf.event(_reference(namespace, name, latest.uid),
                   type="Normal" if receipt.verified else "Warning",
                   reason="ErasureVerified" if receipt.verified else "ErasureFailed",
                   message=f"receipt {receipt.id} generation {receipt.generation} "
                           f"reason {outcome.last_erasure.reason_code}")
    if outcome is not None and records and (outcome.granted or outcome.erasure is not None):
        await _receipt(api, namespace, records[-1][1], outcome)
    if decision.retry:
        raise wq.Retry(decision.reason)


def _reference(namespace: str, name: str, uid: str) -> kopf.Body:
    """What an Event names of a scope (Kopf's object reference), without its body."""
    return kopf.Body({"apiVersion": f"{GROUP}/{VERSION}", "kind": MEMORY_SCOPE.kind,
                      "metadata": {"namespace": namespace, "name": name, "uid": uid}})


@kopf.on.delete(GROUP, VERSION, MEMORY_SCOPE.plural)
@gated
async def erase_on_delete(
    *, namespace: str, name: str, spec: kopf.Spec, memo: kopf.Memo, retry: int = 0, **_: Any
) -> None:
    """The finalizer: the CR goes away only after its memory is erased and verified. On the
    erasure lane: no reconcile slot, the erasure pool on its own loop (``controller.lanes``)."""
    _READ.pop(f"{namespace}/{name}", None)
    _WRITTEN.pop(f"{namespace}/{name}", None)
    store = of(memo).erasure_store
    scope = parse(MemoryScopeSpec, spec)
    if store is None or scope is None:
        return  # Nothing of it can be in a store this operator writes.
    record = ScopeRecord.from_spec(namespace, name, scope)
    try:
        async with scope_lock(record.scope_key):
            outcome = await lanes.on_erasure_lane(flow.erase_for_deletion(store, record))
    except StoreRefusal as refusal:
        raise kopf.TemporaryError(refusal.reason.value, delay=backoff(retry)) from None
    if outcome.phase is ScopePhase.FAILED:
        raise kopf.TemporaryError(outcome.reason.value, delay=backoff(retry))


def _verdict(ctx: OperatorContext, scope: MemoryScopeSpec | None,
             consents: list[ConsentRecordSpec | None],
             offboarding_principals: kopf.Index[Any, Any]) -> tuple[Verdict, Reason]:
    """The gates' verdict, and what consent alone says now (ConsentGated's reason)."""
    if scope is None or any(c is None for c in consents):
        return Verdict(Posture.FULLY_DISABLED, Reason.INVALID_SPEC), Reason.INVALID_SPEC
    valid = [c for c in consents if c is not None]
    principal = (scope.subject.mxid, scope.subject.origin_kind.value)
    env = Environment(local_homeserver=ctx.local_homeserver, store_ready=ctx.store is not None,
                      offboarding=principal in offboarding_principals,
                      appservice=ctx.appservice)
    return evaluate(scope, valid, env), consent_standing(scope, valid, env)


def _int_or_none(value: Any) -> int | None:
    return int(value) if isinstance(value, int) else None


def _announce(memo: kopf.Memo, status: kopf.Status, phase: ScopePhase, reason: Reason) -> None:
    """One Kubernetes event per phase change, once its status is written
    (``common.announce``); the message is the reason code only."""
    announce(memo, status, Transition(
        phase.value, f"reason {reason.value}", warning=phase is ScopePhase.FAILED,
        fields=(("phase", phase.value), ("reasonCode", reason.value))))


announced(MEMORY_SCOPE.plural)


def _status(
    ctx: OperatorContext, generation: int, previous: list[dict[str, Any]] | None,
    phase: ScopePhase, reason: Reason, *, gated: Reason | None = None,
    model_route: Reason | None = None,
) -> dict[str, Any]:
    """Status for the webhook's memory gate too: StoreReady, ConsentGated, schema version;
    ModelRouteGoverned for the scope's Agent (left as it was while it cannot be read).

    ``gated``: the scope's store record is in place (the flow ran), with what consent says
    now; None when the flow did not run, and ConsentGated is then False with ``reason``."""
    enabled = phase is ScopePhase.ENABLED
    # A store that refuses with STORE_UNAVAILABLE is not ready, whether or not it connected
    # once; nor is one whose settings could write content to its log.
    problem, cleanup = ctx.store_problem, ctx.cleanup
    store_ready = (ctx.store is not None and problem is None
                   and reason is not Reason.STORE_UNAVAILABLE)
    SCOPE_TRANSITIONS.labels(phase=phase.value, reason=reason.value).inc()
    return {
        "phase": phase.value,
        "reasonCode": reason.value,
        "observedGeneration": generation,
        "storeSchemaVersion": ctx.store_schema_version,
        "conditions": merge_conditions(
            previous,
            condition("Enabled", enabled, reason, generation, previous),
            # Ready: reconciled, whether enabled or disabled as consent says; not when Failed.
            ready(phase is not ScopePhase.FAILED, reason, generation, previous),
            condition("StoreReady", store_ready,
                      Reason.OK if store_ready else problem or Reason.STORE_UNAVAILABLE,
                      generation,
                      previous),
            # True: the scope record exists in the store's fence, so every read and write is
            # checked by the database against the current consent generation (what the
            # webhook's memory gate needs; consent itself is checked per request). Its reason
            # is what consent says now: OK while granted, else e.g. CONSENT_WITHDRAWN.
            condition("ConsentGated", gated is not None, reason if gated is None else gated,
                      generation, previous),
            *([] if model_route is None else [condition(
                "ModelRouteGoverned", model_route is Reason.OK, model_route, generation,
                previous)]),
            # The store-wide physical deletion of expired rows (ADR 0023 §27: within 24 h)
            # ran, or why it failed; shown on every scope, as StoreReady is.
            *([] if cleanup is None else [condition(
                "ExpiryCleanup", cleanup is Reason.OK, cleanup, generation, previous)]),
        ),
    }


def _outcome_status(
    ctx: OperatorContext, generation: int, previous: list[dict[str, Any]] | None,
    outcome: flow.Outcome, *, model_route: Reason | None, standing: Reason,
) -> dict[str, Any]:
    fields = _status(ctx, generation, previous, outcome.phase, outcome.reason, gated=standing,
                     model_route=model_route)
    fields["consentGeneration"] = outcome.generation
    fields["entryCount"] = outcome.entry_count
    fields["recallWithheld"] = [{"reasonCode": reason.value, "count": n}
                                for reason, n in outcome.recall_withheld]
    fields["hardExpiry"] = (outcome.hard_expiry.strftime("%Y-%m-%dT%H:%M:%SZ")
                            if outcome.hard_expiry else None)
    if outcome.last_erasure is not None:
        fields["lastErasure"] = outcome.last_erasure.wire()
    return fields


async def _commit(api: ApiClient, key: str, status: dict[str, Any],
                  fields: dict[str, Any]) -> None:
    """Write ``fields`` with one status-subresource PATCH, only if one differs from the
    status: a resync that finds everything as recorded writes nothing."""
    if not differs(status, fields):
        SCOPE_STATUS_WRITES.labels(result="unchanged").inc()
        return
    namespace, name = key.split("/", 1)
    if await kube.patch_status(api, group=GROUP, version=VERSION, plural=MEMORY_SCOPE.plural,
                               namespace=namespace, name=name, status=fields) is None:
        return  # Gone: its next run finds no state and drops the key.
    _WRITTEN[key] = {**_WRITTEN.get(key, {}), **fields}
    SCOPE_STATUS_WRITES.labels(result="written").inc()


async def _receipt(api: ApiClient, namespace: str, consent: str, outcome: flow.Outcome) -> None:
    """A content-free receipt on the ConsentRecord that caused the change, its Ready
    condition (True once applied) and one event, reported as the product."""
    applied = outcome.phase is not ScopePhase.FAILED
    receipt = {
        "id": outcome.erasure.id if outcome.erasure else uuid.uuid4().hex,
        "generation": outcome.generation,
        "result": "Applied" if applied else "Refused",
        "reasonCode": outcome.reason.value,
        "time": now(),
    }
    record = await kube.get_object(api, group=GROUP, version=VERSION,
                                   plural=CONSENT_RECORD.plural, namespace=namespace,
                                   name=consent)
    if record is None:
        return
    previous = (record.get("status") or {}).get("conditions")
    generation = int((record.get("metadata") or {}).get("generation", 0))
    conditions = merge_conditions(previous, ready(applied, outcome.reason, generation, previous))
    if await kube.patch_status(api, group=GROUP, version=VERSION, plural=CONSENT_RECORD.plural,
                               namespace=namespace, name=consent,
                               status={"receipt": receipt, "conditions": conditions}) is None:
        return  # The record is gone: no receipt was recorded, so none is announced.
    kopf.event(record, type="Normal" if applied else "Warning",
               reason="Applied" if applied else "Refused",
               message=f"receipt generation {outcome.generation} reason {outcome.reason.value}")


def _poke_needed(namespace: str, name: str, spec: kopf.Spec, record: ConsentRecordSpec,
                 consents_by_scope: kopf.Index[Any, Any]) -> bool:
    """False only when the scope's reconcile is sure to have read, or to read, this record as
    it is now. Kopf indexes each event before it runs that event's handlers
    (kopf/_core/reactor/processing.py), so the index holds it; and either the scope's latest
    reconcile read this very entry (`_READ`: its outcome, in progress or done, follows from it;
    one that fails is retried by the queue and reads again), or its run is queued and still
    to start (`lanes.waiting_for_slot`: it reads the index when it starts, before any
    await). A later change of the record is a new event with a handler of its own;
    its deletion pokes (`sweep.consent_deleted`). Unsure: poke. A creation burst otherwise
    poked nearly every scope once more, each poke a PATCH and a reconcile of their own."""
    scope = record.scope_ref.name
    key = f"{namespace}/{scope}"
    held: Iterable[tuple[str, str, str]] = consents_by_scope.get((namespace, scope), [])
    compact = _compact(spec)
    entry = next((e for e in held if e[1] == name and e[2] == compact), None)
    return entry is None or not (entry in _READ.get(key, ()) or lanes.waiting_for_slot(key))


@kopf.on.create(GROUP, VERSION, CONSENT_RECORD.plural)
@kopf.on.update(GROUP, VERSION, CONSENT_RECORD.plural)
@kopf.on.resume(GROUP, VERSION, CONSENT_RECORD.plural)
@gated
async def reconcile_consent(*, spec: kopf.Spec, retry: int = 0, **kwargs: Any) -> None:
    record = parse(ConsentRecordSpec, spec)  # Once, for the check and the validation.
    if retry == 0 and _settled(record, **kwargs):
        # Nothing to write and nothing to poke (a restart's resume of every handled record):
        # no slot. 10,000 records waiting for one held as many handler states at once.
        return
    async with lanes.reconcile_slot(backoff(retry)):  # Bounded with the scopes' work.
        await _validate_consent(record, spec=spec, retry=retry, **kwargs)


def _settled(record: ConsentRecordSpec | None, *, meta: kopf.Meta, status: kopf.Status,
             **_: Any) -> bool:
    """A first run that would neither write the status nor poke (`_validate_consent`);
    ``record``: the parsed spec."""
    if not handled(status, meta):
        return False
    return not differs(status, _consent_fields(record, meta, status))


def _consent_fields(record: ConsentRecordSpec | None, meta: kopf.Meta,
                    status: kopf.Status) -> dict[str, Any]:
    """The status a ConsentRecord's validation writes: Valid, and Ready False when invalid."""
    generation = int(meta.get("generation", 0))
    valid = record is not None
    previous = status.get("conditions")
    checked = condition("Valid", valid, Reason.OK if valid else Reason.INVALID_SPEC, generation,
                        previous)
    # Ready comes with the receipt the scope writes; an invalid record is never ready.
    updates = [checked] if valid else [checked, ready(False, Reason.INVALID_SPEC, generation,
                                                       previous)]
    return {"observedGeneration": generation,
            "conditions": merge_conditions(previous, *updates)}


async def _validate_consent(
    record: ConsentRecordSpec | None, *, namespace: str, name: str, spec: kopf.Spec,
    meta: kopf.Meta, status: kopf.Status, memo: kopf.Memo,
    consents_by_scope: kopf.Index[Any, Any], retry: int = 0, **_: Any,
) -> None:
    """Validate the record (``record``: its parsed spec, None when invalid) and poke its scope
    so the scope re-evaluates its gates.

    A record whose status already shows this generation handled was poked for by an earlier
    run: after a restart Kopf indexes every record before any scope handler runs, so each scope
    sees it without a poke (1,000 consents would otherwise cost 1,000 PATCHes and as many scope
    reconciliations per restart). A retry pokes whatever the status says: the earlier run
    wrote the status, then its poke failed (an API error), and nothing else would have the
    scope look at the record (its store facts are unchanged, so the sweep finds nothing).
    Kopf retries until the poke is accepted; giving up could leave a withdrawn consent's scope
    Enabled. Neither pokes a scope sure to read the record anyway (`_poke_needed`).
    """
    # Built now, not taken from `_settled`: a condition that changes is stamped with the time
    # it is written, after the wait for a slot.
    fields = _consent_fields(record, meta, status)
    poke = record is not None and (retry > 0 or not handled(status, meta)) and _poke_needed(
        namespace, name, spec, record, consents_by_scope)
    api = of(memo).kube()
    # Written before the poke, not through Kopf's patch after the handler: the scope may write
    # the receipt (and Ready) first, and a later patch of the whole list would drop it.
    if differs(status, fields):
        await kube.patch_status(api, group=GROUP, version=VERSION, plural=CONSENT_RECORD.plural,
                                namespace=namespace, name=name, status=fields)
    if poke and record is not None:
        await kube.annotate(api, group=GROUP, version=VERSION, plural=MEMORY_SCOPE.plural,
                            namespace=namespace, name=record.scope_ref.name,
                            annotations={POKE: revision()})
