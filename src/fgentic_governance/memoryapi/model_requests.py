"""What the governed model and embeddings routes read of a request before the provider sees it
(pure): whether a chat completion is kagent's summarisation and how much conversation it
carries, and the texts an embeddings request would have embedded. Never logged or returned.

kagent-adk 0.9.11 summarises a session (``KagentMemoryService._summarize_session_content_async``)
with one user message and nothing else: no system message, no tools, not streamed, its text
the fixed prompt below around the conversation. An Agent's own turns always carry its system
instruction, and a memory-enabled Agent's always carry its memory tools, so the two cannot be
confused. The prompt is a fact of the pinned runtime, held here once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from fgentic_governance.memory.bounds import MAX_FACT_BYTES_CEILING, MAX_SUMMARY_FACTS
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


def summary_input_bytes(raw: bytes) -> int | None:
    """The UTF-8 bytes of conversation a kagent summarisation request carries, or None when
    the request is not one (an Agent's turn). A body that is not a JSON object is refused:
    what cannot be read cannot be told apart."""
    body = _document(raw)
    messages = body.get("messages")
    if body.get("tools") or body.get("stream") or not isinstance(messages, list) \
            or len(messages) != 1 or not isinstance(messages[0], Mapping) \
            or messages[0].get("role") != "user":
        return None
    text = _text(messages[0].get("content"))
    if text is None or not text.startswith(SUMMARY_HEAD) or not text.endswith(SUMMARY_TAIL) \
            or len(text) < len(SUMMARY_HEAD) + len(SUMMARY_TAIL):
        return None
    return len(text[len(SUMMARY_HEAD):len(text) - len(SUMMARY_TAIL)].encode())


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
