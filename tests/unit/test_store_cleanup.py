"""Issue 36 §5: the operator's cleanup of expired memory (ADR 0023 §27) is never silent
(controller/main.py); its interval cannot break the 24 h promise (tests/unit/test_tuning.py).
The real store and operator: tests/faults/test_store_cleanup.py."""

from __future__ import annotations

from typing import Any

import pytest

from fgentic_governance.api.memory import ScopePhase
from fgentic_governance.controller import main, metrics
from fgentic_governance.controller.context import OperatorContext
from fgentic_governance.controller.handlers import memoryscope
from fgentic_governance.memory import StoreRefusal
from fgentic_governance.reasons import Reason


class Store:
    def __init__(self) -> None:
        self.failure: BaseException | None = None

    async def cleanup_expired(self) -> int:
        if self.failure is not None:
            raise self.failure
        return 3


@pytest.fixture
def store() -> Store:
    return Store()


@pytest.fixture
def ctx(store: Store) -> OperatorContext:
    return OperatorContext(store=store)  # type: ignore[arg-type]


def _failures(reason: Reason) -> float:
    return metrics.CLEANUP_FAILURES.labels(reason=reason.value)._value.get()


def _cleanup_condition(ctx: OperatorContext) -> dict[str, Any] | None:
    status = memoryscope._status(ctx, 1, None, ScopePhase.ENABLED, Reason.OK, gated=Reason.OK)
    return next((c for c in status["conditions"] if c["type"] == "ExpiryCleanup"), None)


async def test_a_failed_cleanup_is_counted_and_shown_then_cleared(
        store: Store, ctx: OperatorContext, caplog: pytest.LogCaptureFixture) -> None:
    assert _cleanup_condition(ctx) is None  # not run yet: no condition
    assert await main.cleanup(ctx)
    succeeded = metrics.CLEANUP_LAST_SUCCESS._value.get()
    assert succeeded > 0
    assert _cleanup_condition(ctx) is not None
    assert _cleanup_condition(ctx)["status"] == "True"  # type: ignore[index]

    before = _failures(Reason.STORE_LOCK_TIMEOUT)
    store.failure = StoreRefusal(Reason.STORE_LOCK_TIMEOUT)
    assert not await main.cleanup(ctx)
    assert not await main.cleanup(ctx)
    assert _failures(Reason.STORE_LOCK_TIMEOUT) == before + 2
    assert metrics.CLEANUP_LAST_SUCCESS._value.get() == succeeded
    condition = _cleanup_condition(ctx)
    assert condition is not None
    assert (condition["status"], condition["reason"]) == ("False", "STORE_LOCK_TIMEOUT")
    # Logged once per new reason, with the code only.
    assert caplog.text.count("expired memory cleanup failed (STORE_LOCK_TIMEOUT)") == 1

    store.failure = None
    assert await main.cleanup(ctx)
    assert ctx.cleanup is Reason.OK
    assert metrics.CLEANUP_LAST_SUCCESS._value.get() >= succeeded


async def test_an_unexpected_error_is_an_internal_error_without_its_text(
        store: Store, ctx: OperatorContext, caplog: pytest.LogCaptureFixture) -> None:
    before = _failures(Reason.INTERNAL_ERROR)
    store.failure = ValueError("row content would be here")
    assert not await main.cleanup(ctx)
    assert _failures(Reason.INTERNAL_ERROR) == before + 1
    assert ctx.cleanup is Reason.INTERNAL_ERROR
    assert "row content" not in caplog.text
