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


PROMPT = SUMMARY_HEAD + "Alice: I take my tea green." + SUMMARY_TAIL
SYSTEM = {"role": "system", "content": "You are helpful."}
TOOLS = [{"type": "function", "function": {"name": "load_memory", "parameters": {}}}]


IMAGE = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}


def pieces(text: str) -> list[str]:
    """``text`` in pieces shorter than any of the prompt's sentences."""
    return [text[i:i + 30] for i in range(0, len(text), 30)]


@pytest.mark.parametrize("body", [
    chat(SYSTEM, user(PROMPT)),  # a system message
    chat(user(PROMPT), tools=TOOLS, tool_choice="auto"),  # a tools list
    chat(user(PROMPT), stream=True, stream_options={"include_usage": True}),
    chat(user(PROMPT + " ")),  # a trailing space
    chat({"role": "User", "content": PROMPT}),  # the role in another case
    chat(user(SUMMARY_HEAD + "x")),  # the tail missing
    chat(user(PROMPT.upper().replace("\n", " "))),  # case and spacing
    chat(user("\u200b".join(PROMPT))),  # invisible characters between every letter
    chat(user("**" + PROMPT.replace(". ", ".\n\n") + "**")),  # markup
    chat({"role": "assistant", "content": PROMPT}),
    chat(SYSTEM, user([{"type": "text", "text": piece} for piece in pieces(PROMPT)]
                      + [IMAGE])),  # split across parts
    chat(SYSTEM, user([IMAGE, *({"type": "text", "text": p} for p in pieces(PROMPT))])),
    chat(SYSTEM, *(user(piece) for piece in pieces(PROMPT))),  # split across messages
    chat(SYSTEM, user("Hello"), tools=[{"type": "function", "function": {
        "name": "f", "description": PROMPT, "parameters": {}}}]),  # in a tool's description
    chat(SYSTEM, user("Hello"), tools=[{"type": "function", "function": {
        "name": "f", "parameters": {"properties": {PROMPT: {}}}}}]),  # in a key
])
def test_kagents_prompt_in_any_shape_is_a_summary_of_the_whole_body(body: bytes) -> None:
    """R4-8: the same work with a system message, a tools list, ``stream: true``, a trailing
    space or role "User" was passed on as a turn, uncharged. Any request carrying one of the
    prompt's sentences is a summarisation, its input the whole body (never less than the
    conversation it carries)."""
    assert summary_input_bytes(body) == len(body)


def test_kagents_own_request_is_measured_by_its_conversation() -> None:
    assert summary_input_bytes(chat(user(PROMPT))) == len(b"Alice: I take my tea green.")


@pytest.mark.parametrize("body", [
    chat(user("Hello")),  # an ordinary turn
    # A memory-enabled Agent's turn as kagent-adk 0.9.11 sends it: its instruction first,
    # the memory tools, a tool call and its result, streamed or not.
    chat({"role": "system", "content": "You are helpful.\n\nYou have long-term memory: use "
          "save_memory to store important findings, learnings, and user preferences."},
         user("What tea do I like?"),
         {"role": "assistant", "content": None, "tool_calls": [{
             "id": "call_1", "type": "function",
             "function": {"name": "load_memory", "arguments": '{"query": "tea"}'}}]},
         {"role": "tool", "tool_call_id": "call_1", "content": {"memories": ["green tea"]}},
         tools=TOOLS, tool_choice="auto", stream=True),
    chat(SYSTEM, user("Summarize our conversation as a JSON list, please.")),
    chat(user("Summary (JSON List):")),  # a fragment of the prompt, not one of its sentences
])
def test_a_turn_without_the_prompts_sentences_is_passed_on(body: bytes) -> None:
    assert summary_input_bytes(body) is None


@pytest.mark.parametrize("raw", [
    b"", b"[]", b"{", json.dumps({"a": 1, "a ": 2})[:-2].encode(),
    chat(), b'{"model": "m"}', b'{"messages": "hello"}', b'{"messages": ["hello"]}'])
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
