"""Two lanes through the operator's shared resources (issue 39).

The reconcile lane: as many slots as pooled connections. The MemoryScope work queue's workers
are its slots (``SCOPES``: Kopf's handler only queues the key); every ConsentRecord reconcile
takes a slot of ``reconcile_slot``. Waiting for a slot is cheap and quiet (no status, no
Event); without it, an overloaded operator's reconciles waited inside the pool's 5 s acquire
timeout, failed with STORE_UNAVAILABLE while PostgreSQL sat idle, and flapped Enabled →
Failed → Enabled, every flap a status write and an Event.

The erasure lane: PrincipalOffboarding and the delete finalizer use a pool of their own
(``OperatorContext.erasure_store``) and a thread executor of their own for API calls, so a person's
erasure never queues behind thousands of scope reconciles. Their store work runs on an event
loop of its own, in its own thread (``on_erasure_lane``): each of the flow's few dozen round
trips resumes at once, not after a full turn of an operator loop crowded by a creation burst
(measured: an offboarding 35x its direct flow during a 1,000-scope burst).

PrincipalOffboardings themselves are watched and handled by a Kopf operator of their own on that
loop (``ERASURE_REGISTRY``, ``start_erasure_operator``), as Kopf runs isolated operators, one per
event loop (its "Embedding" documentation): the watch event, its worker and the handler no longer
wait for turns of the loop that a burst of 10,000 scopes keeps busy (measured on 760461f: an
offboarding 5.0x the same flow run beside the burst, nearly all of it after the create).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import AsyncIterator, Callable, Coroutine
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Final, TypeVar

import kopf

from fgentic_governance.controller import tuning
from fgentic_governance.controller.metrics import RECONCILE_SLOT_TIMEOUTS
from fgentic_governance.controller.workqueue import WorkQueue

log = logging.getLogger(__name__)
T = TypeVar("T")

ERASURE_POOL_SIZE: Final = 2
"""Connections of the erasure lane's store pool (offboarding, the delete finalizer)."""
ERASURE_THREADS: Final = 4
GIL_SWITCH_SECONDS: Final = 0.001
"""The process's GIL switch interval (``sys.setswitchinterval``, set by ``main``). The erasure
lane's thread needs the GIL back after each store round trip while the main loop's thread
holds it through a burst; CPython hands it over only after the interval: 5 ms by default,
which was the most of each round trip's cost (``benchmarks/bench_gil_handoff.py``)."""
SLOT_WAIT_SECONDS: Final = 300.0
"""Bounded: past it the reconcile is retried later by Kopf, writing nothing meanwhile."""

LOOP_STOP_SECONDS: Final = 5.0
OPERATOR_STOP_SECONDS: Final = 15.0
"""Bounded wait for the erasure operator to stop (Kopf gives its hung tasks 5 s, then cancels)."""

ERASURE_REGISTRY: Final = kopf.OperatorRegistry()
"""The handlers of the erasure lane's own Kopf operator (PrincipalOffboarding), apart from the
default registry that the operator's main loop runs."""

_slots: asyncio.Semaphore | None = None
SCOPES: Final = WorkQueue("memoryscopes")
"""Every MemoryScope that needs a reconcile, by key (namespace/name); its workers are the
reconcile slots (started by ``handlers.memoryscope``, stopped by ``close_lanes``)."""
_erasure_executor: ThreadPoolExecutor | None = None
_erasure_loop: asyncio.AbstractEventLoop | None = None
_erasure_thread: threading.Thread | None = None
_erasure_operator: tuple[threading.Event, Future[None]] | None = None


def open_lanes() -> None:
    """Fresh slots, executor and erasure loop for this run of the event loop (start-up)."""
    global _slots  # noqa: PLW0603  (one per operator process)
    _slots = asyncio.Semaphore(tuning.RECONCILE_SLOTS.read())
    close_lanes()
    erasure_executor()
    erasure_loop()


def close_lanes() -> None:
    """Stop the scope queue's workers, the erasure operator, the erasure lane's executor and
    loop (close its pool on it first)."""
    global _erasure_executor, _erasure_loop, _erasure_thread  # noqa: PLW0603
    SCOPES.stop()
    stop_erasure_operator()
    if _erasure_executor is not None:
        _erasure_executor.shutdown(wait=False, cancel_futures=True)
        _erasure_executor = None
    if _erasure_loop is not None and _erasure_thread is not None:
        _erasure_loop.call_soon_threadsafe(_erasure_loop.stop)
        _erasure_thread.join(LOOP_STOP_SECONDS)  # bounded; a daemon thread past it
        if not _erasure_thread.is_alive():
            _erasure_loop.close()
        _erasure_loop = _erasure_thread = None


def start_erasure_operator(settings: kopf.OperatorSettings, memo: kopf.Memo,
                           ended: Callable[[], None]) -> None:
    """Run ``ERASURE_REGISTRY``'s handlers as a Kopf operator of their own on the erasure loop
    (cluster-wide: PrincipalOffboarding is cluster-scoped). ``ended`` is called from the lane's
    thread when it ends for any reason other than ``stop_erasure_operator``: an operator whose
    offboardings went unhandled must not go on (the caller stops the process)."""
    global _erasure_operator  # noqa: PLW0603  (one per run of the operator's loop)
    stop_erasure_operator()
    flag = threading.Event()
    done = asyncio.run_coroutine_threadsafe(kopf.operator(
        registry=ERASURE_REGISTRY, settings=settings, memo=memo, clusterwide=True,
        standalone=True, stop_flag=flag), erasure_loop())
    done.add_done_callback(lambda _: None if flag.is_set() else ended())
    _erasure_operator = (flag, done)


def stop_erasure_operator() -> None:
    """Raise the erasure operator's stop flag and wait for it, bounded."""
    global _erasure_operator  # noqa: PLW0603
    if _erasure_operator is None:
        return
    flag, done = _erasure_operator
    _erasure_operator = None
    flag.set()
    try:
        done.result(OPERATOR_STOP_SECONDS)
    except Exception:  # Stopping: a failure or a timeout leaves nothing more to do.
        log.warning("the erasure operator did not stop cleanly within %.0f s",
                    OPERATOR_STOP_SECONDS)


def erasure_loop() -> asyncio.AbstractEventLoop:
    """The erasure lane's event loop, running in a thread of its own."""
    global _erasure_loop, _erasure_thread  # noqa: PLW0603
    if _erasure_loop is None:
        _erasure_loop = asyncio.new_event_loop()
        _erasure_thread = threading.Thread(target=_erasure_loop.run_forever,
                                           name="fgentic-erasure-loop", daemon=True)
        _erasure_thread.start()
    return _erasure_loop


async def on_erasure_lane(work: Coroutine[Any, Any, T]) -> T:
    """Run ``work`` on the erasure lane's loop and await its result here. Everything ``work``
    touches must belong to that loop (the erasure pool does) or be thread-safe; cancelling
    the caller cancels ``work``."""
    loop = erasure_loop()
    if loop is asyncio.get_running_loop():  # already on it
        return await work
    return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(work, loop))


def erasure_executor() -> ThreadPoolExecutor:
    """The erasure lane's threads for API calls (the default executor's few threads are
    shared by every scope reconcile)."""
    global _erasure_executor  # noqa: PLW0603
    if _erasure_executor is None:
        _erasure_executor = ThreadPoolExecutor(max_workers=ERASURE_THREADS,
                                               thread_name_prefix="fgentic-erasure")
    return _erasure_executor


def waiting_for_slot(key: str) -> bool:
    """Whether the reconcile of the scope ``key`` is queued and still to start (``SCOPES``).
    Such a run reads Kopf's indices (its consents) and the store only when it starts, before
    its first await: whatever an index holds now, it will read, so a poke to have it read that
    is redundant."""
    return SCOPES.pending(key)


@contextlib.asynccontextmanager
async def reconcile_slot(delay: float) -> AsyncIterator[None]:
    """A slot of the reconcile lane (a ConsentRecord's), held for the whole reconcile. A slot
    not had within SLOT_WAIT_SECONDS is a Kopf retry after ``delay`` that wrote nothing."""
    global _slots  # noqa: PLW0603
    if _slots is None:
        _slots = asyncio.Semaphore(tuning.RECONCILE_SLOTS.read())
    slots = _slots
    try:
        async with asyncio.timeout(SLOT_WAIT_SECONDS):
            await slots.acquire()
    except TimeoutError:
        RECONCILE_SLOT_TIMEOUTS.inc()
        log.warning("no reconcile slot within %.0f s; retrying", SLOT_WAIT_SECONDS)
        raise kopf.TemporaryError("reconcile slot", delay=delay) from None
    try:
        yield
    finally:
        slots.release()
