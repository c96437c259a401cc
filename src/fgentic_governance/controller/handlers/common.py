"""Helpers shared by the thin handlers: model parsing and content-free conditions."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, TypeVar

import pydantic

from fgentic_governance.api.common import Model
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
