"""Which A2A contexts a runtime's pass-through call names, and what it says about them.

kagent-adk 0.9.11's memory calls name no context (ADK session); its session and task calls
do, and the memory API relays them (research in docs/memory.md §6b). From one such call this
module reads, content-free, what the store's context notes need (sql/0021): the context, and
whether the call creates its session, appends user events, reaches a final task state, or
appends ``load_memory`` function calls or their responses (by id). Nothing else of a body is
kept: no text, no argument, no header.

Shapes read (the runtime's ``_session_service.py`` and ``_task_store.py``):

* ``/api/sessions/<C>`` and ``/api/sessions/<C>/events``: the path names C;
* ``POST /api/sessions``: the body's ``id`` is C (the session is created);
* ``POST /api/sessions/<C>/events``: ``{"id", "data": "<ADK Event as JSON>"}`` (a string),
  the event's ``author``
  and its ``content.parts[*].function_call`` / ``function_response`` (``name``, ``id``);
* ``POST /api/tasks``: an A2A Task, ``contextId`` and ``status.state``.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from typing import Any, Final

from fgentic_governance.memory.model import CONTEXT_ID, MAX_TOOL_CALLS, Sighting

_CONTEXT: Final = re.compile(CONTEXT_ID)
_SESSION: Final = re.compile(r"^/api/sessions/(?P<context>[^/]+)(?P<events>/events)?/?$")
FINAL_STATES: Final = frozenset({"completed", "failed", "canceled", "rejected",
                                 "input-required", "auth-required"})
"""A2A task states after which the turn sends nothing more (a2a-sdk's terminal and
interrupted states): the context is no longer in progress, but for its automatic save."""
TOOL: Final = "load_memory"
MAX_ID_BYTES: Final = 128


def context_key(raw: str) -> str:
    """The stored form of a context id: itself when a lease could name it, else a digest
    (still noted, so it still conflicts, and never equal to a lease's id)."""
    if _CONTEXT.fullmatch(raw):
        return raw
    return "sha256:" + hashlib.sha256(raw.encode("utf-8", "surrogatepass")).hexdigest()[:64]


def sighting(method: str, path: str, body: bytes | None) -> Sighting | None:
    """The sighting of one pass-through call, None when it names no context."""
    if method == "POST" and path.rstrip("/") == "/api/tasks":
        return _task(_json(body))
    if method == "POST" and path.rstrip("/") == "/api/sessions":
        created = _json(body)
        context = created.get("id") if isinstance(created, dict) else None
        return Sighting(context_key(context), created=True) if isinstance(context, str) \
            and context else None
    match = _SESSION.fullmatch(path)
    if match is None:
        return None
    context = context_key(match["context"])
    if method == "POST" and match["events"]:
        return _event(context, _json(body))
    return Sighting(context)


def _json(body: bytes | str | None) -> Any:
    """The parsed body, None when there is none or it is no JSON (never raised: what cannot
    be read says nothing, and the context's path or later calls still name it)."""
    if not body:
        return None
    try:
        return json.loads(body)
    except (ValueError, RecursionError):
        return None


def _task(task: Any) -> Sighting | None:
    if not isinstance(task, dict):
        return None
    context, status = task.get("contextId"), task.get("status")
    if not isinstance(context, str) or not context:
        return None
    state = status.get("state") if isinstance(status, dict) else None
    return Sighting(context_key(context), final=state in FINAL_STATES)


def _event(context: str, appended: Any) -> Sighting:
    """An appended event: a user event counts toward the runtime's every-fifth automatic
    save; ``load_memory`` calls and responses open and close the tool's searches."""
    data = appended.get("data") if isinstance(appended, dict) else None
    if isinstance(data, str):  # the runtime sends the event as a JSON string in the JSON
        data = _json(data)
    if not isinstance(data, dict):
        return Sighting(context)
    called = tuple(_tool_ids(data, "function_call"))[:MAX_TOOL_CALLS]
    answered = tuple(_tool_ids(data, "function_response"))[:MAX_TOOL_CALLS]
    return Sighting(context, user_events=int(data.get("author") == "user"), called=called,
                    answered=answered)


def _tool_ids(event: dict[str, Any], kind: str) -> Iterator[str]:
    """The ids of ``load_memory`` parts of ``kind`` in an ADK event (snake_case, as the
    runtime serialises them; camelCase accepted too)."""
    content = event.get("content")
    parts = content.get("parts") if isinstance(content, dict) else None
    for part in parts if isinstance(parts, list) else ():
        if not isinstance(part, dict):
            continue
        call = part.get(kind) or part.get(_camel(kind))
        if isinstance(call, dict) and call.get("name") == TOOL:
            call_id = call.get("id")
            if isinstance(call_id, str) and 0 < len(call_id.encode()) <= MAX_ID_BYTES:
                yield call_id


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(word.title() for word in rest)
