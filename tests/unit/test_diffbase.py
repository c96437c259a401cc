"""Kopf's diff base kept in memory (controller/handlers/diffbase.py): what Kopf stores is what
it reads back, per object, nothing is written to the object, and deleted objects are forgotten."""

from __future__ import annotations

from typing import Any

import kopf

from fgentic_governance.controller.handlers import diffbase
from fgentic_governance.controller.handlers.diffbase import MemoryDiffBase


def _body(uid: str, spec: dict[str, Any]) -> kopf.Body:
    return kopf.Body({"apiVersion": "v1", "kind": "X",
                      "metadata": {"uid": uid, "name": uid, "annotations": {"a": "b"}},
                      "spec": spec, "status": {"phase": "Enabled"}})


def test_stored_essence_is_fetched_per_object_and_not_patched() -> None:
    storage = MemoryDiffBase()
    one, two = _body("u1", {"x": 1}), _body("u2", {"x": 2})
    assert storage.fetch(body=one) is None  # Never handled: Kopf sees a creation.
    patch = kopf.Patch()
    storage.store(body=one, patch=patch, essence=storage.build(body=one))
    assert patch == {}  # Nothing goes to the API server.
    assert storage.fetch(body=one) == {"spec": {"x": 1}, "metadata": {"annotations": {"a": "b"}}}
    assert storage.fetch(body=two) is None
    changed = _body("u1", {"x": 3})
    assert storage.fetch(body=changed) != storage.build(body=changed)  # A diff to handle.
    assert len(storage) == 1


async def test_deleted_objects_are_forgotten() -> None:
    body = _body("gone", {"x": 1})
    diffbase.DIFFBASE.store(body=body, patch=kopf.Patch(), essence={"spec": {"x": 1}})
    # Only a deletion invokes the handler (its filter): no call per watch event.
    assert not diffbase._deleted(event={"type": "MODIFIED", "object": dict(body)})
    assert diffbase._deleted(event={"type": "DELETED", "object": dict(body)})
    await diffbase._forget_deleted(event={"type": "DELETED", "object": dict(body)})
    assert diffbase.DIFFBASE.fetch(body=body) is None
