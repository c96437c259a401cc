"""The scope sweep's comparison (issue 39): a converged scope is left alone; a store fact or a
store-wide condition that differs from the recorded status has the scope poked."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from datetime import UTC, datetime
from typing import Any

import pytest

from fgentic_governance.api.memory import Posture
from fgentic_governance.controller import kube_calls as kube_api
from fgentic_governance.controller.context import OperatorContext, of
from fgentic_governance.controller.handlers import sweep
from fgentic_governance.controller.handlers.sweep import ScopeView, World, stale, view_of
from fgentic_governance.memory import ScopeState, StoreRefusal
from fgentic_governance.reasons import Reason
from tests.support.operator_memo import operator_memo
from tests.support.polling import until_async

EXPIRY = datetime(2026, 12, 13, 8, 30, tzinfo=UTC)


def _status(**overrides: Any) -> dict[str, Any]:
    conditions = [{"type": "StoreReady", "status": "True", "reason": "OK"},
                  {"type": "ExpiryCleanup", "status": "True", "reason": "OK"},
                  {"type": "ModelRouteGoverned", "status": "False",
                   "reason": "MODEL_ROUTE_UNCONFIGURED"},
                  {"type": "Enabled", "status": "True", "reason": "OK"}]
    status = {"phase": "Enabled", "reasonCode": "OK", "observedGeneration": 2,
              "storeSchemaVersion": 23, "consentGeneration": 4, "entryCount": 3,
              "hardExpiry": "2026-12-13T08:30:00Z", "recallWithheld": [],
              "conditions": conditions}
    return {**status, **overrides}


def _view(**overrides: Any) -> ScopeView:
    return view_of({"generation": 2}, {"agent": {"namespace": "a", "name": "b"}},
                   _status(**overrides))


def _fact(**overrides: Any) -> tuple[ScopeState, datetime | None]:
    state = ScopeState(scope_key="ns/s", enabled=True, posture=Posture.ENABLED,
                       consent_generation=4, entry_cap=100, max_fact_bytes=512,
                       max_retention_days=7, hourly_operation_ceiling=100, entry_count=3)
    latest = overrides.pop("latest", EXPIRY)
    return dataclasses.replace(state, **overrides), latest


WORLD = World(("True", "OK"), Reason.OK, 23)
ROUTE = Reason.MODEL_ROUTE_UNCONFIGURED


def test_a_converged_scope_is_left_alone() -> None:
    assert not stale(_view(), _fact(), WORLD, ROUTE)
    assert not stale(_view(), _fact(), WORLD, None)  # route unreadable: keeps its last value


@pytest.mark.parametrize("fact", [
    _fact(entry_count=4), _fact(consent_generation=5), _fact(enabled=False), _fact(held=True),
    _fact(latest=None), _fact(recall_withheld=((Reason.RECALL_AGE_WITHHELD, 1),)), None,
], ids=["entries", "generation", "disabled", "held", "expired", "withheld", "row-gone"])
def test_a_store_fact_that_differs_pokes(fact: tuple[ScopeState, datetime | None] | None
                                         ) -> None:
    assert stale(_view(), fact, WORLD, ROUTE)


@pytest.mark.parametrize("world", [
    World(("False", "STORE_SETTINGS_UNSAFE"), Reason.OK, 23),
    World(("True", "OK"), Reason.STORE_UNAVAILABLE, 23),
    World(("True", "OK"), Reason.OK, 24),
], ids=["store-ready", "expiry-cleanup", "schema"])
def test_a_store_wide_change_pokes(world: World) -> None:
    assert stale(_view(), _fact(), world, ROUTE)


def test_a_model_route_change_pokes() -> None:
    assert stale(_view(), _fact(), WORLD, Reason.OK)


def test_a_scope_owned_by_a_change_handler_or_a_retry_is_left_to_it() -> None:
    assert not stale(_view(observedGeneration=1), None, WORLD, ROUTE)
    failed = _view(phase="Failed", reasonCode="BINDING_CONFLICT")
    assert not stale(failed, None, WORLD, Reason.OK)


def test_a_scope_failed_for_want_of_the_store_is_poked_once_it_is_ready() -> None:
    waiting = _view(phase="Failed", reasonCode="STORE_UNAVAILABLE", storeSchemaVersion=0,
                    conditions=[{"type": "StoreReady", "status": "False",
                                 "reason": "STORE_UNAVAILABLE"}])
    assert stale(waiting, None, WORLD, ROUTE)
    assert not stale(waiting, None, World(("False", "STORE_UNAVAILABLE"), None, 0), ROUTE)


def test_a_disabled_scope_with_rows_or_a_hold_is_poked_to_erase() -> None:
    disabled = _view(phase="Disabled", reasonCode="CONSENT_WITHDRAWN", entryCount=0,
                     hardExpiry=None)
    assert not stale(disabled, _fact(enabled=False, entry_count=0, latest=None), WORLD, ROUTE)
    assert stale(disabled, _fact(enabled=False, entry_count=0, latest=None, held=True), WORLD,
                 ROUTE)


class _Store:
    """A store whose overview answers with ``rows``, or refuses as a store that is down."""

    def __init__(self, rows: list[tuple[ScopeState, datetime | None]] | None) -> None:
        self.rows = rows

    async def scope_overview(self, after: str, limit: int
                             ) -> list[tuple[ScopeState, datetime | None]]:
        if self.rows is None:
            raise StoreRefusal(Reason.STORE_UNAVAILABLE)
        return [row for row in self.rows if row[0].scope_key > after][:limit]


async def _round(monkeypatch: pytest.MonkeyPatch, rows: list[tuple[ScopeState, datetime | None]]
                 | None, views: dict[str, list[ScopeView]]) -> list[str]:
    ctx = of(operator_memo(store=_Store(rows), cleanup=Reason.OK, store_schema_version=23))
    poked: list[str] = []

    async def annotate(_api: Any, *, namespace: str, name: str, **_: Any) -> None:
        poked.append(f"{namespace}/{name}")

    monkeypatch.setattr(kube_api, "annotate", annotate)
    assert await sweep.sweep_once(ctx, views) == len(poked)  # type: ignore[arg-type]
    return sorted(poked)


async def test_a_round_pokes_only_the_scopes_whose_facts_moved(
        monkeypatch: pytest.MonkeyPatch) -> None:
    views = {"ns/s": [_view()], "ns/t": [_view()]}
    moved = dataclasses.replace(_fact()[0], scope_key="ns/t", entry_count=4)
    assert await _round(monkeypatch, [_fact(), (moved, EXPIRY)], views) == ["ns/t"]
    assert await _round(monkeypatch, [_fact()], {"ns/s": [_view()]}) == []


async def test_a_store_that_went_down_has_every_ready_scope_poked_once(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The per-scope timer's reconcile found an outage; the sweep's failed read does now."""
    down = _view(phase="Failed", reasonCode="STORE_UNAVAILABLE", conditions=[
        {"type": "StoreReady", "status": "False", "reason": "STORE_UNAVAILABLE"}])
    views = {"ns/s": [_view()], "ns/t": [down]}
    assert await _round(monkeypatch, None, views) == ["ns/s"]


async def test_a_woken_sweep_runs_its_round_now(monkeypatch: pytest.MonkeyPatch) -> None:
    """The store connecting (or its fitness changing) wakes the sweep: a scope failed for want
    of the store is poked then, not an interval later (a test with an hour's interval had such
    a scope stay Failed)."""
    monkeypatch.setenv("FGENTIC_SCOPE_RESYNC_SECONDS", "3600")
    rounds: list[int] = []

    async def sweep_once(_ctx: Any, _views: Any) -> int:
        rounds.append(1)
        return 0

    monkeypatch.setattr(sweep, "sweep_once", sweep_once)
    task = asyncio.create_task(sweep.run(OperatorContext(), {}))  # type: ignore[arg-type]
    try:
        await until_async(lambda: sweep._WAKE is not None, "the sweep running")
        assert rounds == []
        sweep.wake()
        await until_async(lambda: len(rounds), "a round once woken", 10)
        sweep.wake()
        await until_async(lambda: len(rounds) == 2, "a second round once woken again", 10)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        monkeypatch.setattr(sweep, "_WAKE", None)
