"""The strict JSON reader of the shared server: what it refuses, with which code, and that a
refusal never carries the input (the servers themselves are tested in integration)."""

from __future__ import annotations

import pytest

from fgentic_governance.serving import http as serving
from fgentic_governance.serving import strict_json
from fgentic_governance.serving.strict_json import Refusal, Refused

SENTINEL = "SENTINEL-5ee7"


@pytest.mark.parametrize(("raw", "code"), [
    (f'{{"a": 1, "a": "{SENTINEL}"}}'.encode(), Refusal.DUPLICATE_NAME),
    (f'{{"x": [{{"subject": "@bob:x", "subject": "{SENTINEL}"}}]}}'.encode(),
     Refusal.DUPLICATE_NAME),
    (b'{"a": NaN}', Refusal.NUMBER_INVALID),
    (b'[Infinity]', Refusal.NUMBER_INVALID),
    (b'[-Infinity]', Refusal.NUMBER_INVALID),
    (b'[1e999]', Refusal.NUMBER_INVALID),
    (b'{"a": "\xff"}', Refusal.NOT_UTF8),
    (b'{"a": "\\ud800"}', Refusal.NOT_UTF8),
    (b'{"\\udc00": 1}', Refusal.NOT_UTF8),
    (f'{{"{SENTINEL}"'.encode(), Refusal.NOT_JSON),
    (b'', Refusal.NOT_JSON),
    (b'[' * 100_000 + b']' * 100_000, Refusal.TOO_DEEP),
    (b'[' * 129 + b']' * 129, Refusal.TOO_DEEP),
    (b'{"a":' * 129 + b'1' + b'}' * 129, Refusal.TOO_DEEP),
])
def test_refusals_carry_only_a_code(raw: bytes, code: Refusal) -> None:
    with pytest.raises(Refused) as info:
        strict_json.loads(raw)
    assert info.value.code is code
    assert str(info.value) == code.value and info.value.status == 400
    assert info.value.__cause__ is None and info.value.__suppress_context__


@pytest.mark.parametrize(("raw", "value"), [
    (b'{"a": 1, "b": {"a": 2}}', {"a": 1, "b": {"a": 2}}),
    (b'[1.5, -0.0, 1e300, 12345678901234567890]', [1.5, -0.0, 1e300, 12345678901234567890]),
    (b'"\\ud83d\\ude00 \\\\ud800"', "\U0001f600 \\ud800"),  # a pair; an escaped backslash
    (b'"\\u003cb\\u003e"', "<b>"),
])
def test_valid_json_is_returned(raw: bytes, value: object) -> None:
    assert strict_json.loads(raw) == value


def test_the_depth_bound_is_inclusive_and_a_parameter() -> None:
    depth_max = strict_json.MAX_JSON_DEPTH
    parsed = strict_json.loads(b'[' * depth_max + b']' * depth_max)
    depth = 1
    while parsed:
        parsed, depth = parsed[0], depth + 1
    assert depth == strict_json.MAX_JSON_DEPTH
    assert strict_json.loads(b'{"a": {"b": 1}}', max_depth=2) == {"a": {"b": 1}}
    with pytest.raises(Refused):
        strict_json.loads(b'{"a": {"b": []}}', max_depth=2)


def test_body_refusal_statuses() -> None:
    assert Refused(Refusal.BODY_TOO_LARGE).status == 413
    assert Refused(Refusal.BODY_TIMEOUT).status == 408
    assert Refused(Refusal.BODY_INCOMPLETE).status == 400


def test_method_labels_are_bounded() -> None:
    assert serving.method_label("POST") == "POST"
    assert serving.method_label(SENTINEL) == "OTHER"


class _Arriving:
    """What BodyBudget reads of a request: its source address and declared length."""

    def __init__(self, remote: str, content_length: int) -> None:
        self.remote, self.content_length = remote, content_length


def test_the_body_budget_holds_bytes_as_they_arrive_and_per_source() -> None:
    """N9: a declared length reserved up front let connections that declared 1 MiB and sent a
    byte hold the whole budget; one source may now hold only its share."""
    from typing import cast

    from aiohttp import web

    budget = serving.BodyBudget(10, per_source=6)
    slow = [cast(web.BaseRequest, _Arriving("10.0.0.1", 10)) for _ in range(3)]
    with budget.hold(slow[0]) as first, budget.hold(slow[1]), budget.hold(slow[2]):
        assert budget.held == 0  # Declared, not arrived: nothing held.
        assert first.take(6)
        assert not first.take(1)  # The source's share is used up.
        with budget.hold(cast(web.BaseRequest, _Arriving("10.0.0.2", 4))) as other:
            assert other.take(4)  # Another source still has the rest.
            assert not other.take(1)  # The whole budget.
            assert budget.by_source == {"10.0.0.1": 6, "10.0.0.2": 4}
        assert budget.held == 6
    assert budget.held == 0 and budget.by_source == {}
