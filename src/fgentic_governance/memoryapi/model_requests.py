"""What the governed model and embeddings routes read of a request before the provider sees it
(pure): whether a chat completion carries kagent's summarisation and how much conversation it
carries, and the texts an embeddings request would have embedded. Never logged or returned.

kagent-adk 0.9.11 summarises a session (``KagentMemoryService._summarize_session_content_async``)
with one user message and nothing else: no system message, no tools, not streamed, its text
the fixed prompt below around the conversation. That exact request is measured precisely (its
conversation's bytes). The prompt is recognised in any other shape too (R4-8): anywhere in
the messages' text, however split into parts and messages, or in any one string of the
request (a tool's description), compared after NFKC, case folding and with everything but
letters and digits removed, so a system message, a tools list, ``stream``, spacing, markup or
a role spelled ``User`` do not make it a turn. Such a request is charged as a summarisation
whose input is its whole body (the conversation may be anywhere in it). An Agent's own turns
(kagent's flow always sends the Agent's instruction as a system message, and a memory-enabled
Agent's turns its memory tools) carry none of the prompt's sentences unless a user quotes them;
then the turn is charged as a summary (fail closed). What the route cannot tell from a turn is
said in docs/memory.md §14. The prompt is a fact of the pinned runtime, held here once.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any, Final

from fgentic_governance.memory.bounds import MAX_FACT_BYTES_CEILING, MAX_SUMMARY_FACTS
from fgentic_governance.memory.write_policy import normalize
from fgentic_governance.memoryapi.codes import ApiError, ApiReason
from fgentic_governance.reasons import Reason
from fgentic_governance.serving import strict_json

SUMMARY_HEAD: Final = (
    "Extract and summarize the key information from this conversation that would be useful "
    "for the agent to remember in future interactions.\n\nFocus on:\n- User preferences, "
    "decisions, and explicit requests\n- Important facts mentioned (names, dates, project names, "
    "etc.)\n- Contextual information that provides background\n- Lessons learned from the "
    "conversation\n\nYou MUST output a JSON list of strings, where each string is a distinct "
    "fact or memory.\nExample: [\"User prefers dark mode\", \"Meeting scheduled for Friday\", "
    "\"Always use the save_memory tool to store memory\"]\n\nDo not include any preamble or "
    "markdown formatting like ```json.\nOutput ONLY the JSON list.\n\nConversation:\n")
SUMMARY_TAIL: Final = "\n\nSummary (JSON List):"
MODEL_BODY_BYTES: Final = 4 * 1024 * 1024
"""Largest chat completion request read (an Agent's turn carries its whole history)."""
EMBEDDINGS_BODY_BYTES: Final = 64 * 1024
"""Largest embeddings request read: ten facts of 512 bytes, escaped, with room to spare."""


def _document(raw: bytes) -> Mapping[str, Any]:
    try:
        body = strict_json.loads(raw, finite_floats=False)
    except strict_json.Refused:
        raise ApiError(ApiReason.REQUEST_MALFORMED) from None
    if not isinstance(body, Mapping):
        raise ApiError(ApiReason.REQUEST_MALFORMED)
    return body


_NOT_LETTERS: Final = re.compile(r"[\W_]+")


def _folded(text: str) -> str:
    """``text`` as the prompt is compared: NFKC, invisible characters dropped (the write
    policy's reading), case folded, every character but letters and digits removed."""
    return _NOT_LETTERS.sub("", normalize(text).casefold())


SUMMARY_MARKERS: Final = tuple(_folded(sentence) for sentence in (
    "Extract and summarize the key information from this conversation that would be useful "
    "for the agent to remember in future interactions.",
    "You MUST output a JSON list of strings, where each string is a distinct fact or memory.",
    'Example: ["User prefers dark mode", "Meeting scheduled for Friday", "Always use the '
    'save_memory tool to store memory"]'))
"""The prompt's own sentences (none of them ordinary chat), any one of which makes a request
a summarisation."""


def summary_input_bytes(raw: bytes) -> int | None:
    """The UTF-8 bytes of conversation a summarisation request carries, or None when the
    request is an Agent's turn: kagent's exact request its conversation's bytes, any other
    request carrying the prompt its whole body's. A body that is not a JSON object with a
    non-empty list of message objects is refused: what cannot be read cannot be told apart."""
    body = _document(raw)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages \
            or not all(isinstance(m, Mapping) for m in messages):
        raise ApiError(ApiReason.REQUEST_MALFORMED)
    exact = _exact_summary(body, messages)
    if exact is not None:
        return exact
    return len(raw) if _carries_prompt(body, messages) else None


def _exact_summary(body: Mapping[str, Any], messages: list[Mapping[str, Any]]) -> int | None:
    """The conversation's bytes of kagent's own request: one user message of the prompt
    around the conversation, no tools, not streamed."""
    if body.get("tools") or body.get("stream") or len(messages) != 1 \
            or messages[0].get("role") != "user":
        return None
    text = _text(messages[0].get("content"))
    if text is None or not text.startswith(SUMMARY_HEAD) or not text.endswith(SUMMARY_TAIL) \
            or len(text) < len(SUMMARY_HEAD) + len(SUMMARY_TAIL):
        return None
    return len(text[len(SUMMARY_HEAD):len(text) - len(SUMMARY_TAIL)].encode())


def _carries_prompt(body: Mapping[str, Any], messages: list[Mapping[str, Any]]) -> bool:
    """Whether any of the prompt's sentences is in the messages' text read in order (split
    across parts or messages), or in any one string of the request, key or value."""
    spoken = _folded("".join(text for m in messages for text in _spoken(m.get("content"))))
    # One string at a time: a separator folding keeps apart, so no marker spans two.
    each = "|".join(_folded(text) for text in _strings(body))
    return any(marker in spoken or marker in each for marker in SUMMARY_MARKERS)


def _spoken(content: Any) -> Iterator[str]:
    """A message's text as the model reads it: the string, or the text of each part."""
    if isinstance(content, str):
        yield content
    elif isinstance(content, list):
        for part in content:
            text = part.get("text") if isinstance(part, Mapping) else part
            if isinstance(text, str):
                yield text


def _strings(value: Any) -> Iterator[str]:
    """Every string in ``value``, object keys included, in document order."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield key
            yield from _strings(item)


def _text(content: Any) -> str | None:
    """A message's text: a string, or a list of text parts joined as OpenAI reads them."""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(
            isinstance(p, Mapping) and p.get("type") == "text" and isinstance(p.get("text"), str)
            for p in content):
        return "".join(p["text"] for p in content)
    return None


def check_embedding_inputs(raw: bytes) -> int:
    """The number of texts an embeddings request would embed, each a string of at most 512
    UTF-8 bytes (a stored fact's ceiling and a query's bound, ADR 0023 §41-42), at most ten (an
    automatic save's facts); token arrays and anything else are refused. Before any cost."""
    inputs = _document(raw).get("input")
    texts = [inputs] if isinstance(inputs, str) else inputs
    if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
        raise ApiError(ApiReason.REQUEST_MALFORMED)
    if len(texts) > MAX_SUMMARY_FACTS:
        raise ApiError(Reason.SUMMARY_TOO_LARGE)
    if any(len(t.encode()) > MAX_FACT_BYTES_CEILING for t in texts):
        raise ApiError(Reason.FACT_TOO_LARGE)
    return len(texts)
