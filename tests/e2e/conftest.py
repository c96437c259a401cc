"""The gateway end-to-end fixtures: one real agentgateway stack (the binary from shared/bin, the
projector, the stub backends) per test module and A2A wire version, and one client session
without a cookie jar.
A module that needs no gateway (dev up, the memory model routes) never requests them."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from aiohttp import ClientSession

from fgentic_governance.api.retrieval import A2aWire
from tests.support.gateway import Stack, client_session, gateway_stack


@pytest.fixture(scope="module", params=list(A2aWire), ids=lambda w: f"a2a-{w.value}")
async def stack(request: pytest.FixtureRequest,
                tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stack]:
    """The stack once per A2A wire version the binding can name: the routes' method and
    version rules are rendered from one table per wire, and both are run."""
    name = request.module.__name__.rsplit(".", 1)[-1].removeprefix("test_").replace("_", "-")
    async with gateway_stack(tmp_path_factory.mktemp(name), wire=request.param) as running:
        yield running


@pytest.fixture(scope="module")
async def session() -> AsyncIterator[ClientSession]:
    async with client_session() as client:
        yield client
