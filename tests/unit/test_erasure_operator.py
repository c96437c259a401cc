"""The erasure lane's own Kopf operator (controller.lanes, issue 39): PrincipalOffboardings are
watched and handled on the erasure loop, not on the loop a burst of scopes keeps busy."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import kopf
import pytest

from fgentic_governance.api.common import Principal
from fgentic_governance.api.registry import PRINCIPAL_OFFBOARDING
from fgentic_governance.controller import lanes, login  # noqa: F401  (registration by import)
from fgentic_governance.controller.handlers import offboarding
from tests.support.polling import until

BOUND = 10.0  # seconds: every wait below is bounded
LEAVER = Principal.model_validate({"mxid": "@leaver:fgentic.local", "originKind": "native-local"})


def _ids(registry: kopf.OperatorRegistry, plural: str) -> set[str]:
    handlers = [*registry._indexing.get_all_handlers(), *registry._watching.get_all_handlers(),
                *registry._changing.get_all_handlers()]
    return {str(h.id) for h in handlers
            if h.selector is not None and h.selector.any_name == plural}


def test_offboardings_are_handled_by_the_erasure_operator_and_indexed_by_the_main_one() -> None:
    plural = PRINCIPAL_OFFBOARDING.plural
    erasure, main = _ids(lanes.ERASURE_REGISTRY, plural), _ids(kopf.get_default_registry(), plural)
    assert {"reconcile_offboarding", "announce-written"} <= erasure
    assert not {"reconcile_offboarding", "announce-written"} & main
    assert "offboarding_principals" in main and "offboarding_principals" not in erasure
    assert not lanes.ERASURE_REGISTRY._indexing.get_all_handlers()  # nothing to pre-populate
    assert lanes.ERASURE_REGISTRY._activities.get_all_handlers()  # its own login


@pytest.fixture
def lane() -> Iterator[None]:
    lanes.open_lanes()
    yield
    lanes.close_lanes()


def _fake_operator(seen: dict[str, Any], ends_alone: threading.Event
                   ) -> Any:
    async def operator(**kwargs: Any) -> None:
        seen["thread"] = threading.current_thread().name
        seen["loop"] = asyncio.get_running_loop()
        seen.update(kwargs)
        flag: threading.Event = kwargs["stop_flag"]
        while not flag.is_set() and not ends_alone.is_set():
            await asyncio.sleep(0.01)
    return operator


def test_the_erasure_operator_runs_on_the_erasure_loop_and_stops_with_the_lanes(
        lane: None, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}
    ended = threading.Event()
    monkeypatch.setattr(lanes.kopf, "operator", _fake_operator(seen, threading.Event()))
    lanes.start_erasure_operator(kopf.OperatorSettings(), kopf.Memo(), ended.set)
    until(lambda: "thread" in seen, "the erasure operator started", BOUND)
    assert seen["thread"] == "fgentic-erasure-loop" and seen["loop"] is lanes.erasure_loop()
    assert seen["registry"] is lanes.ERASURE_REGISTRY and seen["clusterwide"] is True
    lanes.close_lanes()
    assert seen["stop_flag"].is_set() and not ended.is_set()  # a stop, not an end


def test_an_erasure_operator_that_ends_on_its_own_is_reported(
        lane: None, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}
    ended, ends_alone = threading.Event(), threading.Event()
    monkeypatch.setattr(lanes.kopf, "operator", _fake_operator(seen, ends_alone))
    lanes.start_erasure_operator(kopf.OperatorSettings(), kopf.Memo(), ended.set)
    until(lambda: "thread" in seen, "the erasure operator started", BOUND)
    assert not ended.is_set()
    ends_alone.set()
    assert ended.wait(BOUND), "an erasure operator that ended went unreported"


class _Changing(dict[Any, Any]):
    """An index that Kopf changes on another thread during the first ``busy`` reads."""

    def __init__(self, busy: int, keys: list[str]) -> None:
        super().__init__({(LEAVER.mxid, LEAVER.origin_kind.value): keys})
        self.busy = busy

    def get(self, key: Any, default: Any = None) -> Any:
        if self.busy:
            self.busy -= 1
            raise RuntimeError("dictionary changed size during iteration")
        return super().get(key, default)


def test_the_scope_index_is_read_across_threads_with_a_bounded_retry() -> None:
    keys = ["team/a", "team/b"]
    assert offboarding.subject_scopes(_Changing(0, keys), LEAVER) == keys
    assert offboarding.subject_scopes(_Changing(offboarding.INDEX_READS - 1, keys), LEAVER) == keys
    with pytest.raises(kopf.TemporaryError):
        offboarding.subject_scopes(_Changing(offboarding.INDEX_READS, keys), LEAVER)
    with pytest.raises(kopf.TemporaryError):  # no index yet: fail closed, retry later
        offboarding.subject_scopes(None, LEAVER)
    assert offboarding.subject_scopes({}, LEAVER) == []


def _stage(stage: str) -> tuple[float, float]:
    """(count, sum) of fgentic_offboarding_stage_seconds for ``stage``."""
    from prometheus_client import REGISTRY

    def value(suffix: str) -> float:
        got = REGISTRY.get_sample_value(f"fgentic_offboarding_stage_seconds_{suffix}",
                                        {"stage": stage})
        return got or 0.0

    return value("count"), value("sum")


@pytest.mark.parametrize("verified", [True, False])
def test_each_stage_of_an_offboarding_is_timed(monkeypatch: pytest.MonkeyPatch,
                                               verified: bool) -> None:
    """The erasure and the Ready write are observed apart, so an operator (and bench_scale)
    can tell the store's share from the API server's; no Ready write, no observation."""
    pause = 0.02

    async def erase(*_: Any) -> list[offboarding.ScopeOutcome]:
        await asyncio.sleep(pause)
        return [offboarding.ScopeOutcome("team/s1", verified, offboarding.Reason.OK)]

    async def write(*_: Any, **__: Any) -> bool:
        await asyncio.sleep(pause)
        return True

    monkeypatch.setattr(offboarding, "offboard", erase)
    monkeypatch.setattr(offboarding.kube, "patch_cluster_status", write)
    erasure, ready = _stage("erasure"), _stage("ready_write")
    _, written = asyncio.run(offboarding._erase_then_ready(
        object(), object(), LEAVER, ["team/s1"], name="o", generation=1,  # type: ignore[arg-type]
        previous=None))
    assert written is verified
    (count, total), (ready_count, ready_total) = _stage("erasure"), _stage("ready_write")
    assert count == erasure[0] + 1 and total - erasure[1] >= pause
    assert ready_count == ready[0] + int(verified)
    assert ready_total - ready[1] >= (pause if verified else 0.0)
