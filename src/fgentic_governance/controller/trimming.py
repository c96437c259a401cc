"""Watched objects without ``metadata.managedFields``, from the moment Kopf reads them (issue 39).

The API server sends every object with its field-ownership record, ``managedFields``: about half
of a MemoryScope's JSON (2.5 of 5.2 KB) and most of its parsed dicts. Nothing in the operator
reads it: not Kopf (its diff essence, finalizer and status patches leave it out), not a handler
(server-side apply sends its own field manager and never reads the record back). Yet every
body Kopf holds carries it: each raw event queued for an object's worker, the body of every
handler waiting for a reconcile slot (thousands at once in a creation burst), the live body of
a timer's object. At 1,000 pairs most of the operator's growth was that burst's peak, which the
allocators then keep (docs/scale.md, "Where the memory goes").

Kopf 1.45 has no setting that filters a watched body, and a watch cannot ask the server to omit
the field, so the one place is where Kopf's watcher takes raw events from its stream:
``kopf._cogs.clients.watching.infinite_watch`` (the initial listing and every watch event pass
through it, once per event). ``controller.watchstream`` hooks that one function and hands every
event through ``trimmed``; the test ``tests/unit/test_trimming.py`` checks the hook point still
exists in the installed Kopf, and start-up refuses to run without it rather than silently keep
the bodies whole.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator
from typing import Any, Final

DROPPED: Final = ("managedFields",)
"""Metadata fields dropped from every watched object (read by no handler, nor by Kopf)."""


def trim(raw_event: Any) -> Any:
    """Drop the unread metadata fields of a raw watch event's object, in place; anything else
    (Kopf's bookmarks, an ERROR event's Status) is passed through untouched."""
    if isinstance(raw_event, dict):
        obj = raw_event.get("object")
        metadata = obj.get("metadata") if isinstance(obj, dict) else None
        if isinstance(metadata, dict):
            for field in DROPPED:
                metadata.pop(field, None)
    return raw_event


async def trimmed(stream: AsyncGenerator[Any, None]) -> AsyncGenerator[Any, None]:
    """``stream``'s raw events, each trimmed (``trim``)."""
    # Closed with this one: Kopf's own stream releases its connection at once.
    async with contextlib.aclosing(stream):
        async for raw_event in stream:
            yield trim(raw_event)
