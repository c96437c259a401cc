"""The MemoryScope work queue (issue 39): Kopf's handler only queues the scope's key; the
queue's workers reconcile each key from its latest indexed state, once however many events
came, hold a key and not a body per queued scope, and retry a failed run (its status Failed)."""

from __future__ import annotations

import asyncio
import contextvars
import gc
import inspect
import json
import weakref
from collections.abc import AsyncIterator
from typing import Any

import kopf
import pytest
from kopf._core import reactor
from kopf._core.engines import posting
from prometheus_client import REGISTRY

from fgentic_governance.api.memory import ConsentRecordSpec, ScopePhase
from fgentic_governance.consent import flow
from fgentic_governance.controller import kube_calls as kube_api
from fgentic_governance.controller import prepopulation
from fgentic_governance.controller.handlers import common, memoryscope
from fgentic_governance.controller.handlers.common import parse
from fgentic_governance.controller.handlers.memoryscope import Latest, reconcile_scope
from fgentic_governance.controller.lanes import SCOPES
from fgentic_governance.controller.tuning import RECONCILE_SLOTS
from fgentic_governance.controller.workqueue import Retry
from fgentic_governance.memory import StoreRefusal
from fgentic_governance.reasons import Reason
from tests.support.objects import consent_obj, scope_obj
from tests.support.operator_memo import operator_memo
from tests.support.polling import until_async

NS = "queue"
SPEC = scope_obj(NS, "s", "@alice:fgentic.local")["spec"]


class Held(dict[str, Any]):
    """A body part whose release a weak reference shows (a plain dict takes none)."""


def _latest(generation: int = 1, spec: dict[str, Any] = SPEC, **context: Any) -> Latest:
    """The scope's indexed state; its Kopf memo holds an operator context with ``context``."""
    return Latest("uid-1", generation, False, json.dumps(spec), "{}", operator_memo(**context))


async def _event(name: str, index: dict[str, list[Latest]], **kopf_kwargs: Any) -> None:
    """What Kopf calls for a MemoryScope event (the indices by name, as Kopf passes them)."""
    await reconcile_scope(namespace=NS, name=name, scope_latest=index, consents_by_scope={},
                          offboarding_principals={}, retry=0, **kopf_kwargs)


@pytest.fixture
async def idle() -> AsyncIterator[None]:
    yield
    SCOPES.stop()
    memoryscope._INDEX.clear()
    memoryscope._WRITTEN.clear()
    memoryscope._READ.clear()


async def _drained() -> None:
    await until_async(lambda: SCOPES.held() == 0, "the queue drained", 15)


async def test_a_burst_of_events_for_one_scope_is_reconciled_twice_from_the_latest(
    idle: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs: list[int] = []
    release, started = asyncio.Event(), asyncio.Event()

    async def reconcile(key: str, latest: Latest) -> None:
        runs.append(latest.generation)
        started.set()
        await release.wait()

    monkeypatch.setattr(memoryscope, "_reconcile", reconcile)
    index = {f"{NS}/s": [_latest(1)]}
    await _event("s", index)
    async with asyncio.timeout(10):
        await started.wait()
    assert not SCOPES.pending(f"{NS}/s")  # running: it read its state already
    for generation in range(2, 52):  # 50 more events while the first run is in progress
        index[f"{NS}/s"] = [_latest(generation)]
        await _event("s", index)
    assert SCOPES.pending(f"{NS}/s")  # a run is still to start: it will read the latest
    release.set()
    await _drained()
    assert runs == [1, 51]  # the run in progress, then one run that read the latest state
    assert not SCOPES.pending(f"{NS}/s")


async def test_no_run_starts_before_kopf_has_indexed_every_listed_object(
    idle: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A restart's scope handlers run before Kopf's barrier lifts (MemoryScope is ungated,
    controller/prepopulation.py); the runs, which read every index, wait for it, queued."""
    runs: list[int] = []
    barrier = asyncio.Event()

    async def lifted() -> None:
        await barrier.wait()

    async def reconcile(key: str, latest: Latest) -> None:
        runs.append(latest.generation)

    monkeypatch.setattr(prepopulation, "lifted", lifted)
    monkeypatch.setattr(memoryscope, "_reconcile", reconcile)
    await _event("s", {f"{NS}/s": [_latest(1)]})
    for _ in range(20):
        await asyncio.sleep(0)
    assert runs == []
    assert SCOPES.pending(f"{NS}/s")  # still queued: a consent's handler need not poke it
    barrier.set()
    await _drained()
    assert runs == [1]


async def test_a_queued_scope_holds_its_key_not_its_body(
    idle: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    release = asyncio.Event()

    async def reconcile(key: str, latest: Latest) -> None:
        await release.wait()  # every worker busy: the rest stay queued

    monkeypatch.setattr(memoryscope, "_reconcile", reconcile)
    index = {f"{NS}/s{i}": [_latest()] for i in range(200)}
    parts: list[weakref.ref[Held]] = []
    for i in range(200):
        body = Held(spec=Held(SPEC), status=Held(), metadata=Held(generation=1))
        parts += [weakref.ref(body), weakref.ref(body["spec"]), weakref.ref(body["status"])]
        # Every handler returns at once (it awaits no slot), whatever the workers do.
        async with asyncio.timeout(10):
            await _event(f"s{i}", index, body=body, spec=body["spec"], status=body["status"],
                         meta=body["metadata"])
        del body
    gc.collect()
    assert [ref for ref in parts if ref() is not None] == []
    await until_async(lambda: len(SCOPES) == 200 - RECONCILE_SLOTS.read(), "workers busy", 15)
    assert SCOPES.held() == 200  # the queued keys and the runs in progress
    release.set()
    await _drained()


async def test_a_failed_run_is_retried_with_its_status_failed_meanwhile(
    idle: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    attempts: list[int] = []
    written: list[dict[str, Any]] = []

    async def reconcile(store: Any, record: Any, verdict: Any, recorded: int | None
                        ) -> flow.Outcome:
        attempts.append(len(attempts))
        if len(attempts) < 3:
            raise StoreRefusal(Reason.STORE_UNAVAILABLE)
        return flow.Outcome(ScopePhase.ENABLED, Reason.OK, 3, 0)

    async def patch_status(_api: Any, **kwargs: Any) -> str:
        written.append(kwargs["status"])
        return str(len(written))

    monkeypatch.setattr(memoryscope.flow, "reconcile", reconcile)
    monkeypatch.setattr(kube_api, "patch_status", patch_status)
    monkeypatch.setattr(memoryscope, "backoff", lambda failures: 0.0)
    await _event("s", {f"{NS}/s": [_latest(store=object())]})
    await _drained()
    assert len(attempts) == 3
    # Failed closed at once (Enabled False), written once: the second failure found the
    # status it wrote (not yet seen on a watch) already saying so.
    assert [(w["phase"], w["reasonCode"]) for w in written] == [
        ("Failed", "STORE_UNAVAILABLE"), ("Enabled", "OK")]
    enabled = next(c for c in written[0]["conditions"] if c["type"] == "Enabled")
    assert enabled["status"] == "False"


async def test_a_run_after_its_own_unseen_write_keeps_the_transition_to_announce(
    idle: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression (CI on c5d714a, test_operator_shards): a second failed run read its own
    unseen Failed write over the indexed status, found the transition "shown" and dropped it
    from the memo before the watch showed the write: no Event was ever posted."""
    attempts: list[int] = []

    async def reconcile(store: Any, record: Any, verdict: Any, recorded: int | None
                        ) -> flow.Outcome:
        attempts.append(len(attempts))
        raise StoreRefusal(Reason.STORE_UNAVAILABLE)

    async def patch_status(_api: Any, **kwargs: Any) -> str:
        return "1"

    monkeypatch.setattr(memoryscope.flow, "reconcile", reconcile)
    monkeypatch.setattr(kube_api, "patch_status", patch_status)
    monkeypatch.setattr(memoryscope, "backoff", lambda failures: 0.0 if failures < 1 else 3600.0)
    retries = _sample("fgentic_workqueue_retries_total")
    latest = _latest(store=object())  # Its status stays "{}": the watch never shows the write here.
    await _event("s", {f"{NS}/s": [latest]})
    await until_async(lambda: _sample("fgentic_workqueue_retries_total") - retries >= 2,
                      "two failed runs reported", 15)
    assert len(attempts) == 2
    pending = latest.memo.get(common.PENDING)
    assert isinstance(pending, common.Transition), "the Failed transition was dropped"
    assert dict(pending.fields) == {"phase": "Failed", "reasonCode": "STORE_UNAVAILABLE"}


async def test_a_queued_scope_gone_before_its_run_is_dropped(
    idle: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs: list[str] = []

    async def reconcile(key: str, latest: Latest) -> None:
        runs.append(key)

    monkeypatch.setattr(memoryscope, "_reconcile", reconcile)
    deleting = Latest("uid-2", 1, True, json.dumps(SPEC), "{}", {})
    await _event("gone", {})  # deleted: no longer indexed
    await _event("deleting", {f"{NS}/deleting": [deleting]})  # the finalizer's
    await _drained()
    assert runs == []


def _sample(name: str) -> float:
    return REGISTRY.get_sample_value(name, {"queue": SCOPES.name}) or 0.0


async def test_the_queue_reports_its_depth_runs_retries_and_waits(
    idle: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The work queue's metrics (docs/observability.md), labelled by the queue's name only."""
    release = asyncio.Event()
    failed: set[str] = set()

    async def reconcile(key: str, latest: Latest) -> None:
        await release.wait()  # every worker busy: the rest stay queued
        if key == f"{NS}/s0" and key not in failed:  # one failed run, retried once
            failed.add(key)
            raise memoryscope.wq.Retry(Reason.STORE_UNAVAILABLE)

    monkeypatch.setattr(memoryscope, "_reconcile", reconcile)
    monkeypatch.setattr(memoryscope, "backoff", lambda failures: 0.0)
    waited, retries = (_sample("fgentic_workqueue_queue_duration_seconds_count"),
                       _sample("fgentic_workqueue_retries_total"))
    index = {f"{NS}/s{i}": [_latest()] for i in range(20)}
    for i in range(20):
        await _event(f"s{i}", index)
    slots = RECONCILE_SLOTS.read()
    await until_async(lambda: _sample("fgentic_workqueue_running") == slots, "workers busy", 15)
    assert _sample("fgentic_workqueue_depth") == 20 - slots
    release.set()
    await _drained()
    assert (_sample("fgentic_workqueue_depth"), _sample("fgentic_workqueue_running")) == (0, 0)
    assert _sample("fgentic_workqueue_retries_total") - retries == 1
    # One wait observed per run started: 20 keys and the retried one.
    assert _sample("fgentic_workqueue_queue_duration_seconds_count") - waited == 21


async def test_kopf_still_posts_the_events_of_a_worker(
    idle: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The workers post Events (``kopf.event``) through Kopf's private posting variables,
    copied from the handler that started them (``memoryscope.KOPF_POSTING``). A Kopf upgrade
    that renames, moves or stops setting them fails here, not silently in a cluster (an Event
    posted from a worker would be lost, its run retried)."""
    names = ("settings_var", "event_queue_var", "event_queue_loop_var")
    assert [getattr(posting, n) for n in names] == list(memoryscope.KOPF_POSTING)
    assert all(isinstance(v, contextvars.ContextVar) for v in memoryscope.KOPF_POSTING)
    # Kopf sets them for its per-object tasks, where our handler runs and starts the workers.
    processing, running = (inspect.getsource(m) for m in (reactor.processing, reactor.running))
    assert "posting.event_queue_var.set(" in processing
    assert "posting.event_queue_loop_var.set(" in processing
    assert "posting.settings_var.set(" in running

    async def reconcile(key: str, latest: Latest) -> None:
        seen.append(cause.get(None))
        kopf.event(memoryscope._reference(NS, key.split("/")[1], latest.uid), type="Normal",
                   reason="Probe", message="reason OK")

    seen: list[object] = []
    cause: contextvars.ContextVar[object] = contextvars.ContextVar("cause")
    monkeypatch.setattr(memoryscope, "_reconcile", reconcile)
    queue: asyncio.Queue[posting.K8sEvent] = asyncio.Queue()

    async def kopf_object_task() -> None:  # as Kopf runs a handler (processing.py)
        posting.settings_var.set(kopf.OperatorSettings())
        posting.event_queue_loop_var.set(asyncio.get_running_loop())
        posting.event_queue_var.set(queue)
        cause.set("the handler's cause")
        await _event("s", {f"{NS}/s": [_latest()]})

    await asyncio.create_task(kopf_object_task(), context=contextvars.Context())
    posted = await asyncio.wait_for(queue.get(), 10)  # Kopf's poster would send it
    assert (posted.reason, posted.ref["name"], posted.ref["uid"]) == ("Probe", "s", "uid-1")
    assert seen == [None]  # the handler's own context is not carried into the worker


async def test_a_consent_is_parsed_once_per_version(
    idle: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A scope's runs parse each consent index entry's JSON once per version of the record
    (review of issue 41 item 7), not once per run: a resync, a retry or a poke re-reads it."""
    parsed: list[str] = []

    def counting(model: type[Any], spec: Any) -> Any:
        if model is ConsentRecordSpec:
            parsed.append(spec["decision"])
        return parse(model, spec)

    async def patch_status(_api: Any, **_: Any) -> str:
        return "1"

    monkeypatch.setattr(memoryscope, "parse", counting)
    monkeypatch.setattr(kube_api, "patch_status", patch_status)
    memoryscope._consent.cache_clear()
    record = consent_obj(NS, "s", "@alice:fgentic.local")

    def version(decision: str) -> None:
        spec = {**record["spec"], "decision": decision}
        memoryscope._INDEX["consents_by_scope"] = {
            (NS, "s"): [("2026-12-07T00:00:00Z", record["metadata"]["name"],
                         json.dumps(spec, separators=(",", ":")))]}

    memoryscope._INDEX["offboarding_principals"] = {}
    for decision in ("granted", "granted", "granted", "withdrawn", "withdrawn"):
        version(decision)
        with pytest.raises(Retry):  # No store: each run fails closed, after reading.
            await memoryscope._reconcile(f"{NS}/s", _latest())
    assert parsed == ["granted", "withdrawn"]
