"""Kopf's index pre-population at start-up, in linear time and bounded memory (issue 39, a
restart holding 10,000 scopes).

Before any handler runs, Kopf indexes every listed object: each object's worker drops its own
toggle from the operator-wide ``ToggleSet`` once it has indexed the object, then waits on the
set's one ``asyncio.Condition`` until every toggle is gone (kopf/_core/reactor/queueing.py,
processing.py). Three changes, each at one Kopf hook point that tests/unit/test_prepopulation.py
checks (the third one shared with the trimming, hooked by ``controller.watchstream``):

- **One waiter per set** (``aiotoggles.ToggleSet.wait_for``). Every toggle made or dropped calls
  ``notify_all``, which woke every worker already waiting, each to take the lock in turn and
  re-check: O(n²) per start, five silent minutes at 20,000 objects. Now one task per set and
  state waits on the condition and every other caller awaits that task.
- **Ungated kinds** (``indexing.index_resource``). A worker at the barrier holds its raw event,
  body, patch, loggers and task: at a restart every listed object at once (20,000 at 10,000
  scopes), and the arenas they were allocated in stay with the process after they are freed
  (631 MiB after a restart against 366 MiB after the creation burst that made the objects).
  The kinds whose handlers need no complete index (``ungate``: a MemoryScope's handler only
  queues its key; a ConsentRecord's reads its own entry) index their object, drop their toggle
  and go on. What does need every index, the scope queue's runs, waits for the barrier instead
  (``lifted``). Kopf's other kinds wait as before, on indices that are complete when it lifts.
- **One listing at a time, paced** (``watching.infinite_watch``, ``paced``). Kopf lists each kind in
  each watched namespace from its own watcher, all at once: at a restart every page of every
  listing was in memory together, each body still with its ``managedFields`` until it reached
  the trimming (``controller.trimming``). An ungated kind's first listing now waits for the one
  before it to be handed over, and is handed to Kopf no more than ``PACE`` objects ahead of
  their indexing, a page of ``LIST_PAGE`` objects at a time (Kopf's
  ``settings.watching.chunk_size``, client-go's page size). A listing whose indexing stops
  for ``PACE_STALL`` seconds (an object's worker throttled after errors) is handed over unpaced
  from then on and lets the next one start. Any other kind's stream is not touched here.

With the three, a restart at 10,000 scopes settles at 250 MiB instead of 631 MiB and reconciles
every scope once in 50 s (docs/scale.md, "A restart without the start-up peak").
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import logging
from collections.abc import AsyncGenerator, Callable, Collection, Coroutine
from typing import Any, Final

from kopf._cogs.aiokits import aiotoggles
from kopf._cogs.clients import watching
from kopf._core.engines import indexing

log = logging.getLogger(__name__)

PACE: Final = 200
"""Listed objects of an ungated kind handed to Kopf and not yet indexed, at most."""
LIST_PAGE: Final = 500
"""Objects per page of a listing (``settings.watching.chunk_size``, set by ``controller.main``)."""
PACE_STALL: Final = 5.0
"""Seconds without an object indexed before a listing is handed over unpaced."""
LIFT_LOG_SECONDS: Final = 30.0
"""How often a run still waiting for the barrier says so."""

_INSTALLED: Final = "_fgentic_shared_wait"
_WAITS: Final = "_fgentic_waits"
_CALLERS: Final = "_fgentic_callers"

Wait = Callable[[aiotoggles.ToggleSet, bool], Coroutine[Any, Any, None]]


class _Start:
    """What this process's start-up shares between Kopf's watchers and workers."""

    def __init__(self) -> None:
        self.ungated: frozenset[tuple[str, str]] = frozenset()
        self.skipped: list[asyncio.Future[None]] = []
        """The shared barrier waits that an ungated worker did not await (``lifted``)."""
        self.listed: dict[Any, int] = {}
        self.indexed: dict[Any, int] = {}
        self.progress: dict[Any, asyncio.Event] = {}
        self._turns: tuple[asyncio.AbstractEventLoop, asyncio.Semaphore] | None = None

    def listing_turn(self) -> asyncio.Semaphore:
        """The turn of an ungated kind's listing: one at a time on this loop."""
        loop = asyncio.get_running_loop()
        if self._turns is None or self._turns[0] is not loop:
            self._turns = (loop, asyncio.Semaphore(1))
        return self._turns[1]

    def is_ungated(self, resource: Any) -> bool:
        return (getattr(resource, "group", None), getattr(resource, "plural", None)) in self.ungated


_START: Final = _Start()
_UNGATED_WORKER: Final = contextvars.ContextVar("fgentic_ungated_worker", default=False)
"""Set in an ungated kind's worker task once it has indexed its object (the task's context:
Kopf awaits the indexing and then the barrier in the same task)."""


def _shared(original: Wait) -> Wait:
    async def wait_for(self: aiotoggles.ToggleSet, state: bool, /) -> None:
        wanted = bool(state)
        while self.is_on() != wanted:
            waits: dict[bool, asyncio.Future[None]] = self.__dict__.setdefault(_WAITS, {})
            waiter = waits.get(wanted)
            if waiter is None or waiter.done():
                waiter = waits[wanted] = asyncio.ensure_future(original(self, wanted))
            if wanted and _UNGATED_WORKER.get():
                if waiter not in _START.skipped:
                    _START.skipped.append(waiter)
                return
            # Shielded: one caller cancelled (its object deleted, the operator stopping)
            # does not cancel the others' wait; the last one's does (``_last_gone``).
            callers: dict[bool, int] = self.__dict__.setdefault(_CALLERS, {})
            callers[wanted] = callers.get(wanted, 0) + 1
            try:
                await asyncio.shield(waiter)
            except asyncio.CancelledError:
                _last_gone(waiter, callers[wanted])
                raise
            finally:
                callers[wanted] -= 1

    setattr(wait_for, _INSTALLED, True)
    return wait_for


def _last_gone(waiter: asyncio.Future[None], callers: int) -> None:
    """Cancel a shared wait whose last caller was cancelled: nothing would await it any more,
    and Kopf, stopping, waits 5 s for every task left pending before it returns (seen: a
    pause set's wait held each of the process's two operators for 5 s at SIGTERM). Never the
    barrier an ungated worker skipped: ``lifted`` awaits that one."""
    if callers == 1 and not waiter.done() and waiter not in _START.skipped:
        waiter.cancel()


def _indexing(original: Callable[..., Coroutine[Any, Any, None]]
              ) -> Callable[..., Coroutine[Any, Any, None]]:
    @functools.wraps(original)
    async def index_resource(**kwargs: Any) -> None:
        await original(**kwargs)
        resource = kwargs.get("resource")
        if _START.is_ungated(resource):
            _UNGATED_WORKER.set(True)
            if (kwargs.get("raw_event") or {}).get("type") is None:  # noticed by listing
                _START.indexed[resource] = _START.indexed.get(resource, 0) + 1
                progress = _START.progress.get(resource)
                if progress is not None:
                    progress.set()

    setattr(index_resource, _INSTALLED, True)
    return index_resource


def paced(resource: Any, stream: AsyncGenerator[Any, None]) -> AsyncGenerator[Any, None]:
    """An ungated kind's watch stream, paced (``_pacing``); any other kind's ``stream`` itself,
    with no generator in between, event by event. Kopf's stream goes through it once hooked
    (``controller.watchstream``)."""
    return _pacing(resource, stream) if _START.is_ungated(resource) else stream


async def _pacing(resource: Any, listing: AsyncGenerator[Any, None]
                  ) -> AsyncGenerator[Any, None]:
    """An ungated kind's stream: its first listing in its turn, paced by its indexing."""
    async with contextlib.AsyncExitStack() as turn:
        await turn.enter_async_context(_START.listing_turn())
        paced = True
        async with contextlib.aclosing(listing) as stream:
            async for raw_event in stream:
                if raw_event is watching.Bookmark.LISTED:
                    await turn.aclose()  # the next listing's turn
                yield raw_event
                if paced and isinstance(raw_event, dict) and raw_event.get("type") is None:
                    _START.listed[resource] = _START.listed.get(resource, 0) + 1
                    paced = await _caught_up(resource)
                    if not paced:
                        await turn.aclose()


async def _caught_up(resource: Any) -> bool:
    """Wait until at most ``PACE`` listed objects are still to be indexed; False when the
    indexing stalled (the rest of the listing goes unpaced)."""
    progress = _START.progress.setdefault(resource, asyncio.Event())
    while _START.listed.get(resource, 0) - _START.indexed.get(resource, 0) > PACE:
        progress.clear()
        try:
            await asyncio.wait_for(progress.wait(), PACE_STALL)
        except TimeoutError:
            log.warning("the listing of %s was not indexed for %.0f s; the rest goes unpaced",
                        getattr(resource, "plural", "?"), PACE_STALL)
            return False
    return True


def install(ungated: Collection[tuple[str, str]] = ()) -> None:
    """Install the barrier's two hooks once per process (idempotent), before Kopf starts;
    ``ungated``: the (group, plural) kinds whose workers do not wait at the barrier and whose
    listings are paced (``paced``, through ``controller.watchstream``'s hook)."""
    hooks = ((aiotoggles.ToggleSet, "wait_for", _shared), (indexing, "index_resource", _indexing))
    for owner, name, _ in hooks:
        if not callable(getattr(owner, name, None)):  # a Kopf without the hook point
            raise SystemExit(f"kopf: no {name} to hook at start-up; this operator needs kopf 1.45")
    _START.ungated = frozenset(ungated)
    for owner, name, wrap in hooks:
        original = getattr(owner, name)
        if not getattr(original, _INSTALLED, False):
            setattr(owner, name, wrap(original))


def installed() -> bool:
    return all(getattr(hook, _INSTALLED, False)
               for hook in (aiotoggles.ToggleSet.wait_for, indexing.index_resource))


async def lifted() -> None:
    """Return once the barrier every ungated worker skipped on this loop has lifted (at once
    when none did). Waits in bounded slices, saying so after each."""
    loop = asyncio.get_running_loop()
    while waiting := [w for w in _START.skipped if w.get_loop() is loop and not w.done()]:
        done, _ = await asyncio.wait(waiting, timeout=LIFT_LOG_SECONDS)
        if not done:
            log.info("waiting for Kopf to index every listed object before the first reconcile")
