"""A ConsentRecord pokes its MemoryScope only when the scope's reconcile could miss the record
(issue 39): not when the scope's run is queued and still to start (it reads the consent index
when it starts) nor when its latest run read this very record; unsure, it pokes.

Real pieces: the handlers, the index function, the scope work queue and its one worker (the
one reconcile slot), the scope's run without a store; the API calls are replaced by recorders,
and a blocker scope's run holds the worker while the test says."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import kopf
import pytest

from fgentic_governance.controller import kube_calls as kube_api
from fgentic_governance.controller import lanes
from fgentic_governance.controller.handlers import memoryscope, offboarding
from fgentic_governance.controller.tuning import RECONCILE_SLOTS
from fgentic_governance.controller.workqueue import Retry
from tests.support.objects import scope_obj
from tests.support.operator_memo import operator_memo, unsent_client
from tests.support.polling import until_async

BOUND = 10.0  # seconds: every wait below is bounded
NS, SCOPE, RECORD = "team", "alice-prefs", "alice-prefs-grant"
BLOCKER = "blocker"
GRANTED = {"scopeRef": {"name": SCOPE},
           "subject": {"mxid": "@alice:fgentic.local", "originKind": "native-local"},
           "purpose": "personal-preferences", "policyVersion": "2026-11", "decision": "granted"}
WITHDRAWN = {**GRANTED, "decision": "withdrawn"}
Index = dict[tuple[str, str], list[tuple[str, str, str]]]


def _record(spec: dict[str, Any]) -> kopf.Body:
    return kopf.Body({"metadata": {"namespace": NS, "name": RECORD, "generation": 1,
                                   "creationTimestamp": "2026-12-06T23:00:00Z"},
                      "spec": spec, "status": {}})


async def _index(*specs: dict[str, Any]) -> Index:
    """The consent index as Kopf holds it once it has indexed these versions' events (the
    last one current), built by the real index function."""
    index: Index = {}
    for spec in specs:
        body = _record(spec)
        entries = await memoryscope.consents_by_scope(namespace=NS, spec=body.spec, meta=body.meta)
        index = {key: [value] for key, value in entries.items()}
    return index


class Recorder:
    """The API calls the consent handler made, and what each scope reconcile read."""

    def __init__(self) -> None:
        self.pokes: list[str] = []
        self.reads: list[list[tuple[str, str, str]]] = []
        self.release = asyncio.Event()
        self.held = asyncio.Event()
        self.original = memoryscope._reconcile

    async def annotate(self, _api: Any, *, plural: str, name: str, **_: Any) -> None:
        self.pokes.append(f"{plural}/{name}")

    async def patch_status(self, _api: Any, **_: Any) -> str:
        return "1"

    async def reconcile(self, key: str, latest: Any) -> None:
        if key == f"{NS}/{BLOCKER}":  # holds the one worker (a creation burst)
            self.held.set()
            await self.release.wait()
            return
        # The real run, which reads the index before any await (no store: it writes Failed
        # and asks for a retry, which the test does not need).
        self.reads.append(sorted(memoryscope._INDEX["consents_by_scope"].get((NS, SCOPE), [])))
        with contextlib.suppress(Retry):
            await self.original(key, latest)


@pytest.fixture
async def api(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Recorder]:
    recorder = Recorder()
    monkeypatch.setattr(kube_api, "annotate", recorder.annotate)
    monkeypatch.setattr(kube_api, "patch_status", recorder.patch_status)
    monkeypatch.setattr(memoryscope, "_reconcile", recorder.reconcile)
    monkeypatch.setattr(memoryscope, "_READ", {}, raising=False)  # (raising: before issue 39)
    monkeypatch.setenv(RECONCILE_SLOTS.env, "1")  # one slot: the test holds it or not
    lanes.open_lanes()
    yield recorder
    lanes.close_lanes()  # (and the scope queue's workers)
    memoryscope._WRITTEN.clear()


async def _validate(spec: dict[str, Any], index: Index, retry: int = 0) -> None:
    body = _record(spec)
    await memoryscope._validate_consent(
        memoryscope.parse(memoryscope.ConsentRecordSpec, body.spec), namespace=NS,
        name=RECORD, spec=body.spec, meta=body.meta, status=body.status, memo=operator_memo(),
        consents_by_scope=index, retry=retry)


def _latest(name: str) -> memoryscope.Latest:
    spec = scope_obj(NS, name, "@alice:fgentic.local")["spec"]
    return memoryscope.Latest(f"uid-{name}", 1, False, json.dumps(spec), "{}",
                              operator_memo())  # No store: a run writes Failed.


LATEST = {f"{NS}/{name}": [_latest(name)] for name in (SCOPE, BLOCKER, "other")}


async def _queue(name: str, index: Index) -> None:
    """Kopf's scope handler for an event of ``name`` (it queues the key and returns)."""
    await memoryscope.reconcile_scope(namespace=NS, name=name, scope_latest=LATEST,
                                      consents_by_scope=index, offboarding_principals={})


async def _reconcile_scope(index: Index) -> None:
    """An event of the scope, and its run to the end."""
    await _queue(SCOPE, index)
    await until_async(lambda: lanes.SCOPES.held() == 0, "the scope's run", BOUND)


@contextlib.asynccontextmanager
async def _busy(api: Recorder) -> AsyncIterator[None]:
    """Every worker busy (the one worker runs the blocker) until the block ends."""
    await _queue(BLOCKER, {})
    await asyncio.wait_for(api.held.wait(), BOUND)
    try:
        yield
    finally:
        api.release.set()


async def _waiting(index: Index) -> asyncio.Future[None]:
    """The scope's run, queued behind the blocker's (the caller holds it busy)."""
    scope = asyncio.ensure_future(_reconcile_scope(index))
    for _ in range(5):
        await asyncio.sleep(0)
    assert lanes.waiting_for_slot(f"{NS}/{SCOPE}") and not scope.done()
    return scope


@pytest.mark.parametrize("retry", [0, 1], ids=["first-run", "retry"])
async def test_a_consent_validated_while_its_scope_waits_for_a_slot_does_not_poke(
        api: Recorder, retry: int) -> None:
    index = await _index(GRANTED)
    async with _busy(api):  # every slot busy (a creation burst)
        scope = await _waiting(index)
        await _validate(GRANTED, index, retry)
        assert api.pokes == []
    await asyncio.wait_for(scope, BOUND)
    assert api.reads == [index[(NS, SCOPE)]]  # it read the record once it had its slot
    assert not lanes.waiting_for_slot(f"{NS}/{SCOPE}")


async def test_a_consent_its_scope_already_read_does_not_poke(api: Recorder) -> None:
    index = await _index(GRANTED)
    await asyncio.wait_for(_reconcile_scope(index), BOUND)  # read it, before the consent ran
    await _validate(GRANTED, index)
    assert api.pokes == []


async def test_a_consent_its_scope_has_not_read_pokes(api: Recorder) -> None:
    await asyncio.wait_for(_reconcile_scope({}), BOUND)  # before the record was indexed
    await _validate(GRANTED, await _index(GRANTED))
    assert api.pokes == [f"memoryscopes/{SCOPE}"]


async def test_a_changed_consent_pokes_though_its_scope_read_the_earlier_version(
        api: Recorder) -> None:
    await asyncio.wait_for(_reconcile_scope(await _index(GRANTED)), BOUND)
    await _validate(WITHDRAWN, await _index(GRANTED, WITHDRAWN))
    assert api.pokes == [f"memoryscopes/{SCOPE}"]


async def test_a_waiting_scope_is_poked_when_the_index_lacks_the_record(api: Recorder) -> None:
    # Unsure (the index does not hold this version): poke, even though the scope will read.
    async with _busy(api):
        scope = await _waiting(await _index(GRANTED))
        await _validate(WITHDRAWN, await _index(GRANTED))
        assert api.pokes == [f"memoryscopes/{SCOPE}"]
    await asyncio.wait_for(scope, BOUND)


async def test_a_scope_that_has_its_slot_is_not_counted_as_waiting(api: Recorder) -> None:
    async with _busy(api):  # the blocker's run has started: it holds its slot
        assert not lanes.waiting_for_slot(f"{NS}/{BLOCKER}")


async def test_an_offboarding_pokes_only_the_scopes_not_waiting_for_a_slot(
        api: Recorder) -> None:
    # The same for `poke_scopes` (offboarding, posture floors): the store is erased before it
    # is called, and a waiting scope reads the store and the indices once it has its slot.
    async with _busy(api):
        scope = await _waiting({})
        await offboarding.poke_scopes(unsent_client(), [f"{NS}/{SCOPE}", f"{NS}/other"])
        assert api.pokes == ["memoryscopes/other"]
    await asyncio.wait_for(scope, BOUND)


async def test_a_handled_record_resumed_takes_no_slot(api: Recorder) -> None:
    """A restart resumes every record: one already handled, with nothing to write or poke,
    returns without a reconcile slot; one still to handle waits for the slot."""
    body = _record(GRANTED)
    record = memoryscope.parse(memoryscope.ConsentRecordSpec, body.spec)
    handled = kopf.Body({**body, "status": memoryscope._consent_fields(record, body.meta, {})})
    index = await _index(GRANTED)

    def resume(obj: kopf.Body) -> Any:
        return memoryscope.reconcile_consent(
            namespace=NS, name=RECORD, spec=obj.spec, meta=obj.meta, status=obj.status,
            memo=operator_memo(), consents_by_scope=index)

    async with lanes.reconcile_slot(0.0):  # the one slot, held
        await asyncio.wait_for(resume(handled), BOUND)
        pending = asyncio.ensure_future(resume(body))
        for _ in range(5):
            await asyncio.sleep(0)
        assert not pending.done()
    await asyncio.wait_for(pending, BOUND)
    assert api.pokes == [f"memoryscopes/{SCOPE}"]


async def test_a_record_to_validate_again_is_parsed_once(
        api: Recorder, monkeypatch: pytest.MonkeyPatch) -> None:
    """A handled record whose status is not what its validation writes: the check that finds
    it unsettled and the validation that writes it share one parse of its spec."""
    parses: list[Any] = []

    def parse(model: Any, spec: Any) -> Any:
        parses.append(model)
        return memoryscope.ConsentRecordSpec.from_wire(dict(spec))

    monkeypatch.setattr(memoryscope, "parse", parse)
    body = _record(GRANTED)
    stale = kopf.Body({**body, "status": {"observedGeneration": 1}})  # no Valid condition
    await asyncio.wait_for(memoryscope.reconcile_consent(
        namespace=NS, name=RECORD, spec=stale.spec, meta=stale.meta, status=stale.status,
        memo=operator_memo(), consents_by_scope=await _index(GRANTED)), BOUND)
    assert parses == [memoryscope.ConsentRecordSpec]
    assert api.pokes == []  # handled: nothing to poke, only the status to write
