"""A coalescing work queue of object keys, outside Kopf (issue 39).

Kopf gives every object a worker at once, and each worker holds its object's body, cause and
handler state for as long as its handler runs: at 10,000 scopes in a creation burst, thousands
of handlers sat waiting for one of eight reconcile slots, each with its body (most of the
operator's memory), and every consent poke of a scope still waiting cost one more reconcile.

Here Kopf's handler only records that a key needs a reconcile and returns. A key is queued once
however many events arrive for it (a set beside an ``asyncio.Queue``, as client-go's
workqueue); one that is being reconciled is marked dirty and queued again when its run ends,
so the latest state is always read and no key runs twice at once. N workers pop keys: they
are the reconcile slots. Nothing but the key is held per queued object: the worker reads the
latest state when it runs. A failed run is retried after ``delay(failures)`` (the handlers'
bounded backoff), one timer per key; a success or ``forget`` clears it.

Metrics (labelled by the queue's name only): keys queued, runs in progress, retries, and how
long a key waited between being queued and its run starting (``controller.metrics``).
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from collections.abc import Awaitable, Callable

from fgentic_governance.controller.metrics import (
    QUEUE_DEPTH,
    QUEUE_RETRIES,
    QUEUE_RUNNING,
    QUEUE_WAIT,
)
from fgentic_governance.reasons import Coded, Reason

log = logging.getLogger(__name__)


class WorkQueue:
    """Keys waiting for ``work``; at most one run per key at a time, each key queued once."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._work: Callable[[str], Awaitable[None]] | None = None
        self._delay: Callable[[int], float] = float
        self._queue: asyncio.Queue[str] = asyncio.Queue()
        self._queued: dict[str, float] = {}
        """key → when it was queued (``time.monotonic``), until its run starts."""
        self._active: set[str] = set()
        self._dirty: set[str] = set()
        self._failures: dict[str, int] = {}
        self._retries: dict[str, asyncio.TimerHandle] = {}
        self._workers: list[asyncio.Task[None]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._drained: Callable[[], None] | None = None
        self._runs = 0
        """Runs ended since the queue was made (never reset: ``runs``)."""

    def add(self, key: str) -> None:
        """Have ``key`` reconciled from its latest state: a no-op if it is queued already."""
        if key in self._active:
            self._dirty.add(key)
        elif key not in self._queued:
            self._queued[key] = time.monotonic()
            self._queue.put_nowait(key)
            self._gauge()

    def forget(self, key: str) -> None:
        """The object is gone: drop its pending retry and failure count (a queued run finds
        nothing to do and drops the key)."""
        self._failures.pop(key, None)
        timer = self._retries.pop(key, None)
        if timer is not None:
            timer.cancel()

    def pending(self, key: str) -> bool:
        """Whether a run of ``key`` is still to start, so it will read whatever the indices hold
        now (queued, or running and marked to run again)."""
        return key in self._queued or key in self._dirty

    def __len__(self) -> int:
        return len(self._queued)

    def held(self) -> int:
        """How many keys the queue holds in any form (queued, running, dirty, failing)."""
        return len(self._queued.keys() | self._active | self._dirty | self._failures.keys())

    @property
    def runs(self) -> int:
        """Runs ended since the queue was made: a count that only grows, so a reader (e.g.
        ``heap.AfterBursts``) counts the runs since any moment of its own."""
        return self._runs

    @property
    def running(self) -> bool:
        return any(not w.done() for w in self._workers)

    def start(self, workers: int, work: Callable[[str], Awaitable[None]],
              delay: Callable[[int], float], context: contextvars.Context | None = None, *,
              drained: Callable[[], None] | None = None,
              ready: Callable[[], Awaitable[None]] | None = None) -> None:
        """Start ``workers`` running ``work`` on the running loop (again, after ``stop`` or on
        a new loop); a failed run is retried after ``delay(failures - 1)`` seconds.
        ``context``: what the workers run in (e.g. Kopf's, for posting Events). ``drained``:
        called whenever the queue drains (nothing queued, nothing running; ``runs`` counts).
        ``ready``: awaited by each worker before its first run (keys queued meanwhile wait,
        queued)."""
        loop = asyncio.get_running_loop()
        if self.running and self._loop is loop:
            return
        if self._loop is not loop:  # a queue belongs to its loop: nothing of another carries
            self.stop()
        self._loop = loop
        self._work, self._delay, self._drained = work, delay, drained
        self._workers = [loop.create_task(self._run(ready), name=f"{self.name}-{i}",
                                          context=context) for i in range(workers)]

    def stop(self) -> None:
        """Cancel the workers and forget every key (the operator is stopping: a restarted one
        resumes every object anyway)."""
        for worker in self._workers:
            worker.cancel()
        self._workers = []
        for timer in self._retries.values():
            timer.cancel()
        self._retries.clear()
        self._queue = asyncio.Queue()
        self._queued.clear()
        for keys in (self._active, self._dirty):
            keys.clear()
        self._failures.clear()
        self._gauge()

    async def _run(self, ready: Callable[[], Awaitable[None]] | None) -> None:
        if ready is not None:
            await ready()
        while True:
            key = await self._queue.get()
            since = self._queued.pop(key, None)  # (None: queued before a `stop`)
            if since is not None:
                QUEUE_WAIT.labels(self.name).observe(time.monotonic() - since)
            self._active.add(key)
            self._gauge()
            try:
                await self._once(key)
            finally:
                self._active.discard(key)
                self._gauge()
                self._runs += 1
                if key in self._dirty:
                    self._dirty.discard(key)
                    self.add(key)
                elif not self._queued and not self._active:
                    self._drain()

    def _drain(self) -> None:
        if self._drained is not None:
            self._drained()

    async def _once(self, key: str) -> None:
        if self._work is None:
            return
        try:
            await self._work(key)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            failures = self._failures[key] = self._failures.get(key, 0) + 1
            delay = self._delay(failures - 1)
            QUEUE_RETRIES.labels(self.name).inc()
            # A bounded code, else the type only: a message may quote an object. The wording
            # is Kopf's for a temporary failure, which operators' log searches already know.
            cause = exc.code.value if isinstance(exc, Coded) else type(exc).__name__
            log.warning("%s %s: reconcile failed temporarily: %s; retry %d in %.0f s",
                        self.name, key, cause, failures, delay)
            self._retry_later(key, delay)
            return
        self.forget(key)

    def _gauge(self) -> None:
        QUEUE_DEPTH.labels(self.name).set(len(self._queued))
        QUEUE_RUNNING.labels(self.name).set(len(self._active))

    def _retry_later(self, key: str, delay: float) -> None:
        old = self._retries.pop(key, None)
        if old is not None:
            old.cancel()
        loop = asyncio.get_running_loop()
        self._retries[key] = loop.call_later(delay, self._retry, key)

    def _retry(self, key: str) -> None:
        self._retries.pop(key, None)
        self.add(key)


class Retry(Coded[Reason]):
    """A run that failed in a known way (its status already says why): retried later."""
