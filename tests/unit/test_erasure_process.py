"""The erasure process's frames (``controller.erasure_process``): outcomes and refusals come
back as they were sent, and anything malformed or oversized fails closed."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fgentic_governance.controller import erasure_process as ep
from fgentic_governance.memory import StoreRefusal
from fgentic_governance.offboarding.flow import ScopeOutcome
from fgentic_governance.reasons import Reason

keys = st.from_regex(r"[a-z0-9-]{1,20}/[a-z0-9-]{1,20}", fullmatch=True)
outcomes = st.lists(st.builds(ScopeOutcome, keys, st.booleans(), st.sampled_from(Reason),
                              st.from_regex(r"[a-f0-9]{0,32}", fullmatch=True)), max_size=30)


@given(outcomes, st.integers(1, 2**31))
def test_outcomes_come_back_as_they_were_sent(sent: list[ScopeOutcome], call: int) -> None:
    answer = ep.answer_of(call, sent, None)
    assert answer["id"] == call and ep.outcomes_of(answer) == sent


@given(st.sampled_from(Reason))
def test_a_refusal_is_raised_with_its_reason(reason: Reason) -> None:
    with pytest.raises(StoreRefusal) as raised:
        ep.outcomes_of(ep.answer_of(7, None, reason))
    assert raised.value.reason is reason


def test_a_failure_without_a_reason_is_an_internal_error() -> None:
    with pytest.raises(StoreRefusal) as raised:
        ep.outcomes_of(ep.answer_of(7, None, None))
    assert raised.value.reason is Reason.INTERNAL_ERROR


@pytest.mark.parametrize("answer", [
    {}, {"outcomes": None}, {"outcomes": [["a/b", True, "NOT_A_REASON", ""]]},
    {"outcomes": [["a/b", True]]}, {"refusal": "NOT_A_REASON"}])
def test_a_malformed_answer_fails_closed(answer: dict[str, object]) -> None:
    with pytest.raises(StoreRefusal) as raised:
        ep.outcomes_of(answer)
    assert raised.value.reason is Reason.INTERNAL_ERROR


def test_only_a_literal_true_is_verified() -> None:
    (outcome,) = ep.outcomes_of({"outcomes": [["a/b", "yes", "OK", "r"]]})
    assert not outcome.verified


async def _frames(data: bytes) -> list[dict[str, object] | None]:
    reader = asyncio.StreamReader()
    reader.feed_data(data)
    reader.feed_eof()
    return [await ep.receive(reader), await ep.receive(reader)]


async def test_a_frame_is_read_whole_and_the_end_is_none() -> None:
    body = b'{"id":1}'
    assert await _frames(ep.FRAME.pack(len(body)) + body) == [{"id": 1}, None]


async def test_an_oversized_or_non_object_frame_is_a_broken_peer() -> None:
    with pytest.raises(ValueError, match="too large"):
        await _frames(ep.FRAME.pack(ep.MAX_FRAME + 1))
    with pytest.raises(ValueError, match="not an object"):
        await _frames(ep.FRAME.pack(2) + b"[]")


async def test_without_the_process_an_offboarding_is_refused() -> None:
    assert not ep.started()
    with pytest.raises(StoreRefusal) as raised:
        await ep.run_offboarding(None, [])  # type: ignore[arg-type]
    assert raised.value.reason is Reason.STORE_UNAVAILABLE


def test_it_is_forked_only_before_any_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ep.threading, "active_count", lambda: 2)
    with pytest.raises(RuntimeError, match="before any thread"):
        ep.fork(None)  # type: ignore[arg-type]
