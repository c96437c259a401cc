"""What the governed model and embeddings routes read of a request (pure)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fgentic_governance.memoryapi.codes import ApiError, ApiReason
from fgentic_governance.memoryapi.model_requests import (
    SUMMARY_HEAD,
    SUMMARY_TAIL,
    check_embedding_inputs,
    summary_input_bytes,
)
from fgentic_governance.reasons import Reason


def chat(*messages: dict[str, Any], **fields: Any) -> bytes:
    return json.dumps({"model": "m", "messages": list(messages), **fields}).encode()


def user(text: Any) -> dict[str, Any]:
    return {"role": "user", "content": text}


@given(st.text(max_size=200))
def test_a_summary_carries_its_conversation_in_utf8_bytes(conversation: str) -> None:
    prompt = SUMMARY_HEAD + conversation + SUMMARY_TAIL
    assert summary_input_bytes(chat(user(prompt))) == len(conversation.encode())
    parts = [{"type": "text", "text": prompt[:10]}, {"type": "text", "text": prompt[10:]}]
    assert summary_input_bytes(chat(user(parts))) == len(conversation.encode())


@pytest.mark.parametrize("body", [
    chat(user("Hello")),  # an ordinary turn
    chat({"role": "system", "content": "You are helpful."},
         user(SUMMARY_HEAD + "x" + SUMMARY_TAIL)),  # an Agent's turn quoting the prompt
    chat(user(SUMMARY_HEAD + "x" + SUMMARY_TAIL), tools=[{"type": "function"}]),
    chat(user(SUMMARY_HEAD + "x" + SUMMARY_TAIL), stream=True),
    chat(user(SUMMARY_HEAD + "x")),  # the tail missing
    chat({"role": "assistant", "content": SUMMARY_HEAD + "x" + SUMMARY_TAIL}),
])
def test_what_is_not_kagents_summarisation_is_a_turn(body: bytes) -> None:
    assert summary_input_bytes(body) is None


@pytest.mark.parametrize("raw", [b"", b"[]", b"{", json.dumps({"a": 1, "a ": 2})[:-2].encode()])
def test_a_body_that_cannot_be_read_is_refused(raw: bytes) -> None:
    with pytest.raises(ApiError) as refused:
        summary_input_bytes(raw)
    assert refused.value.code is ApiReason.REQUEST_MALFORMED


def embeddings(inputs: Any) -> bytes:
    return json.dumps({"model": "e", "input": inputs}).encode()


def test_embedding_inputs_are_bounded_before_any_cost() -> None:
    assert check_embedding_inputs(embeddings("é" * 256)) == 1
    assert check_embedding_inputs(embeddings(["a"] * 10)) == 10
    for inputs, code in (("é" * 257, Reason.FACT_TOO_LARGE),
                         (["a"] * 11, Reason.SUMMARY_TOO_LARGE),
                         ([], ApiReason.REQUEST_MALFORMED),
                         ([[1, 2, 3]], ApiReason.REQUEST_MALFORMED),
                         (None, ApiReason.REQUEST_MALFORMED)):
        with pytest.raises(ApiError) as refused:
            check_embedding_inputs(embeddings(inputs))
        assert refused.value.code is code
