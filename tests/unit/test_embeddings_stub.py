"""The embeddings stub (``tests.support.retrieval_server.QueryEmbeddings``) serves each
distinct input's answer from its bounded cache, byte for byte what it built before the cache:
the tests and benchmarks that use it see the same provider, only a cheaper one."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import ClientSession, web

from tests.support import retrieval_server
from tests.support.retrieval_server import QueryEmbeddings
from tests.support.vectors import unit_vector

INPUTS: list[dict[str, Any]] = [
    {"input": ["retention policy"], "model": "m", "encoding_format": "float"},
    {"input": "a single string", "model": "nomic-embed-text"},
    {"input": ["first", "second", "first"], "model": "m"},
    {"input": ["ünïcödé \u2028 \"quoted\" \\ tab\t"], "model": None},
    {"input": [7, 2.5, True, None], "model": {"b": 2, "a": 1}},
    {"input": [""], "encoding_format": "float"},
]


def before(body: dict[str, Any], dimensions: int, *, trickle: bool = False) -> tuple[bytes, str]:
    """The answer as the stub wrote it before its cache (its handler up to 8bc0b54, verbatim;
    a trickled answer was streamed with a bare ``application/json``)."""
    texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
    answer = web.json_response({"object": "list", "model": body.get("model"), "data": [
        {"object": "embedding", "index": i, "embedding": unit_vector(str(text), dimensions)}
        for i, text in enumerate(texts)]})
    assert isinstance(answer.body, bytes)
    return answer.body, "application/json" if trickle else answer.headers["Content-Type"]


@pytest.fixture
async def http() -> AsyncIterator[ClientSession]:
    async with ClientSession() as session:
        yield session


async def answer(http: ClientSession, stub: QueryEmbeddings, body: dict[str, Any]
                 ) -> tuple[bytes, str]:
    async with http.post(stub.url, json=body) as reply:
        assert reply.status == 200
        return await reply.read(), reply.headers["Content-Type"]


@pytest.mark.parametrize("dimensions", [768, 1024])
@pytest.mark.parametrize("trickle", [False, True])
async def test_answers_are_the_same_bytes_built_once_per_input(
    http: ClientSession, monkeypatch: pytest.MonkeyPatch, dimensions: int, trickle: bool,
) -> None:
    built: list[str] = []

    def counted(text: str, dims: int = dimensions) -> list[float]:
        built.append(text)
        return unit_vector(text, dims)

    monkeypatch.setattr(retrieval_server, "unit_vector", counted)
    stub = QueryEmbeddings(dimensions)
    stub.trickle = trickle
    await stub.start()
    try:
        for _ in range(3):  # the first answer is built, the next two are served
            for body in INPUTS:
                assert await answer(http, stub, body) == before(body, dimensions,
                                                                trickle=trickle)
    finally:
        await stub.stop()
    distinct = [str(text) for body in INPUTS
                for text in (body["input"] if isinstance(body["input"], list)
                             else [body["input"]])]
    assert built == distinct  # each input's vectors computed once, not once per request
    assert stub.handler_seconds > 0


async def test_the_cache_is_bounded_and_keeps_the_recent(
    http: ClientSession, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(retrieval_server, "ANSWERS_KEPT", 2)
    stub = QueryEmbeddings()
    await stub.start()
    try:
        for body in [*INPUTS, INPUTS[0]]:
            assert await answer(http, stub, body) == before(body, stub.dimensions)
            assert len(stub.answers) <= 2
        assert [key[2] for key in stub.answers] == [("",), ("retention policy",)]
    finally:
        await stub.stop()


async def test_a_chosen_vector_and_a_failure_are_never_kept(http: ClientSession) -> None:
    stub = QueryEmbeddings()
    await stub.start()
    try:
        body = INPUTS[0]
        stub.vector = [1.0, 0.0]
        first, _ = await answer(http, stub, body)
        stub.vector = [0.0, 1.0]
        second, _ = await answer(http, stub, body)
        assert b"[1.0, 0.0]" in first and b"[0.0, 1.0]" in second
        stub.vector, stub.fail = None, True
        async with http.post(stub.url, json=body) as reply:
            assert reply.status == 500
        stub.fail = False
        assert await answer(http, stub, body) == before(body, stub.dimensions)
        assert len(stub.answers) == 1
    finally:
        await stub.stop()
