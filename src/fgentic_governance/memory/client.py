"""A small typed async client for adapted runtimes: save, search, list, forget.

A client is bound to one :class:`Access` - scope, principal, Agent, room and the consent
generation the request was admitted under - so every call carries that generation; after a
withdrawal and re-grant the old client's calls fail with STALE_GENERATION and a new client must
be built. The order of every content-bearing call is fixed: write policy (free) -> cost
admission (durable) -> embedding (paid) -> fenced store call. Embedding-provider failures are
reduced to a reason code, because provider error bodies may quote the text (ADR 0023 §26).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import timedelta
from typing import Final

from fgentic_governance.memory import write_policy
from fgentic_governance.memory.cost import CostGate
from fgentic_governance.memory.errors import StoreRefusal
from fgentic_governance.memory.model import (
    DEFAULT_ENVELOPE,
    Access,
    Entry,
    Envelope,
    ErasureReceipt,
    Operation,
    vector_literal,
)
from fgentic_governance.memory.store import MemoryStore
from fgentic_governance.memory.write_policy import MetadataValue
from fgentic_governance.reasons import Reason

Embedder = Callable[[str], Awaitable[Sequence[float]]]
"""Text -> embedding (768 floats), e.g. the governed BGE-M3 route through agentgateway."""

MAX_QUERY_BYTES: Final = 512
"""UTF-8 bytes of one search or prefetch query (ADR 0023 §42)."""


MAX_FACT_BYTES_CEILING: Final = 512
"""ADR 0023 §41: no stored fact is larger, whatever a scope's own cap."""


class MemoryClient:
    def __init__(
        self, store: MemoryStore, gate: CostGate, access: Access, *,
        embedder: Embedder | None = None,
    ) -> None:
        self._store = store
        self._gate = gate
        self._access = access
        self._embedder = embedder

    @property
    def access(self) -> Access:
        return self._access

    @property
    def generation(self) -> int:
        return self._access.generation

    async def save(
        self,
        content: str,
        *,
        envelope: Envelope = DEFAULT_ENVELOPE,
        metadata: Mapping[str, MetadataValue] | None = None,
        ttl: timedelta | None = None,
        explicit: bool = True,
    ) -> str:
        """Store one fact; returns its opaque id."""
        write_policy.enforce(content, metadata)  # refuse before spending any budget
        # No scope may store more than the ADR's ceiling: refuse before any embedding work
        # (a smaller per-scope cap is enforced by the database).
        size = _utf8_size(content)
        if size is None:  # lone surrogates: not storable text (and the error would quote it)
            raise StoreRefusal(Reason.INVALID_SPEC)
        if size > MAX_FACT_BYTES_CEILING:
            raise StoreRefusal(Reason.FACT_TOO_LARGE)
        items = {Operation.SAVE: 1}
        if self._embedder is not None:
            items[Operation.EMBEDDING] = 1
        await self._gate.admit(self._access, items, explicit=explicit)
        vector = None if self._embedder is None else await self._embed(content)
        return await self._store.save(self._access, content, embedding=vector,
                                      metadata=metadata, envelope=envelope, ttl=ttl)

    async def search(self, query: str, *, limit: int = 8, prefetch: bool = False) -> list[Entry]:
        """Semantic recall; ``prefetch`` marks an automatic session-start subquery."""
        if self._embedder is None:
            raise StoreRefusal(Reason.INVALID_SPEC)
        size = _utf8_size(query)
        if size is None:
            raise StoreRefusal(Reason.INVALID_SPEC)
        if size > MAX_QUERY_BYTES:
            raise StoreRefusal(Reason.FACT_TOO_LARGE)
        operation = Operation.PREFETCH if prefetch else Operation.LOAD
        await self._gate.admit(self._access, {operation: 1, Operation.EMBEDDING: 1},
                               explicit=not prefetch)
        vector = await self._embed(query)
        return await self._store.search(self._access, vector, limit=limit)

    async def list(self, *, limit: int = 20, offset: int = 0) -> list[Entry]:
        """A bounded page for ``!memory inspect`` (an explicit load)."""
        await self._gate.admit(self._access, {Operation.LOAD: 1}, explicit=True)
        return await self._store.list_entries(self._access, limit=limit, offset=offset)

    async def forget(self, entry_id: str) -> ErasureReceipt:
        """Delete exactly one entry and verify. Never rate limited: erasure must not wait."""
        return await self._store.forget_entry(self._access, entry_id)

    async def _embed(self, text: str) -> Sequence[float]:
        assert self._embedder is not None
        failed = False
        try:
            vector = await self._embedder(text)
        except Exception:  # the provider's error text may quote the input; keep only a code
            failed = True
        if failed:
            raise StoreRefusal(Reason.STORE_UNAVAILABLE)
        # A missing or malformed vector is refused before the insert, not stored as a row
        # that search can never find (vector_literal checks shape and every component).
        if vector is None:
            raise StoreRefusal(Reason.INVALID_SPEC)
        vector_literal(vector)
        return vector


def _utf8_size(text: str) -> int | None:
    try:
        return len(text.encode())
    except UnicodeEncodeError:
        return None
