"""Kopf's diff base ("last handled configuration") kept in the operator's memory.

Kopf's default writes the last handled essence of every object into an annotation: one extra
PATCH of the object after every create and update handler (about a quarter of the API writes
per MemoryScope + ConsentRecord pair at scale, docs/load.md). Nothing here needs that diff to
survive a restart: every registration is level-based and is also a resume handler, so after a
restart every object is reconciled once anyway (with no stored base, Kopf sees a creation).
The cost is one compact JSON essence per live object in memory, forgotten on deletion.
"""

from __future__ import annotations

import json
from typing import Any, cast

import kopf

from fgentic_governance.api.common import GROUP, VERSION
from fgentic_governance.api.registry import KINDS
from fgentic_governance.controller.leadership import ensure_leading


class MemoryDiffBase(kopf.DiffBaseStorage):
    """uid → the essence (compact JSON) Kopf last handled."""

    def __init__(self) -> None:
        super().__init__()
        self._essences: dict[str, str] = {}

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        encoded = self._essences.get(str(body.metadata.uid))
        return cast(kopf.BodyEssence, json.loads(encoded)) if encoded is not None else None

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        self._essences[str(body.metadata.uid)] = json.dumps(essence, separators=(",", ":"))

    def forget(self, uid: str) -> None:
        self._essences.pop(uid, None)

    def __len__(self) -> int:
        return len(self._essences)


DIFFBASE = MemoryDiffBase()


def _deleted(event: kopf.RawEvent, **_: Any) -> bool:
    return event.get("type") == "DELETED"


async def _forget_deleted(event: kopf.RawEvent, **_: Any) -> None:
    ensure_leading()  # As every handler of a leader past its deadline (review R4-5): none runs.
    DIFFBASE.forget(str(event.get("object", {}).get("metadata", {}).get("uid", "")))


def register(*, cluster_kinds: bool) -> None:
    """Forget each deleted object's essence (``main``, once, before Kopf starts). A shard
    without the cluster-scoped kinds does not watch them for this: Kopf would strip the
    finalizer the owning shard put on them, as no handler of this shard needs it."""
    for kind in KINDS:
        if kind.namespaced or cluster_kinds:
            kopf.on.event(GROUP, VERSION, kind.plural, id="forget-diff-base",
                          when=_deleted)(_forget_deleted)
