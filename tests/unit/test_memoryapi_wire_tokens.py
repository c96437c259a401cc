"""The token parser (``wire``: numbers kept as their JSON tokens) accepts and refuses exactly
what the previous parser did (numbers parsed to doubles by ``json``, the vector checked with
``storable``), and a vector's text is its components as sent.

``_reference_*`` below is that previous parser, as it was shipped before 2026-12-05 (less the
body's own spelling, which only chose the text PostgreSQL read)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, NoReturn

from hypothesis import example, given, settings
from hypothesis import strategies as st

from fgentic_governance.contract.jcs import DuplicateName, unique_object
from fgentic_governance.memory.model import EMBEDDING_DIMENSIONS, storable
from fgentic_governance.memoryapi import wire
from fgentic_governance.memoryapi.codes import ApiError

Parsed = tuple[str, Any]


class _Refused(Exception):
    pass


def _constant(_text: str) -> NoReturn:
    raise ValueError


def _object(raw: bytes) -> dict[str, Any]:
    try:
        value = json.loads(raw.decode("utf-8"), object_pairs_hook=unique_object,
                           parse_constant=_constant)
    except (DuplicateName, ValueError, RecursionError):
        value = None
    if type(value) is not dict:
        raise _Refused
    return value


def _fields(value: Any, allowed: frozenset[str], required: frozenset[str]) -> Mapping[str, Any]:
    if type(value) is not dict or not required <= value.keys() <= allowed:
        raise _Refused
    return value


def _name(value: Any) -> str:
    if type(value) is not str or not value or len(value.encode("utf-8", "replace")) > 512:
        raise _Refused
    return value


def _vector(value: Any) -> list[float]:
    if type(value) is not list or len(value) != EMBEDDING_DIMENSIONS:
        raise _Refused
    if not all(type(v) in (float, int) for v in value):
        raise _Refused
    try:
        floats = [float(v) for v in value]
    except OverflowError:
        raise _Refused from None
    if not storable(floats):
        raise _Refused
    return floats


def _item(value: Any) -> tuple[Any, ...]:
    fields = _fields(value, wire._ITEM_FIELDS, wire._ITEM_REQUIRED)
    content = fields["content"]
    if type(content) is not str:
        raise _Refused
    metadata = fields.get("metadata")
    if metadata is not None and metadata != {}:
        raise _Refused
    ttl = fields.get("ttl_days", 0)
    if type(ttl) is not int or ttl < 0:
        raise _Refused
    return (_name(fields["agent_name"]), _name(fields["user_id"]), content,
            _vector(fields["vector"]), ttl or None)


def _reference_save(raw: bytes) -> Any:
    return _item(_object(raw))


def _reference_batch(raw: bytes) -> Any:
    items = _fields(_object(raw), frozenset({"items"}), frozenset({"items"}))["items"]
    if type(items) is not list or not 1 <= len(items) <= wire.MAX_ITEMS:
        raise _Refused
    return [_item(item) for item in items]


def _reference_search(raw: bytes) -> Any:
    fields = _fields(_object(raw), wire._SEARCH_FIELDS, wire._SEARCH_REQUIRED)
    limit, min_score = fields.get("limit", 0), fields.get("min_score", 0.0)
    if type(limit) is not int or limit > wire.MAX_LIMIT:
        raise _Refused
    if type(min_score) not in (int, float) or not -1.0 <= min_score <= 1.0:
        raise _Refused
    return (_name(fields["agent_name"]), _name(fields["user_id"]), _vector(fields["vector"]),
            limit if limit > 0 else wire.DEFAULT_LIMIT, float(min_score))


def _reference(parse: Callable[[bytes], Any], raw: bytes) -> Parsed:
    try:
        return ("ok", parse(raw))
    except _Refused:
        return ("refused", None)


def _components(text: str) -> list[float]:
    return [float(part) for part in text[1:-1].split(",")]


def _as_reference(value: Any) -> Any:
    if isinstance(value, wire.SaveItem):
        return (value.agent_name, value.user_id, value.content, _components(value.text.text),
                value.ttl_days)
    if isinstance(value, wire.Search):
        return (value.agent_name, value.user_id, _components(value.text.text), value.limit,
                value.min_score)
    return [_as_reference(item) for item in value]


def _new(parse: Callable[[bytes], Any], raw: bytes) -> Parsed:
    try:
        return ("ok", _as_reference(parse(raw)))
    except ApiError as error:
        assert str(error) == "REQUEST_MALFORMED"
        return ("refused", None)


PAIRS = ((wire.parse_save, _reference_save), (wire.parse_batch, _reference_batch),
         (wire.parse_search, _reference_search))


def _same(raw: bytes) -> None:
    for new, old in PAIRS:
        assert _new(new, raw) == _reference(old, raw), new.__name__


# -- generated bodies ------------------------------------------------------------------------

_DIGITS = st.text("0123456789", min_size=1, max_size=45)
_INTEGER = st.one_of(st.just("0"), st.builds(lambda a, b: a + b, st.sampled_from("123456789"),
                                             st.text("0123456789", max_size=45)))
# Every JSON number notation, and some that are not JSON (leading zeros, "+", a bare dot).
_LITERAL = st.one_of(
    st.builds(lambda sign, whole, frac, exp: sign + whole + frac + exp,
              st.sampled_from(["", "-"]), _INTEGER,
              st.sampled_from([""]) | st.builds(lambda d: "." + d, _DIGITS),
              st.sampled_from([""]) | st.builds(lambda e, s, d: e + s + d,
                                                 st.sampled_from("eE"),
                                                 st.sampled_from(["", "+", "-"]),
                                                 st.text("0123456789", min_size=1, max_size=4))),
    st.sampled_from(["-0", "0.0", "-0.0", "1e-45", "1.4e-45", "3.5e38", "3.4028235e38",
                     "3.4028236e38", "-3.4028235e38", "3.4028235677973366e38", "1e38", "1e39",
                     "1E+38", "1e999", "-1e999", "1e-999", "NaN", "Infinity", "-Infinity",
                     "00.5", "01", "+1", ".5", "5.", "1_0", "true", "null", '"0.5"', "[]",
                     "9" * 39, "9" * 38, "9" * 309, "1" + "0" * 38 + ".5", "9" * 400]),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.floats(width=32, allow_nan=False, allow_infinity=False).map(repr),
    st.integers(-(10**40), 10**40).map(str),
)


def _vector_text(odd: list[tuple[int, str]], fill: str, spaced: bool) -> str:
    parts = [fill] * EMBEDDING_DIMENSIONS
    for index, literal in odd:
        parts[index % EMBEDDING_DIMENSIONS] = literal
    return "[" + (", " if spaced else ",").join(parts) + "]"


_VECTOR = st.builds(_vector_text, st.lists(st.tuples(st.integers(0, 10_000), _LITERAL),
                                           max_size=3),
                    st.sampled_from(["0.5", "-0.036084391824351615", "1e-05", "0", "7"]),
                    st.booleans())
_SCALAR = _LITERAL | st.sampled_from(['"x"', "{}", '{"k": 1}', "null", "0", "5", "51", "-1"])
_NAME = st.sampled_from(['"ns__NS__a"'] * 6 + ['"@a:example.org"', '""', "5", '"\\ud800"'])


@st.composite
def _item_text(draw: st.DrawFn, search: bool = False) -> str:
    members = {"agent_name": draw(_NAME), "user_id": draw(_NAME), "vector": draw(_VECTOR)}
    if not search:
        members["content"] = draw(st.sampled_from(['"fact"'] * 4 + ["1.5", '"\\ud800"']))
    optional = ["limit", "min_score"] if search else ["ttl_days", "metadata"]
    for name in optional:
        if draw(st.integers(0, 2)) == 0:
            members[name] = draw(_SCALAR)
    if draw(st.integers(0, 9)) == 0:
        members["extra"] = draw(_SCALAR)
    names = list(members)
    if draw(st.booleans()):
        names = draw(st.permutations(names))
    if draw(st.integers(0, 9)) == 0:
        names.append(draw(st.sampled_from(names)))  # a duplicate name
    spelled = [(draw(st.sampled_from(['"vect\\u006fr"', '"vector"'])) if name == "vector"
                else json.dumps(name)) for name in names]
    return "{" + ",".join(f"{key}: {members[name]}" for key, name in
                          zip(spelled, names, strict=True)) + "}"


@settings(max_examples=400)
@given(_item_text())
@example('{"agent_name":"a","user_id":"u","content":"c","vector":['
         + ",".join(["0.5"] * 767 + ["-0"]) + '],"ttl_days":2,"metadata":null}')
@example('{"agent_name":"a","user_id":"u","content":"c","vector":['
         + ",".join(["0.5"] * 767 + ["1" + "0" * 5000]) + "]}")
@example('{"agent_name":"a","user_id":"u","content":"c","vector":['
         + ",".join(["0.5"] * 768) + '],"ttl_days":' + "1" * 5000 + "}")
def test_a_save_is_accepted_and_refused_exactly_as_before(body: str) -> None:
    _same(body.encode())
    _same(('{"items": [' + body + "]}").encode())


@settings(max_examples=400)
@given(_item_text(search=True))
@example('{"agent_name":"a","user_id":"u","vector":[' + ",".join(["1e-45"] * 768)
         + '],"limit":-0,"min_score":-1}')
def test_a_search_is_accepted_and_refused_exactly_as_before(body: str) -> None:
    _same(body.encode())


@settings(max_examples=200)
@given(st.lists(_item_text(), min_size=1, max_size=3), st.sampled_from(["", '"x":1,']))
def test_a_batch_is_accepted_and_refused_exactly_as_before(items: list[str], extra: str) -> None:
    _same(("{" + extra + '"items": [' + ",".join(items) + "]}").encode())


@given(st.binary(max_size=300))
def test_arbitrary_bytes_are_refused_alike(raw: bytes) -> None:
    _same(raw)


@given(st.lists(_LITERAL, min_size=1, max_size=EMBEDDING_DIMENSIONS))
def test_an_accepted_vector_is_its_tokens_joined(literals: list[str]) -> None:
    parts = (literals * EMBEDDING_DIMENSIONS)[:EMBEDDING_DIMENSIONS]
    raw = ('{"agent_name":"a","user_id":"u","content":"c","vector":[ '
           + " ,\n".join(parts) + "]}").encode()
    verdict = _reference(_reference_save, raw)
    assert _new(wire.parse_save, raw) == verdict
    if verdict[0] == "ok":
        assert wire.parse_save(raw).text.text == "[" + ",".join(parts) + "]"
