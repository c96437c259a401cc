"""The one tool: its JSON Schemas, its argument checks and its structured result.

The binding names the tool; the server offers nothing else. The input schema is JSON Schema
2020-12; ``maxLength`` counts code points, so the 512-byte bound of a query (UTF-8) is checked
here as well. Arguments that are not exactly ``{query[, k]}`` are refused, never coerced.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final

from fgentic_governance.contract.limits import utf8_bytes
from fgentic_governance.retrieval.search.prefilter import Hit
from fgentic_governance.retrievalserver.codes import RetrievalServerError, RetrievalServerReason

MAX_QUERY_BYTES: Final = 512
MAX_K: Final = 10
DEFAULT_K: Final = 5
SCHEMA_DIALECT: Final = "https://json-schema.org/draft/2020-12/schema"

INPUT_SCHEMA: Final = MappingProxyType({
    "$schema": SCHEMA_DIALECT,
    "type": "object",
    "properties": {
        "query": {"type": "string", "minLength": 1, "maxLength": MAX_QUERY_BYTES,
                  "description": f"What to look for (at most {MAX_QUERY_BYTES} UTF-8 bytes)."},
        "k": {"type": "integer", "minimum": 1, "maximum": MAX_K, "default": DEFAULT_K,
              "description": "How many chunks to return."},
    },
    "required": ["query"],
    "additionalProperties": False,
})

OUTPUT_SCHEMA: Final = MappingProxyType({
    "$schema": SCHEMA_DIALECT,
    "type": "object",
    "properties": {
        "chunks": {
            "type": "array", "maxItems": MAX_K,
            "items": {
                "type": "object",
                "properties": {
                    "chunk_id": {"type": "string"},
                    "source": {"type": "string"},
                    "text": {"type": "string"},
                    "score": {"type": "number"},
                },
                "required": ["chunk_id", "source", "text", "score"],
                "additionalProperties": False,
            },
        },
    },
    "required": ["chunks"],
    "additionalProperties": False,
})

DESCRIPTION: Final = ("Search the knowledge corpus. Returns only chunks the calling person or "
                      "partner may read, nearest first.")


@dataclass(frozen=True, slots=True)
class Query:
    text: str
    k: int


def parse_arguments(arguments: Mapping[str, Any] | None) -> Query:
    """The checked arguments, or RetrievalServerError (nothing is embedded or queried before)."""
    if not isinstance(arguments, Mapping) or not set(arguments) <= {"query", "k"}:
        raise RetrievalServerError(RetrievalServerReason.ARGUMENTS_INVALID)
    text = arguments.get("query")
    if not isinstance(text, str):
        raise RetrievalServerError(RetrievalServerReason.ARGUMENTS_INVALID)
    size = utf8_bytes(text)
    if size is None or size == 0 or not text.strip():
        raise RetrievalServerError(RetrievalServerReason.QUERY_INVALID)
    if size > MAX_QUERY_BYTES:
        raise RetrievalServerError(RetrievalServerReason.QUERY_TOO_LARGE)
    k = arguments.get("k", DEFAULT_K)
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_K:
        raise RetrievalServerError(RetrievalServerReason.K_INVALID)
    return Query(text, k)


def result(hits: Sequence[Hit]) -> dict[str, Any]:
    """The structured result: cosine similarity as the score (1 - distance).

    A score is a JSON number. The query's vector was checked (``is_vector``), so a distance
    that is not finite comes from a chunk stored without a direction (written outside
    ``corpus load``, which refuses one): it ranks nothing and is left out, never sent as NaN.
    """
    return {"chunks": [{"chunk_id": str(hit.id), "source": hit.source, "text": hit.content,
                        "score": round(1.0 - hit.distance, 6)}
                       for hit in hits if math.isfinite(hit.distance)]}
