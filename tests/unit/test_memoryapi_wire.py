"""kagent's memory request bodies as the memory API parses them (issue 17 §1)."""

from __future__ import annotations

import contextlib
import json
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fgentic_governance.memory.model import FLOAT4_MAX, VectorText
from fgentic_governance.memoryapi.codes import ApiError
from fgentic_governance.memoryapi.wire import parse_batch, parse_save, parse_search

VECTOR = [0.5] * 768
ITEM = {"agent_name": "ns__NS__a", "user_id": "@a:example.org", "content": "fact",
        "vector": VECTOR}


def refused(parse: Any, raw: bytes) -> bool:
    try:
        parse(raw)
    except ApiError as error:
        assert str(error) == "REQUEST_MALFORMED"
        return True
    return False


def test_kagents_shapes_parse() -> None:
    item = parse_save(json.dumps({**ITEM, "ttl_days": 2, "metadata": {}}).encode())
    assert (item.ttl_days, item.vector == VECTOR) == (2, True)
    assert parse_save(json.dumps({**ITEM, "ttl_days": 0}).encode()).ttl_days is None
    assert len(parse_batch(json.dumps({"items": [ITEM] * 50}).encode())) == 50
    search = parse_search(json.dumps({k: ITEM[k] for k in ("agent_name", "user_id", "vector")}
                                     | {"limit": 0, "min_score": 0.3}).encode())
    assert (search.limit, search.min_score) == (5, 0.3)  # kagent's default limit


@pytest.mark.parametrize("raw", [
    b'{"agent_name": "a", "agent_name": "b"}',
    json.dumps({**ITEM, "vector": [0.5] * 767}).encode(),
    json.dumps({**ITEM, "vector": [True] * 768}).encode(),
    json.dumps({**ITEM, "vector": ["0.5"] * 768}).encode(),
    json.dumps(ITEM).replace("[0.5,", "[1e999,", 1).encode(),
    json.dumps(ITEM).replace("[0.5,", "[NaN,", 1).encode(),
    json.dumps(ITEM).replace("[0.5,", "[" + "9" * 400 + ",", 1).encode(),
    json.dumps({**ITEM, "metadata": {"k": "v"}}).encode(),
    json.dumps({**ITEM, "ttl_days": -1}).encode(),
    json.dumps({**ITEM, "ttl_days": 1.5}).encode(),
    json.dumps({**ITEM, "extra": 1}).encode(),
    json.dumps({**ITEM, "content": 5}).encode(),
    json.dumps({**ITEM, "agent_name": ""}).encode(),
    b"\xff\xfe", b"[]", b"null", b"",
])
def test_what_kagent_would_never_send_is_malformed(raw: bytes) -> None:
    assert refused(parse_save, raw)


EXPLICIT = {"session_id": "ctx-1", "source": "explicit_save"}
"""What kagent-adk 0.10.4's ``save_memory`` sends as ``metadata`` (issue 38 §5)."""


def test_kagent_0_10_4s_explicit_save_metadata_parses_to_its_session_only() -> None:
    item = parse_save(json.dumps({**ITEM, "metadata": EXPLICIT}).encode())
    assert (item.session_id, item.content) == ("ctx-1", "fact")
    assert "ctx-1" not in repr(item)
    assert parse_save(json.dumps(ITEM).encode()).session_id is None


@pytest.mark.parametrize("metadata", [
    {**EXPLICIT, "source": "automatic"}, {**EXPLICIT, "note": "x"}, {"session_id": "ctx-1"},
    {"source": "explicit_save"}, {**EXPLICIT, "session_id": ""},
    {**EXPLICIT, "session_id": 5}, {**EXPLICIT, "session_id": {"k": "v"}},
    {**EXPLICIT, "session_id": "x" * 513}, [EXPLICIT], "explicit_save",
])
def test_any_other_metadata_is_malformed(metadata: Any) -> None:
    assert refused(parse_save, json.dumps({**ITEM, "metadata": metadata}).encode())


def test_a_batch_item_carries_no_metadata() -> None:
    """The automatic save sends none in either release; a batch naming a session is refused."""
    assert refused(parse_batch, json.dumps({"items": [{**ITEM, "metadata": EXPLICIT}]}).encode())


@pytest.mark.parametrize("body", [{"items": []}, {"items": [ITEM] * 51}, {"items": ITEM},
                                  {"items": [ITEM], "more": 1}])
def test_batch_bounds(body: Any) -> None:
    assert refused(parse_batch, json.dumps(body).encode())


@given(st.binary(max_size=200))
def test_arbitrary_bytes_never_raise_anything_else(raw: bytes) -> None:
    for parse in (parse_save, parse_batch, parse_search):
        with contextlib.suppress(ApiError):
            parse(raw)


# -- the vector as received (VectorText): PostgreSQL reads the body's own digits -------------

def _components(text: str) -> list[float]:
    return [float(part) for part in text.strip()[1:-1].split(",")]


finite = st.floats(-FLOAT4_MAX, FLOAT4_MAX, width=64) | st.integers(-10, 10)  # storable


@given(st.lists(st.lists(finite, min_size=1, max_size=12), min_size=1, max_size=3),
       st.sampled_from([None, 1]), st.sampled_from([(",", ":"), (", ", ": ")]))
def test_each_vector_text_is_its_own_items_numbers(
        seeds: list[list[float]], indent: int | None, separators: tuple[str, str]) -> None:
    vectors = [[seed[i % len(seed)] for i in range(768)] for seed in seeds]  # 768 each
    items = [{**ITEM, "content": f"fact {i}", "vector": v} for i, v in enumerate(vectors)]
    raw = json.dumps({"items": items}, indent=indent, separators=separators).encode()
    parsed = parse_batch(raw)
    for item, vector in zip(parsed, vectors, strict=True):
        assert item.text is not None and item.embedding is item.text
        assert _components(item.text.text) == [float(v) for v in vector] == item.vector


def test_an_escaped_member_name_is_read_like_any_other() -> None:
    plain = json.dumps({**ITEM, "vector": [0.25] * 768})
    escaped = plain.replace('"vector"', '"vect\\u006fr"')
    item = parse_save(escaped.encode())
    assert item.embedding is item.text and _components(item.text.text) == [0.25] * 768
    search = parse_search(json.dumps({k: ITEM[k] for k in ("agent_name", "user_id")}
                                     | {"vector": [0.25] * 768}).encode())
    assert _components(search.text.text) == [0.25] * 768


def test_a_vector_spelled_inside_a_string_is_not_taken_for_the_member() -> None:
    """A fact that quotes a vector member: only the parsed member's own tokens are joined."""
    decoy = '"vector": [' + ",".join(["9"] * 768) + "]"
    raw = json.dumps({**ITEM, "content": decoy, "vector": [0.5] * 768}).encode()
    item = parse_save(raw)
    assert _components(item.text.text) == [0.5] * 768
    escaped = raw.decode().replace('"vector": [0.5', '"vect\\u006fr": [0.5').encode()
    assert _components(parse_save(escaped).text.text) == [0.5] * 768


def test_the_text_is_the_tokens_as_sent() -> None:
    tokens = (["5e-1", "-0", "0", "1", "-0.0", "1E-2", "0.12345678901234567890123"] * 110)[:768]
    raw = ('{"agent_name":"a","user_id":"u","content":"c","vector":[ '
           + " ,\n".join(tokens) + " ]}").encode()
    assert parse_save(raw).text.text == "[" + ",".join(tokens) + "]"


@pytest.mark.parametrize("text", [
    "[" + ",".join(["1_0"] * 768) + "]",        # float() takes it, strtof reads 1
    "[" + ",".join(["nan"] * 768) + "]",
    "[" + ",".join(["0.5"] * 767) + "]",        # 767 components
    "[" + ",".join(["0.5"] * 767 + ["0.25"]) + "]",  # another vector
    "[" + ",".join(["0.5"] * 768) + "] ",       # anything around the brackets
    "0.5," * 767 + "0.5",
])
def test_vector_text_spells_exactly_its_vector_or_is_none(text: str) -> None:
    assert VectorText.of(text, [0.5] * 768) is None


def test_vector_text_of_its_own_spelling() -> None:
    text = "[ " + ", ".join(["5e-1"] * 767 + ["-0"]) + " ]"
    made = VectorText.of(text, [0.5] * 767 + [0.0])
    assert made is not None and made.text == text
    assert VectorText.of(text, [0.5] * 767 + [math.inf]) is None
