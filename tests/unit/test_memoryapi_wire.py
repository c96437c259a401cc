"""kagent's memory request bodies as the memory API parses them (issue 17 §1)."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

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


@pytest.mark.parametrize("body", [{"items": []}, {"items": [ITEM] * 51}, {"items": ITEM},
                                  {"items": [ITEM], "more": 1}])
def test_batch_bounds(body: Any) -> None:
    assert refused(parse_batch, json.dumps(body).encode())


@given(st.binary(max_size=200))
def test_arbitrary_bytes_never_raise_anything_else(raw: bytes) -> None:
    for parse in (parse_save, parse_batch, parse_search):
        with contextlib.suppress(ApiError):
            parse(raw)
