"""kagent v0.9.11's memory request bodies, parsed strictly and without echoing input.

The shapes are the controller's (``go/core/internal/httpserver/handlers/memory.go`` at v0.9.11,
RUNTIME.md): ``{agent_name, user_id, content, vector[768], metadata?, ttl_days?}`` per item,
``{"items": [...]}`` (1..50) for a batch, ``{agent_name, user_id, vector, limit, min_score}``
for a search. Stricter than kagent where kagent is loose: unknown fields, duplicate names, a
non-empty ``metadata`` (it would be stored content we do not govern) and a negative
``ttl_days`` are refused. ``ttl_days`` of 0 or absent means the scope's own retention (kagent's
15-day default never applies). A search ``limit`` <= 0 is kagent's 5; above 50 is refused.
Parsing is plain Python, not pydantic: 50 x 768 floats validate in a fraction of the time.
Every vector component must be finite and within pgvector's float4 (``storable``).

Every request's target is read here too (``request_target``): origin-form only, split once.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Final, NoReturn

from fgentic_governance.contract.jcs import DuplicateName, unique_object
from fgentic_governance.memory.model import (
    EMBEDDING_DIMENSIONS,
    Embedding,
    VectorText,
    storable,
)
from fgentic_governance.memoryapi.codes import ApiError, ApiReason

MAX_BODY_BYTES: Final = 2 * 1024 * 1024
"""50 items x (768 numbers of up to ~25 bytes + 512-byte fact, JSON-escaped up to 6x)."""
MAX_ITEMS: Final = 50
DEFAULT_LIMIT: Final = 5
MAX_LIMIT: Final = 50
MAX_NAME_BYTES: Final = 512
_ITEM_FIELDS: Final = frozenset({"agent_name", "user_id", "content", "vector", "metadata",
                                 "ttl_days"})
_ITEM_REQUIRED: Final = frozenset({"agent_name", "user_id", "content", "vector"})
_SEARCH_FIELDS: Final = frozenset({"agent_name", "user_id", "vector", "limit", "min_score"})
_SEARCH_REQUIRED: Final = frozenset({"agent_name", "user_id", "vector"})
# A "vector" member's array as the body spells it. A match is a candidate only: it is used
# when its numbers are exactly the parsed vector's (``VectorText.of``), else the floats are.
_VECTOR_MEMBER: Final = re.compile(r'"vector"[ \t\n\r]*:[ \t\n\r]*(\[[^\]]*\])')


@dataclass(frozen=True, slots=True)
class SaveItem:
    agent_name: str
    user_id: str
    content: str = field(repr=False)
    vector: list[float] = field(repr=False)
    ttl_days: int | None
    text: VectorText | None = field(default=None, repr=False)
    """The checked vector as received, when the body spells it plainly (``_texts``)."""

    @property
    def embedding(self) -> Embedding:
        return self.vector if self.text is None else self.text


@dataclass(frozen=True, slots=True)
class Search:
    agent_name: str
    user_id: str
    vector: list[float] = field(repr=False)
    limit: int
    min_score: float
    text: VectorText | None = field(default=None, repr=False)

    @property
    def embedding(self) -> Embedding:
        return self.vector if self.text is None else self.text


def _malformed() -> ApiError:
    return ApiError(ApiReason.REQUEST_MALFORMED)


def _texts(text: str, vectors: list[list[float]]) -> list[VectorText | None]:
    """The body's spelling of each checked vector, in order, for PostgreSQL to read as it is:
    one ``"vector"`` member per parsed vector, each spelling exactly its vector; otherwise
    None (an escaped member name, say) and the floats are formatted instead."""
    found = _VECTOR_MEMBER.findall(text)
    if len(found) != len(vectors):
        return [None] * len(vectors)
    return [VectorText.of(array, vector) for array, vector in zip(found, vectors, strict=True)]


def _decoded(raw: bytes) -> str:
    """The body as text, decoded once for the parser and for ``_texts``."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise _malformed() from None


def _object(text: str) -> dict[str, Any]:
    """Strict where it matters here, fast for 768 numbers: duplicate names and the non-finite
    constants are refused while parsing; numbers are parsed by C (``float``) and every vector
    component is checked to be finite and within float4 in ``_vector``; the shapes below bound
    the depth; a lone surrogate in ``content`` is refused by ``check_fact``.
    ``strict_json.loads`` calls Python for every float (~0.2 ms more per body)."""
    try:
        value = json.loads(text, object_pairs_hook=unique_object, parse_constant=_constant)
    except (DuplicateName, ValueError, RecursionError):
        value = None
    if type(value) is not dict:
        raise _malformed()
    return value


def _constant(_text: str) -> NoReturn:  # NaN, Infinity, -Infinity
    raise ValueError("not a number")


def _fields(value: Any, allowed: frozenset[str], required: frozenset[str]) -> Mapping[str, Any]:
    if type(value) is not dict or not required <= value.keys() <= allowed:
        raise _malformed()
    return value


def _name(value: Any) -> str:
    if type(value) is not str or not value or len(value.encode("utf-8", "replace")) > \
            MAX_NAME_BYTES:
        raise _malformed()
    return value


def _vector(value: Any) -> list[float]:
    if type(value) is not list or len(value) != EMBEDDING_DIMENSIONS:
        raise _malformed()
    if not all(type(v) is float for v in value):
        if not all(type(v) in (float, int) for v in value):  # bool is not int (type is)
            raise _malformed()
        try:
            value = [float(v) for v in value]
        except OverflowError:  # an integer beyond a double
            raise _malformed() from None
    if not storable(value):  # 1e999 parses as inf; 1e39 is beyond pgvector's float4
        raise _malformed()
    vector: list[float] = value
    return vector


def _item(value: Any) -> SaveItem:
    fields = _fields(value, _ITEM_FIELDS, _ITEM_REQUIRED)
    content = fields["content"]
    if type(content) is not str:
        raise _malformed()
    metadata = fields.get("metadata")
    if metadata is not None and metadata != {}:
        raise _malformed()
    ttl = fields.get("ttl_days", 0)
    if type(ttl) is not int or ttl < 0:
        raise _malformed()
    return SaveItem(_name(fields["agent_name"]), _name(fields["user_id"]), content,
                    _vector(fields["vector"]), ttl or None)


def _with_texts(text: str, items: list[SaveItem]) -> list[SaveItem]:
    texts = _texts(text, [item.vector for item in items])
    return [replace(item, text=text) for item, text in zip(items, texts, strict=True)]


def parse_save(raw: bytes) -> SaveItem:
    """``POST /api/memories/sessions``."""
    text = _decoded(raw)
    [item] = _with_texts(text, [_item(_object(text))])
    return item


def parse_batch(raw: bytes) -> list[SaveItem]:
    """``POST /api/memories/sessions/batch``: 1 to 50 items."""
    text = _decoded(raw)
    body = _fields(_object(text), frozenset({"items"}), frozenset({"items"}))
    items = body["items"]
    if type(items) is not list or not 1 <= len(items) <= MAX_ITEMS:
        raise _malformed()
    return _with_texts(text, [_item(item) for item in items])


def parse_search(raw: bytes) -> Search:
    """``POST /api/memories/search``."""
    text = _decoded(raw)
    fields = _fields(_object(text), _SEARCH_FIELDS, _SEARCH_REQUIRED)
    limit = fields.get("limit", 0)
    min_score = fields.get("min_score", 0.0)
    if type(limit) is not int or limit > MAX_LIMIT:
        raise _malformed()
    if type(min_score) not in (int, float) or not -1.0 <= min_score <= 1.0:  # NaN fails too
        raise _malformed()
    vector = _vector(fields["vector"])
    [spelled] = _texts(text, [vector])
    return Search(_name(fields["agent_name"]), _name(fields["user_id"]), vector,
                  limit if limit > 0 else DEFAULT_LIMIT, float(min_score), spelled)


@dataclass(frozen=True, slots=True)
class Target:
    """A request target in origin-form, split once: every decision reads it and exactly it is
    forwarded (a path joined to the controller's URL, the query as received)."""

    path: str
    query: str


def request_target(method: str, raw: str) -> Target:
    """``raw`` (the request line's target as sent) as origin-form, else TARGET_REFUSED:
    ``CONNECT``'s authority-form, ``*`` and absolute URLs name another server, and a fragment
    is no part of a request target (RFC 9112 §3.2) - a client's URL library drops it, so the
    path it ends would be decided on in one spelling and forwarded in another."""
    if method == "CONNECT" or not raw.startswith("/") or "#" in raw:
        raise ApiError(ApiReason.TARGET_REFUSED)
    path, _, query = raw.partition("?")
    return Target(path, query)
