"""The query's embedding, from an OpenAI-compatible ``/v1/embeddings`` endpoint.

In production that is agentgateway's authenticated embeddings listener (ADR 0024), which the
binding's NetworkPolicy lets this server reach. One call per tool call, bounded in time and
size; the answer must be exactly one finite vector of the corpus's dimension. A provider's
error body may quote the query, so it is never read into a log or an error: every failure is
EMBEDDINGS_UNAVAILABLE.
"""

from __future__ import annotations

from typing import Any, Final

import aiohttp

from fgentic_governance.retrieval.search.corpus import is_vector
from fgentic_governance.retrievalserver.codes import RetrievalServerError, RetrievalServerReason
from fgentic_governance.serving.strict_json import Refused, loads_floats

TIMEOUT_SECONDS: Final = 5.0
MAX_ANSWER_BYTES: Final = 1 << 20
"""A 1,024-dimension float answer is about 25 KB; anything near a MiB is not one vector."""


class Embedder:
    """POSTs ``{"input": [query], "model": ..., "encoding_format": "float"}`` to ``url``."""

    def __init__(self, session: aiohttp.ClientSession, url: str, model: str, *,
                 dimensions: int, api_key: str = "",
                 timeout: float = TIMEOUT_SECONDS) -> None:
        self._session = session
        self._url = url
        self._model = model
        self._dimensions = dimensions
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._timeout = aiohttp.ClientTimeout(total=timeout)

    async def embed(self, text: str) -> list[float]:
        return (await self.embed_many([text]))[0]

    async def embed_many(self, texts: list[str]) -> list[list[float]]:
        """One vector per text, in order (corpus ingestion sends batches)."""
        body = {"input": texts, "model": self._model, "encoding_format": "float"}
        raw: bytes | None = None
        try:
            async with self._session.post(
                self._url, json=body, headers=self._headers, allow_redirects=False,
                timeout=self._timeout,
            ) as response:
                if response.status == 200:
                    raw = await _read(response, MAX_ANSWER_BYTES * len(texts))
        except (aiohttp.ClientError, TimeoutError):
            pass
        if raw is None:  # raised outside the handler: no library error as its context
            raise RetrievalServerError(RetrievalServerReason.EMBEDDINGS_UNAVAILABLE)
        return vectors_of(raw, self._dimensions, len(texts))


async def _read(response: aiohttp.ClientResponse, limit: int) -> bytes | None:
    """The whole body (``read(n)`` returns only what is buffered), or None past ``limit``."""
    body = bytearray()
    async for chunk in response.content.iter_chunked(65536):
        body += chunk
        if len(body) > limit:
            return None
    return bytes(body)


def vector_of(raw: bytes, dimensions: int) -> list[float]:
    """The one embedding of an OpenAI-shaped answer, or EMBEDDINGS_UNAVAILABLE."""
    return vectors_of(raw, dimensions, 1)[0]


def vectors_of(raw: bytes, dimensions: int, count: int) -> list[list[float]]:
    """Exactly ``count`` embeddings of an OpenAI-shaped answer, ordered by their ``index``
    (each of 0..count-1 once), or EMBEDDINGS_UNAVAILABLE."""
    if len(raw) > MAX_ANSWER_BYTES * count:
        raise RetrievalServerError(RetrievalServerReason.EMBEDDINGS_UNAVAILABLE)
    try:
        # Floats unchecked (is_vector checks each) and parsed in Rust: ~0.1 ms less a call.
        answer: Any = loads_floats(raw)
    except Refused:
        answer = None
    data = answer.get("data") if isinstance(answer, dict) else None
    if (not isinstance(data, list) or len(data) != count
            or not all(isinstance(item, dict) for item in data)):
        raise RetrievalServerError(RetrievalServerReason.EMBEDDINGS_UNAVAILABLE)
    indexes = [item.get("index", i) for i, item in enumerate(data)]
    if not all(type(i) is int for i in indexes) or sorted(indexes) != list(range(count)):
        raise RetrievalServerError(RetrievalServerReason.EMBEDDINGS_UNAVAILABLE)
    ordered: list[list[float]] = [[] for _ in range(count)]
    for index, item in zip(indexes, data, strict=True):
        vector = item.get("embedding")
        if not is_vector(vector, dimensions):
            raise RetrievalServerError(RetrievalServerReason.EMBEDDINGS_UNAVAILABLE)
        ordered[index] = list(map(float, vector))
    return ordered




