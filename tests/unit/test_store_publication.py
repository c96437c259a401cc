"""The operator publishes its store and the store's fitness in one step (controller/main.py
``open_store``): a reconcile scheduled between the two saw a store with no problem and granted
consent on an outdated pgvector (CI on 98dfd91). The real store and operator:
tests/integration/test_memory_operator.py, test_store_with_an_outdated_pgvector_grants_nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import asyncpg
import pytest

from fgentic_governance import memory
from fgentic_governance.controller import lanes, main
from fgentic_governance.controller.context import OperatorContext
from fgentic_governance.reasons import Reason


class _Conn:
    async def __aenter__(self) -> _Conn:
        return self

    async def __aexit__(self, *_: object) -> None:
        return None


class _Pool:
    def acquire(self, **_: Any) -> _Conn:
        return _Conn()

    async def close(self) -> None:
        return None


class Recorded(OperatorContext):
    """A context that keeps every ``update`` of the start-up, with the store's problem as
    seen then."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[dict[str, Any]] = []

    def update(self, **values: Any) -> OperatorContext:
        self.calls.append(dict(values))
        return super().update(**values)


@pytest.fixture
def published(monkeypatch: pytest.MonkeyPatch) -> Recorded:
    """The start-up's store calls stubbed (an outdated pgvector), and a recording context."""

    async def pool(*_: Any, **__: Any) -> _Pool:
        return _Pool()

    async def migrate(_conn: Any) -> int:
        return 24

    async def erasure(work: Any) -> Any:
        return await work

    async def outdated(_pool: Any) -> Reason:
        return Reason.STORE_EXTENSION_OUTDATED

    monkeypatch.setattr(asyncpg, "create_pool", pool)
    monkeypatch.setattr(memory, "migrate", migrate)
    monkeypatch.setattr(lanes, "on_erasure_lane", erasure)
    monkeypatch.setattr(main, "_store_problem", outdated)
    return Recorded()


async def test_the_store_is_never_published_without_its_problem(
        published: Recorded, tmp_path: Path) -> None:
    dsn = tmp_path / "dsn"
    dsn.write_text("postgresql://fgentic@127.0.0.1:5432/memory")
    await main.open_store(published, dsn)
    with_store = [c for c in published.calls if c.get("store") is not None]
    assert with_store, "open_store published no store"
    assert all(c.get("store_problem") is Reason.STORE_EXTENSION_OUTDATED for c in with_store)
    assert published.store_problem is Reason.STORE_EXTENSION_OUTDATED
