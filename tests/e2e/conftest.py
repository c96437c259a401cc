"""The gateway end-to-end fixtures: one real agentgateway stack (the binary from shared/bin, the
projector, the stub backends) per test module, and one client session without a cookie jar.
A module that needs no gateway (dev up, the memory model routes) never requests them."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from aiohttp import ClientSession

from tests.support.gateway import Stack, client_session, gateway_stack


@pytest.fixture(scope="module")
async def stack(request: pytest.FixtureRequest,
                tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stack]:
    name = request.module.__name__.rsplit(".", 1)[-1].removeprefix("test_").replace("_", "-")
    async with gateway_stack(tmp_path_factory.mktemp(name)) as running:
        yield running


@pytest.fixture(scope="module")
async def session() -> AsyncIterator[ClientSession]:
    async with client_session() as client:
        yield client
