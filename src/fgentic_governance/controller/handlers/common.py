"""Helpers shared by the thin handlers: model parsing and content-free conditions."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

import kopf
import pydantic

from fgentic_governance.api.common import GROUP, VERSION, Model
from fgentic_governance.controller.messages import message
from fgentic_governance.reasons import Reason

M = TypeVar("M", bound=Model)
RETRY_BASE_SECONDS = 10.0
RETRY_CAP_SECONDS = 300.0


def backoff(retry: int) -> float:
    """Delay before Kopf's next try: doubling from 10 s, at most 5 minutes."""
    return min(RETRY_BASE_SECONDS * float(2 ** min(max(retry, 0), 8)), RETRY_CAP_SECONDS)


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def revision() -> str:
    """A poke annotation's value: unique, so that two pokes within one second both change the
    object (an unchanged object is no update to Kopf; the per-scope timer used to cover it)."""
    return f"{now()}-{uuid.uuid4().hex[:8]}"


def parse(model: type[M], spec: Mapping[str, Any]) -> M | None:
    """The validated spec, or None; the validation error is dropped since it may echo values."""
    try:
        return model.from_wire(dict(spec))
    except pydantic.ValidationError:
        return None


def condition(
    type_: str, ok: bool, reason: Reason, generation: int, previous: list[dict[str, Any]] | None,
    *, text: str | None = None,
) -> dict[str, Any]:
    """A condition whose lastTransitionTime moves only when its status changes; its message
    is the reason's constant sentence (``messages``), or ``text``, a sentence ``messages``
    built from bounded values only (e.g. ``kinds_not_served``)."""
    status = "True" if ok else "False"
    old = next((c for c in previous or [] if c.get("type") == type_), None)
    changed = old is None or old.get("status") != status
    return {
        "type": type_,
        "status": status,
        "reason": reason.value,
        "message": text or message(reason),
        "lastTransitionTime": now() if changed else old["lastTransitionTime"],  # type: ignore[index]
        "observedGeneration": generation,
    }


def ready(ok: bool, reason: Reason, generation: int,
          previous: list[dict[str, Any]] | None) -> dict[str, Any]:
    """The ``Ready`` condition every kind carries, for ``kubectl wait --for=condition=Ready``
    and GitOps health checks: the current generation is reconciled and nothing failed."""
    return condition("Ready", ok, reason, generation, previous)


def merge_conditions(
    previous: list[dict[str, Any]] | None, *updates: dict[str, Any]
) -> list[dict[str, Any]]:
    by_type = {c["type"]: c for c in previous or []}
    by_type.update({c["type"]: c for c in updates})
    return sorted(by_type.values(), key=lambda c: str(c["type"]))


def handled(status: Mapping[str, Any], meta: Mapping[str, Any]) -> bool:
    """A change handler has finished the object's current generation (its status says so)."""
    return status.get("observedGeneration") == meta.get("generation")


def differs(current: Mapping[str, Any], fields: Mapping[str, Any]) -> bool:
    """Whether one of ``fields`` differs from the current status."""
    return any(current.get(key) != value for key, value in fields.items())


def update_status(patch: Any, current: Mapping[str, Any], fields: Mapping[str, Any]) -> bool:
    """Put ``fields`` in the status patch only if one differs from the current status: a
    resync that finds everything as recorded then writes nothing (the API server would
    decode, validate and compare a no-op PATCH all the same). Returns whether it did."""
    if not differs(current, fields):
        return False
    patch.status.update(fields)
    return True


PENDING = "fgentic.pending-transition"
"""The key of an object's unannounced transition in its Kopf ``memo`` (one per object)."""


@dataclass(frozen=True, slots=True)
class Transition:
    """The Event of a status transition and how the status shows that it was written: each
    of ``fields`` (top-level status fields) has its value, and ``condition`` (type, status,
    reason), if given, is the status's condition of that type."""

    reason: str
    message: str
    warning: bool = False
    fields: tuple[tuple[str, Any], ...] = ()
    condition: tuple[str, str, str] | None = None

    def shown(self, status: Mapping[str, Any]) -> bool:
        if any(status.get(key) != value for key, value in self.fields):
            return False
        if self.condition is None:
            return True
        kind, state, reason = self.condition
        found = [c for c in status.get("conditions") or [] if c.get("type") == kind]
        return [(c.get("status"), c.get("reason")) for c in found] == [(state, reason)]


def announce(memo: MutableMapping[str, Any], status: Mapping[str, Any],
             transition: Transition) -> None:
    """Note a transition for the handler's status patch; its Event is posted once the watch
    shows that status written (``announce_written``), not here: Kopf applies the patch after
    the handler, and a write refused, failed or lost must post nothing (issue 39).

    Bounded: one per object in its Kopf memo (which Kopf drops with the deleted object). A
    later one supersedes it; a status that already shows the transition is no transition,
    and clears whatever was pending (that state superseded it)."""
    if transition.shown(status):
        memo.pop(PENDING, None)
    else:
        memo[PENDING] = transition


def due(memo: MutableMapping[str, Any], event: Mapping[str, Any],
        status: Mapping[str, Any]) -> Transition | None:
    """The pending transition to announce now that the watch shows ``status``, taken out of
    the memo; None while its write is not seen yet. A deletion drops it unannounced."""
    pending = memo.get(PENDING)
    if not isinstance(pending, Transition):
        return None
    if event.get("type") == "DELETED":
        del memo[PENDING]
        return None
    if not pending.shown(status):
        return None  # Not written yet (a later run may still replace it).
    del memo[PENDING]
    return pending


def pending(memo: Mapping[str, Any], **_: Any) -> bool:
    """Kopf's ``when=`` filter: only objects with an unannounced transition are looked at."""
    return PENDING in memo


async def announce_written(*, event: kopf.RawEvent, body: kopf.Body, status: kopf.Status,
                     memo: kopf.Memo, **_: Any) -> None:
    """The watch side: post a transition's Event once its status is seen applied."""
    transition = due(memo, event, status)
    if transition is not None:
        kopf.event(body, type="Warning" if transition.warning else "Normal",
                   reason=transition.reason, message=transition.message)


def announced(plural: str, when: Callable[..., bool] | None = None,
              registry: kopf.OperatorRegistry | None = None) -> None:
    """Register ``announce_written`` for a kind of our group (``when``: an extra filter) with
    the operator that handles the kind (``registry``; None: the default one)."""
    kopf.on.event(GROUP, VERSION, plural, id="announce-written", registry=registry,
                  when=pending if when is None else kopf.all_([pending, when]))(announce_written)
