"""kagent v0.9.11's memory request bodies, parsed strictly and without echoing input.

The shapes are the controller's (``go/core/internal/httpserver/handlers/memory.go`` at v0.9.11,
RUNTIME.md): ``{agent_name, user_id, content, vector[768], metadata?, ttl_days?}`` per item,
``{"items": [...]}`` (1..50) for a batch, ``{agent_name, user_id, vector, limit, min_score}``
for a search. Stricter than kagent where kagent is loose: unknown fields, duplicate names, a
non-empty ``metadata`` (it would be stored content we do not govern) and a negative
``ttl_days`` are refused. The one exception is the explicit save of kagent-adk 0.10.4
(``save_memory``: ``metadata`` = exactly ``{"session_id": <its ADK session id, the A2A
contextId>, "source": "explicit_save"}``): accepted on ``POST /api/memories/sessions`` only,
never stored; the session id is kept on the parsed item (``SaveItem.session_id``), bounded
like a name, and any other key, value or place is still refused. ``ttl_days`` of 0 or absent
means the scope's own retention (kagent's 15-day default never applies). A search ``limit``
<= 0 is kagent's 5; above 50 is refused.
Parsing is plain Python, not pydantic: 50 x 768 floats validate in a fraction of the time.
Every vector component must be finite and within pgvector's float4 (``storable``).

Numbers are kept as the JSON number tokens the parser read (``_TOKEN``: ``json``'s C scanner
hands every number literal to ``str.encode``), never parsed to doubles unless a field needs
one: a 768-number vector is those tokens joined (``VectorText``, what PostgreSQL reads), after
a check on the text that every component is within float4 (``_vector``). Parsing 17-digit
doubles costs ~0.35 us each, twice before (``json``, then the body's digits checked against
them): ~0.6 ms of a save's 0.7 ms of parsing.

Every request's target is read here too (``request_target``): origin-form only, split once.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, NoReturn

from fgentic_governance.contract.jcs import DuplicateName, unique_object
from fgentic_governance.memory.model import (
    EMBEDDING_DIMENSIONS,
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
_EXPLICIT_SAVE_METADATA: Final = frozenset({"session_id", "source"})
EXPLICIT_SAVE: Final = "explicit_save"
"""kagent-adk 0.10.4's ``source`` of a ``save_memory`` call (``tools/memory_tools.py``)."""
_SEARCH_FIELDS: Final = frozenset({"agent_name", "user_id", "vector", "limit", "min_score"})
_SEARCH_REQUIRED: Final = frozenset({"agent_name", "user_id", "vector"})
_TOKEN: Final = str.encode
"""``parse_float`` and ``parse_int``: a number literal as its ASCII bytes. Only numbers become
``bytes`` (strings are ``str``), so a list of them joins with ``bytes.join`` and nothing else
does."""
_SHORT: Final = 38
"""Bytes of a token that cannot reach 1e38 without a positive exponent (float4 ends at ~3.4e38):
at most 38 bytes leaves at most 38 integer digits."""


@dataclass(frozen=True, slots=True)
class SaveItem:
    agent_name: str
    user_id: str
    content: str = field(repr=False)
    text: VectorText = field(repr=False)
    """The checked vector as its number tokens were received (``_vector``)."""
    ttl_days: int | None
    session_id: str | None = field(default=None, repr=False)
    """The context an explicit save of kagent-adk 0.10.4 names (its ``metadata``); not stored."""

    @property
    def embedding(self) -> VectorText:
        return self.text

    @property
    def vector(self) -> list[float]:
        """The components as doubles, parsed on demand (never on the request path)."""
        return _floats(self.text)


@dataclass(frozen=True, slots=True)
class Search:
    agent_name: str
    user_id: str
    text: VectorText = field(repr=False)
    limit: int
    min_score: float

    @property
    def embedding(self) -> VectorText:
        return self.text

    @property
    def vector(self) -> list[float]:
        return _floats(self.text)


def _floats(text: VectorText) -> list[float]:
    return [float(part) for part in text.text[1:-1].split(",")]


def _malformed() -> ApiError:
    return ApiError(ApiReason.REQUEST_MALFORMED)


def _object(raw: bytes) -> dict[str, Any]:
    """Strict where it matters here, fast for 768 numbers: the body must be UTF-8, duplicate
    names and the non-finite constants are refused while parsing; every number stays its token
    (``_TOKEN``) until a field below reads it (``_int``, ``_float``, ``_vector``), so a number
    anywhere else is refused by its field's type check; the shapes below bound the depth; a
    lone surrogate in ``content`` is refused by ``check_fact``."""
    try:
        text = raw.decode("utf-8")
        value = json.loads(text, object_pairs_hook=unique_object, parse_constant=_constant,
                           parse_float=_TOKEN, parse_int=_TOKEN)
    except (DuplicateName, ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
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


def _int(value: Any) -> Any:
    """An integer token as ``json`` would read it (a fraction or exponent is not one); what is
    not a number token is returned for the caller's type check to refuse."""
    if type(value) is not bytes:
        return value
    try:
        return int(value)  # no "+", "_" or spaces: the token is JSON's
    except ValueError:  # "1.5", "1e3", or beyond sys.get_int_max_str_digits() like json
        raise _malformed() from None


def _float(value: Any) -> Any:
    """A number token as the double ``json`` reads it (an integer's ``float()`` is the same
    correctly rounded double); anything else as it is, for the caller to refuse."""
    return float(value) if type(value) is bytes else value


def _vector(value: Any) -> VectorText:
    """768 number tokens, joined as PostgreSQL reads them. A token of at most 38 bytes with no
    positive exponent is below 1e38, so such a vector is within float4 without a double being
    parsed; any other is parsed and checked like one (``storable``: 1e999 parses as inf, 1e39
    is beyond pgvector's float4; an integer beyond a double is inf too)."""
    if type(value) is not list or len(value) != EMBEDDING_DIMENSIONS:
        raise _malformed()
    try:
        joined = b",".join(value)  # TypeError unless every component is a number token
    except TypeError:
        raise _malformed() from None
    if not (_no_positive_exponent(joined) and max(map(len, value)) <= _SHORT) \
            and not storable(list(map(float, value))):
        raise _malformed()
    return VectorText("[" + joined.decode("ascii") + "]")


def _no_positive_exponent(joined: bytes) -> bool:
    """Every ``e``/``E`` of the joined tokens is followed by ``-`` (a few per vector at most:
    Python writes doubles below 1e-4 with one)."""
    for mark in (b"e", b"E"):
        at = joined.find(mark)
        while at >= 0:
            if joined[at + 1] != 0x2D:  # "-": an exponent always has a digit after it
                return False
            at = joined.find(mark, at + 2)
    return True


def _session_id(metadata: Any, *, explicit: bool) -> str | None:
    """``metadata``: absent, null or ``{}``; or, on an explicit save only, exactly kagent-adk
    0.10.4's ``{session_id, source: "explicit_save"}`` - its session id, else refused."""
    if metadata is None or metadata == {}:
        return None
    if not explicit:
        raise _malformed()
    fields = _fields(metadata, _EXPLICIT_SAVE_METADATA, _EXPLICIT_SAVE_METADATA)
    if fields["source"] != EXPLICIT_SAVE:
        raise _malformed()
    return _name(fields["session_id"])


def _item(value: Any, *, explicit: bool = False) -> SaveItem:
    fields = _fields(value, _ITEM_FIELDS, _ITEM_REQUIRED)
    content = fields["content"]
    if type(content) is not str:
        raise _malformed()
    session_id = _session_id(fields.get("metadata"), explicit=explicit)
    ttl = _int(fields.get("ttl_days", 0))
    if type(ttl) is not int or ttl < 0:
        raise _malformed()
    return SaveItem(_name(fields["agent_name"]), _name(fields["user_id"]), content,
                    _vector(fields["vector"]), ttl or None, session_id)


def parse_save(raw: bytes) -> SaveItem:
    """``POST /api/memories/sessions`` (``save_memory``)."""
    return _item(_object(raw), explicit=True)


def parse_batch(raw: bytes) -> list[SaveItem]:
    """``POST /api/memories/sessions/batch``: 1 to 50 items (the automatic save: no metadata
    in either release)."""
    body = _fields(_object(raw), frozenset({"items"}), frozenset({"items"}))
    items = body["items"]
    if type(items) is not list or not 1 <= len(items) <= MAX_ITEMS:
        raise _malformed()
    return [_item(item) for item in items]


def parse_search(raw: bytes) -> Search:
    """``POST /api/memories/search``."""
    fields = _fields(_object(raw), _SEARCH_FIELDS, _SEARCH_REQUIRED)
    limit = _int(fields.get("limit", 0))
    min_score = _float(fields.get("min_score", 0.0))
    if type(limit) is not int or limit > MAX_LIMIT:
        raise _malformed()
    if type(min_score) is not float or not -1.0 <= min_score <= 1.0:  # NaN fails too
        raise _malformed()
    return Search(_name(fields["agent_name"]), _name(fields["user_id"]),
                  _vector(fields["vector"]), limit if limit > 0 else DEFAULT_LIMIT, min_score)


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
