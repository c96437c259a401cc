"""What the operator keeps per watched object (issue 39, memory): no ``managedFields`` in any
body Kopf hands on (controller/trimming.py, through the one hook of controller/watchstream.py,
which also paces), one compact string per ConsentRecord in the consent index, no lock left
behind per scope. Counts and contents, never timings."""

from __future__ import annotations

import asyncio
import copy
import json
import sys
from collections.abc import AsyncIterator, Iterator
from typing import Any

import kopf
import pytest
from kopf._cogs.aiokits import aiotoggles
from kopf._cogs.clients import watching
from kopf._core.engines import indexing
from kopf._core.reactor import queueing

from fgentic_governance.controller import context, prepopulation, trimming, watchstream
from fgentic_governance.controller.handlers.memoryscope import consents_by_scope

RESOURCE = kopf.Resource("governance.fgentic.dev", "v1alpha1", "memoryscopes", namespaced=True)
GATED = kopf.Resource("governance.fgentic.dev", "v1alpha1", "retrievalbindings", namespaced=True)
# The field-ownership record the API server sends with every object (abridged from a real one).
MANAGED = [{"manager": "kopf", "operation": "Update",
            "apiVersion": "governance.fgentic.dev/v1alpha1",
            "time": "2026-12-06T18:00:00Z", "fieldsType": "FieldsV1",
            "fieldsV1": {"f:metadata": {"f:finalizers": {".": {}, "v:\"x\"": {}}},
                         "f:spec": {"f:agent": {".": {}, "f:name": {}, "f:namespace": {}}}}}]


def _event(uid: str, kind: str = "ADDED") -> dict[str, Any]:
    return {"type": kind, "object": {
        "apiVersion": "governance.fgentic.dev/v1alpha1", "kind": "MemoryScope",
        "metadata": {"name": uid, "namespace": "team", "uid": uid, "resourceVersion": "7",
                     "annotations": {"a": "b"}, "finalizers": ["x"],
                     "managedFields": copy.deepcopy(MANAGED)},
        "spec": {"agent": {"name": "a", "namespace": "team"}},
        "status": {"phase": "Enabled"}}}


def _deep_size(obj: Any) -> int:
    if isinstance(obj, dict):
        return sys.getsizeof(obj) + sum(_deep_size(k) + _deep_size(v) for k, v in obj.items())
    if isinstance(obj, list):
        return sys.getsizeof(obj) + sum(_deep_size(v) for v in obj)
    return sys.getsizeof(obj)


def test_trim_drops_only_the_field_ownership_record() -> None:
    event = _event("u1")
    expected = copy.deepcopy(event)
    del expected["object"]["metadata"]["managedFields"]
    before = _deep_size(event)
    assert trimming.trim(event) is event  # in place: no second copy of the body
    assert event == expected
    assert _deep_size(event) < before
    # Kopf's bookmarks and an ERROR event's Status pass untouched.
    error = {"type": "ERROR", "object": {"kind": "Status", "code": 410}}
    assert trimming.trim(watching.Bookmark.LISTED) is watching.Bookmark.LISTED
    assert trimming.trim(error) == {"type": "ERROR", "object": {"kind": "Status", "code": 410}}


@pytest.fixture
def fake_stream(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Kopf's watch stream replaced by two events and the end of the listing; yields the list
    of closed streams (the wrapper must close the one it wraps)."""
    closed: list[str] = []

    async def infinite_watch(**_: Any) -> AsyncIterator[Any]:
        try:
            yield watching.Bookmark.LISTED
            yield _event("u1")
            yield _event("u2", "MODIFIED")
        finally:
            closed.append("closed")

    monkeypatch.setattr(watching, "infinite_watch", infinite_watch)
    yield closed


async def test_kopfs_own_watcher_hands_trimmed_bodies_to_the_workers(
    fake_stream: list[str],
) -> None:
    """Through Kopf's real multiplexer (``queueing.watcher``) as the operator runs it: every
    raw event a per-object worker receives, and so every body Kopf keeps, has no managedFields."""
    watchstream.install()
    watchstream.install()  # idempotent: wrapped once
    assert watchstream.installed()
    seen: list[dict[str, Any]] = []

    async def processor(*, raw_event: Any, **_: Any) -> None:
        seen.append(raw_event)

    settings = kopf.OperatorSettings()
    settings.queueing.idle_timeout = 0.01
    await asyncio.wait_for(queueing.watcher(namespace=None, settings=settings, resource=RESOURCE,
                                            processor=processor), timeout=30)
    assert sorted(e["object"]["metadata"]["uid"] for e in seen) == ["u1", "u2"]
    assert all("managedFields" not in e["object"]["metadata"] for e in seen)
    assert all(e["object"]["metadata"]["annotations"] == {"a": "b"} for e in seen)
    assert fake_stream == ["closed"]


@pytest.mark.parametrize("first", ["watch stream", "prepopulation"])
async def test_trimming_and_pacing_are_one_hook_whatever_the_order(
    first: str, fake_stream: list[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Start-up's two installs, in either order and twice over, leave one wrapper right over
    Kopf's stream: every kind's events trimmed, an ungated kind's paced in its turn."""
    kopfs = watching.infinite_watch
    monkeypatch.setattr(prepopulation, "_START", prepopulation._Start())
    for owner, name in ((aiotoggles.ToggleSet, "wait_for"), (indexing, "index_resource")):
        monkeypatch.setattr(owner, name, getattr(owner, name))  # (restored afterwards)
    installs = [watchstream.install,
                lambda: prepopulation.install(ungated=[(RESOURCE.group, RESOURCE.plural)])]
    for install in (installs if first == "watch stream" else installs[::-1]) * 2:
        install()
    hooked: Any = watching.infinite_watch
    assert watchstream.installed() and prepopulation.installed()
    assert hooked.__wrapped__ is kopfs  # one wrapper, no other in between
    watchstream.install()
    assert watching.infinite_watch is hooked
    for resource in (RESOURCE, GATED):
        events = [e async for e in hooked(resource=resource)]
        assert [e["object"]["metadata"] for e in events[1:]] == [
            {"name": uid, "namespace": "team", "uid": uid, "resourceVersion": "7",
             "annotations": {"a": "b"}, "finalizers": ["x"]} for uid in ("u1", "u2")]
    assert fake_stream == ["closed", "closed"]
    assert prepopulation._START._turns is not None  # the ungated kind's listing took its turn


async def test_the_consent_index_keeps_one_string_per_record() -> None:
    spec = {"scopeRef": {"name": "s1"}, "subject": {"mxid": "@a:x", "originKind": "native-local"},
            "decision": "granted"}
    body = kopf.Body({"metadata": {"name": "c1", "creationTimestamp": "t"}, "spec": spec})
    index: Any = consents_by_scope  # called as Kopf calls it, with the kwargs it uses
    entries = await index(namespace="team", spec=body.spec, meta=body.meta)
    created, name, kept = entries[("team", "s1")]
    assert (created, name) == ("t", "c1")
    assert isinstance(kept, str)  # not the watched body's dicts
    assert json.loads(kept) == spec


async def test_a_scope_lock_is_kept_only_while_in_use() -> None:
    context._LOCKS.clear()
    lock = context.scope_lock("team/s1")
    async with lock:
        assert context.scope_lock("team/s1") is lock  # the same lock while someone holds it
        assert len(context._LOCKS) == 1
    del lock
    async with context.scope_lock("team/s2"):
        pass
    assert len(context._LOCKS) == 0
