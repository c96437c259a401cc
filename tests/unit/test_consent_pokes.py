"""A ConsentRecord pokes its MemoryScope only when the scope's reconcile could miss the record
(issue 39): not when the scope waits for its reconcile slot (it reads the consent index only
once it holds one) nor when its latest reconcile read this very record; unsure, it pokes.

Real pieces: the handlers, the index function, the reconcile lane's slots; the API calls and
the scope's store work (`_reconcile`) are replaced by recorders."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import kopf
import pytest

from fgentic_governance.controller import api as kube_api
from fgentic_governance.controller import lanes
from fgentic_governance.controller.handlers import memoryscope, offboarding
from fgentic_governance.controller.tuning import RECONCILE_SLOTS

BOUND = 10.0  # seconds: every wait below is bounded
NS, SCOPE, RECORD = "team", "alice-prefs", "alice-prefs-grant"
GRANTED = {"scopeRef": {"name": SCOPE},
           "subject": {"mxid": "@alice:fgentic.local", "originKind": "native-local"},
           "purpose": "personal-preferences", "policyVersion": "2026-11", "decision": "granted"}
WITHDRAWN = {**GRANTED, "decision": "withdrawn"}
Index = dict[tuple[str, str], list[tuple[str, str, str]]]


def _record(spec: dict[str, Any]) -> kopf.Body:
    return kopf.Body({"metadata": {"namespace": NS, "name": RECORD, "generation": 1,
                                   "creationTimestamp": "2026-12-06T23:00:00Z"},
                      "spec": spec, "status": {}})


def _index(*specs: dict[str, Any]) -> Index:
    """The consent index as Kopf holds it once it has indexed these versions' events (the
    last one current), built by the real index function."""
    index: Index = {}
    for spec in specs:
        body = _record(spec)
        index = {key: [value] for key, value in memoryscope.consents_by_scope(
            namespace=NS, spec=body.spec, meta=body.meta).items()}
    return index


class Recorder:
    """The API calls the consent handler made, and what each scope reconcile read."""

    def __init__(self) -> None:
        self.pokes: list[str] = []
        self.reads: list[list[tuple[str, str, str]]] = []

    async def annotate(self, *, plural: str, name: str, **_: Any) -> None:
        self.pokes.append(f"{plural}/{name}")

    async def patch_status(self, **_: Any) -> str:
        return "1"

    async def reconcile(self, *, namespace: str, name: str, consents_by_scope: Index,
                        **_: Any) -> None:
        # As `_reconcile`: the index is read before the first await.
        self.reads.append(sorted(consents_by_scope.get((namespace, name), [])))
        await asyncio.sleep(0)


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
    lanes.close_lanes()


async def _validate(spec: dict[str, Any], index: Index, retry: int = 0) -> None:
    body = _record(spec)
    await memoryscope._validate_consent(
        namespace=NS, name=RECORD, spec=body.spec, meta=body.meta, status=body.status,
        consents_by_scope=index, retry=retry)


async def _reconcile_scope(index: Index) -> None:
    await memoryscope.reconcile_scope(namespace=NS, name=SCOPE, consents_by_scope=index)


async def _waiting(index: Index) -> asyncio.Future[None]:
    """The scope's reconcile, entered and waiting for the slot the caller holds."""
    scope = asyncio.ensure_future(_reconcile_scope(index))
    for _ in range(5):
        await asyncio.sleep(0)
    assert lanes.waiting_for_slot(f"{NS}/{SCOPE}") and not scope.done()
    return scope


@pytest.mark.parametrize("retry", [0, 1], ids=["first-run", "retry"])
async def test_a_consent_validated_while_its_scope_waits_for_a_slot_does_not_poke(
        api: Recorder, retry: int) -> None:
    index = _index(GRANTED)
    async with lanes.reconcile_slot(1.0):  # every slot busy (a creation burst)
        scope = await _waiting(index)
        await _validate(GRANTED, index, retry)
        assert api.pokes == []
    await asyncio.wait_for(scope, BOUND)
    assert api.reads == [index[(NS, SCOPE)]]  # it read the record once it had its slot
    assert not lanes.waiting_for_slot(f"{NS}/{SCOPE}")


async def test_a_consent_its_scope_already_read_does_not_poke(api: Recorder) -> None:
    index = _index(GRANTED)
    await asyncio.wait_for(_reconcile_scope(index), BOUND)  # read it, before the consent ran
    await _validate(GRANTED, index)
    assert api.pokes == []


async def test_a_consent_its_scope_has_not_read_pokes(api: Recorder) -> None:
    await asyncio.wait_for(_reconcile_scope({}), BOUND)  # before the record was indexed
    await _validate(GRANTED, _index(GRANTED))
    assert api.pokes == [f"memoryscopes/{SCOPE}"]


async def test_a_changed_consent_pokes_though_its_scope_read_the_earlier_version(
        api: Recorder) -> None:
    await asyncio.wait_for(_reconcile_scope(_index(GRANTED)), BOUND)
    await _validate(WITHDRAWN, _index(GRANTED, WITHDRAWN))
    assert api.pokes == [f"memoryscopes/{SCOPE}"]


async def test_a_waiting_scope_is_poked_when_the_index_lacks_the_record(api: Recorder) -> None:
    # Unsure (the index does not hold this version): poke, even though the scope will read.
    async with lanes.reconcile_slot(1.0):
        scope = await _waiting(_index(GRANTED))
        await _validate(WITHDRAWN, _index(GRANTED))
        assert api.pokes == [f"memoryscopes/{SCOPE}"]
    await asyncio.wait_for(scope, BOUND)


async def test_a_scope_that_has_its_slot_is_not_counted_as_waiting(api: Recorder) -> None:
    async with lanes.reconcile_slot(1.0, key=f"{NS}/{SCOPE}"):
        assert not lanes.waiting_for_slot(f"{NS}/{SCOPE}")
        await _validate(GRANTED, _index(GRANTED))  # neither waiting nor read by it: poke
    assert api.pokes == [f"memoryscopes/{SCOPE}"]


async def test_an_offboarding_pokes_only_the_scopes_not_waiting_for_a_slot(
        api: Recorder) -> None:
    # The same for `poke_scopes` (offboarding, posture floors): the store is erased before it
    # is called, and a waiting scope reads the store and the indices once it has its slot.
    async with lanes.reconcile_slot(1.0):
        scope = await _waiting({})
        await offboarding.poke_scopes([f"{NS}/{SCOPE}", f"{NS}/other"])
        assert api.pokes == ["memoryscopes/other"]
    await asyncio.wait_for(scope, BOUND)
