"""A status transition's Event, posted once the watch shows its status written
(controller/handlers/common.py, issue 39): one pending transition per object in Kopf's per-object
memo, superseded by a later one, dropped with the object."""

from __future__ import annotations

from typing import Any, cast

import kopf
import pytest
from kopf._core.reactor.inventory import ResourceMemories

from fgentic_governance.controller.handlers import common
from fgentic_governance.controller.handlers.common import PENDING, Transition, announce, due

ENABLED = Transition("Enabled", "reason OK", fields=(("phase", "Enabled"), ("reasonCode", "OK")))
FAILED = Transition("Failed", "reason STORE_UNAVAILABLE", warning=True,
                    fields=(("phase", "Failed"), ("reasonCode", "STORE_UNAVAILABLE")))
MODIFIED = cast(kopf.RawEvent, {"type": "MODIFIED"})


def _shows(transition: Transition) -> dict[str, Any]:
    return dict(transition.fields)


def test_a_transition_is_due_only_once_its_status_is_seen_and_only_once() -> None:
    memo = kopf.Memo()
    announce(memo, {"phase": "Disabled", "reasonCode": "CONSENT_MISSING"}, ENABLED)
    assert due(memo, MODIFIED, {"phase": "Disabled", "reasonCode": "CONSENT_MISSING"}) is None
    assert due(memo, MODIFIED, {"phase": "Enabled", "reasonCode": "CONSENT_MISSING"}) is None
    assert due(memo, MODIFIED, _shows(ENABLED)) == ENABLED
    assert memo == {}  # Announced: nothing kept.
    assert due(memo, MODIFIED, _shows(ENABLED)) is None  # A later event posts nothing again.


def test_a_status_already_showing_it_is_no_transition() -> None:
    memo = kopf.Memo()
    announce(memo, _shows(ENABLED), ENABLED)  # A resync that finds it as recorded.
    assert memo == {}


def test_a_later_transition_supersedes_the_pending_one() -> None:
    """At most one per object: the later replaces it, and the earlier's status, should it show
    after all, is not announced."""
    memo = kopf.Memo()
    announce(memo, {}, FAILED)
    announce(memo, {}, ENABLED)
    assert list(memo) == [PENDING]
    assert due(memo, MODIFIED, _shows(FAILED)) is None
    assert due(memo, MODIFIED, _shows(ENABLED)) == ENABLED
    # A run that finds the status as it stands (its write of FAILED lost, say) drops it.
    announce(memo, {}, FAILED)
    announce(memo, _shows(ENABLED), ENABLED)
    assert memo == {}


def test_a_deleted_object_drops_its_pending_transition() -> None:
    memo = kopf.Memo()
    announce(memo, {}, ENABLED)
    assert due(memo, cast(kopf.RawEvent, {"type": "DELETED"}), _shows(ENABLED)) is None
    assert memo == {}


async def test_kopf_forgets_a_deleted_objects_memo() -> None:
    """Where the pending transition lives: Kopf's memo of that object, which Kopf drops when
    the watch reports it deleted (``processing.process_resource_event``), so no entry outlives
    its object whichever handler ran last."""
    memories = ResourceMemories()
    raw = cast(kopf.RawBody, {"metadata": {"uid": "u1", "name": "s"}})
    memo = cast(kopf.Memo, (await memories.recall(raw)).memo)
    announce(memo, {}, ENABLED)
    assert cast(kopf.Memo, (await memories.recall(raw)).memo) is memo
    await memories.forget(raw)
    assert PENDING not in cast(kopf.Memo, (await memories.recall(raw)).memo)


def test_a_condition_transition_is_seen_in_that_condition() -> None:
    ready = Transition("NotReady", "reason AGENT_NOT_FOUND", warning=True,
                       condition=("Ready", "False", "AGENT_NOT_FOUND"))
    memo = kopf.Memo()
    announce(memo, {"conditions": [{"type": "Ready", "status": "True", "reason": "OK"}]}, ready)
    other = {"conditions": [{"type": "Valid", "status": "False", "reason": "AGENT_NOT_FOUND"}]}
    assert due(memo, MODIFIED, other) is None
    shown = {"conditions": [{"type": "Ready", "status": "False", "reason": "AGENT_NOT_FOUND"}]}
    assert due(memo, MODIFIED, shown) == ready


async def test_the_watch_side_posts_the_event_and_filters_on_the_memo(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    posted: list[tuple[Any, ...]] = []
    monkeypatch.setattr(kopf, "event",
                        lambda body, **kw: posted.append((kw["type"], kw["reason"],
                                                          kw["message"])))
    memo = kopf.Memo()
    assert not common.pending(memo)
    announce(memo, {}, FAILED)
    assert common.pending(memo)
    body = kopf.Body({"metadata": {"uid": "u1"}, "status": _shows(FAILED)})
    await common.announce_written(event=MODIFIED, body=body, status=body.status, memo=memo)
    await common.announce_written(event=MODIFIED, body=body, status=body.status, memo=memo)
    assert posted == [("Warning", "Failed", "reason STORE_UNAVAILABLE")]
    assert not common.pending(memo)
