"""Kopf's watch stream, hooked once for two changes (issue 39).

Kopf's watcher takes each kind's listing and watch events from one function,
``kopf._cogs.clients.watching.infinite_watch`` (once per event). Two changes need what it
yields: every body without the metadata nothing reads (``controller.trimming``), and an ungated
kind's first listing handed over in its turn and paced by its indexing at start-up
(``controller.prepopulation``). One wrapper does both, in one order: Kopf's stream, trimmed
event by event, then paced (a kind that is not paced gets the trimmed stream itself). It is
installed once, with one marker, whatever else start-up installs and in whichever order;
start-up refuses a Kopf without the function rather than silently keep the bodies whole.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncGenerator, Callable
from typing import Any, Final

from kopf._cogs.clients import watching

from fgentic_governance.controller import prepopulation, trimming

_INSTALLED: Final = "_fgentic_watch_stream"

Watch = Callable[..., AsyncGenerator[Any, None]]


def _hooked(original: Watch) -> Watch:
    @functools.wraps(original)
    def infinite_watch(**kwargs: Any) -> AsyncGenerator[Any, None]:
        return prepopulation.paced(kwargs.get("resource"), trimming.trimmed(original(**kwargs)))

    setattr(infinite_watch, _INSTALLED, True)  # a marker on the function
    return infinite_watch


def install() -> None:
    """Hook Kopf's watch stream once per process (idempotent), before Kopf opens a stream."""
    original = getattr(watching, "infinite_watch", None)
    if original is None or not callable(original):  # a Kopf without the hook point
        raise SystemExit("kopf: no watching.infinite_watch to hook at start-up; "
                         "this operator needs kopf 1.45")
    if not getattr(original, _INSTALLED, False):
        watching.infinite_watch = _hooked(original)


def installed() -> bool:
    return bool(getattr(watching.infinite_watch, _INSTALLED, False))
