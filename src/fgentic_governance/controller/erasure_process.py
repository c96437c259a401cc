"""The erasure process: a person's offboarding flow in a process of its own (issue 39).

On the erasure lane's thread the flow still shared one interpreter with the main loop, which
holds the GIL through a creation burst: each of the flow's store round trips waited for it, and
the flow ran at about twice its time in a process of its own (docs/scale.md). So, with
``--erasure-process`` (off by default: docs/scale.md says why), ``main`` forks this process
once, after the imports and before any thread, with the imported objects frozen
(``gc.freeze()``) in both, so that neither's collections unshare their pages; it has its own
GIL, its own small store pool and one thread. The erasure lane's Kopf operator still watches
PrincipalOffboardings, reads the scope index and writes Ready; only the store flow
(``offboarding.flow.offboard``) runs here, asked over a socket pair in length-prefixed JSON
frames that carry a principal, scope keys and, back, outcomes and reason codes: nothing of any
memory's content.

The leader's renew deadline is shared memory (``leadership``), so the child's pool stops at
the same moment as the parent's. A fault point in the child kills the parent with it
(``faults.kill_with``): a crash test's kill is the whole operator's, as an OOM kill of a Pod.
If the child ends, every call waiting on it fails with STORE_UNAVAILABLE and ``ended`` stops
the operator, which exits 1 to be restarted (as when the erasure lane's operator ends).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import itertools
import json
import logging
import os
import signal
import socket
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from fgentic_governance import faults
from fgentic_governance.api.common import Principal
from fgentic_governance.controller import leadership
from fgentic_governance.memory import MemoryStore, StoreRefusal
from fgentic_governance.memory.dsn import from_file
from fgentic_governance.offboarding.flow import ScopeOutcome, offboard
from fgentic_governance.reasons import Reason

log = logging.getLogger(__name__)

POOL_SIZE: Final = 2
"""The child's store connections: one offboarding's flow is sequential; two let a second
person's run beside it."""
CALL_SECONDS: Final = 300.0
"""Bounded wait for one offboarding's flow; past it the call fails closed (STORE_UNAVAILABLE)
and the handler retries, the flow being idempotent."""
STOP_SECONDS: Final = 5.0
FRAME: Final = struct.Struct("!I")
MAX_FRAME: Final = 1 << 22
"""A frame's bound (4 MiB): an answer for tens of thousands of scopes, never unbounded."""

_child: tuple[int, socket.socket] | None = None
_client: _Client | None = None


def fork(dsn_file: Path) -> int:
    """Start the erasure process; its pid. Only before any other thread exists: a fork copies
    one thread, and a lock another thread held would stay held in the child for ever."""
    global _child  # noqa: PLW0603  (one per operator process)
    if threading.active_count() != 1:
        raise RuntimeError("the erasure process must be forked before any thread starts")
    ours, theirs = socket.socketpair()
    # Everything imported so far is frozen for good, in both processes: no collection on
    # either side writes to those objects, so their pages stay shared. Unfrozen in the parent,
    # its collections dirtied them and each copy became the child's own (docs/scale.md).
    gc.collect()
    gc.freeze()
    pid = os.fork()
    if pid == 0:  # pragma: no cover (the child; its flows are tested through the operator)
        ours.close()
        code = 1
        try:
            code = _child_main(theirs, dsn_file, os.getppid())
        finally:
            os._exit(code)
    theirs.close()
    _child = (pid, ours)
    return pid


def started() -> bool:
    """Whether this process offboards through the erasure process (connected on the lane)."""
    return _client is not None


async def connect(ended: Callable[[], None]) -> None:
    """On the erasure lane's loop: the client of the forked child (none forked: nothing).
    ``ended`` is called from that loop if the child goes away while connected."""
    global _client  # noqa: PLW0603
    if _child is None or _client is not None:
        return
    reader, writer = await asyncio.open_unix_connection(sock=_child[1], limit=MAX_FRAME)
    _client = _Client(reader, writer, ended)


async def disconnect() -> None:
    """On the erasure lane's loop: close the socket (the child exits at its end), then reap
    the child, bounded; past the bound it is killed."""
    global _client, _child
    client, _client = _client, None
    if client is not None:
        await client.close()
    child, _child = _child, None
    if child is not None:
        child[1].close()
        await asyncio.to_thread(_reap, child[0])


async def run_offboarding(principal: Principal, scopes: list[str]) -> list[ScopeOutcome]:
    """The flow for ``principal``, in the erasure process. Raises StoreRefusal as the flow
    does, and STORE_UNAVAILABLE when the process cannot answer within CALL_SECONDS."""
    if _client is None:
        raise StoreRefusal(Reason.STORE_UNAVAILABLE)
    return await _client.offboard(principal, scopes)


def _reap(pid: int) -> None:
    deadline = time.monotonic() + STOP_SECONDS
    while time.monotonic() < deadline:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done:
            return
        time.sleep(0.05)
    log.warning("the erasure process did not stop within %.0f s; killing it", STOP_SECONDS)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)


class _Client:
    """The parent's side: one request per offboarding run, answered by id."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 ended: Callable[[], None]) -> None:
        self._writer = writer
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._closing = False
        self._reading = asyncio.get_running_loop().create_task(self._read(reader, ended))

    async def offboard(self, principal: Principal, scopes: list[str]) -> list[ScopeOutcome]:
        call = next(self._ids)
        answer = self._pending[call] = asyncio.get_running_loop().create_future()
        try:
            async with asyncio.timeout(CALL_SECONDS):
                await send(self._writer, {"id": call, "principal": principal.model_dump(
                    mode="json", by_alias=True), "scopes": scopes})
                return outcomes_of(await answer)
        except (TimeoutError, ConnectionError):
            raise StoreRefusal(Reason.STORE_UNAVAILABLE) from None
        finally:
            self._pending.pop(call, None)

    async def _read(self, reader: asyncio.StreamReader, ended: Callable[[], None]) -> None:
        try:
            while (frame := await receive(reader)) is not None:
                answer = self._pending.get(int(frame.get("id", 0)))
                if answer is not None and not answer.done():
                    answer.set_result(frame)
        except (ConnectionError, ValueError):
            pass
        finally:
            for answer in self._pending.values():
                if not answer.done():
                    answer.set_exception(StoreRefusal(Reason.STORE_UNAVAILABLE))
            if not self._closing:
                log.error("the erasure process ended")
                ended()

    async def close(self) -> None:
        self._closing = True
        self._writer.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._reading, STOP_SECONDS)


def outcomes_of(answer: dict[str, Any]) -> list[ScopeOutcome]:
    """The outcomes in an answer, or its refusal raised; anything else fails closed."""
    try:
        if "refusal" in answer:
            raise StoreRefusal(Reason(answer["refusal"]))
        return [ScopeOutcome(str(key), verified is True, Reason(reason), str(receipt))
                for key, verified, reason, receipt in answer["outcomes"]]
    except (KeyError, TypeError, ValueError):
        raise StoreRefusal(Reason.INTERNAL_ERROR) from None


def answer_of(call: int, outcomes: list[ScopeOutcome] | None, refusal: Reason | None
              ) -> dict[str, Any]:
    if outcomes is None:
        return {"id": call, "refusal": (refusal or Reason.INTERNAL_ERROR).value}
    return {"id": call, "outcomes": [[o.scope_key, o.verified, o.reason.value, o.receipt_id]
                                     for o in outcomes]}


async def send(writer: asyncio.StreamWriter, message: dict[str, Any]) -> None:
    body = json.dumps(message, separators=(",", ":")).encode()
    if len(body) > MAX_FRAME:
        raise StoreRefusal(Reason.INTERNAL_ERROR)
    writer.write(FRAME.pack(len(body)) + body)
    await writer.drain()


async def receive(reader: asyncio.StreamReader) -> dict[str, Any] | None:
    """The next frame; None at the end of the stream. A frame over MAX_FRAME or not a JSON
    object is a broken peer: ValueError."""
    try:
        head = await reader.readexactly(FRAME.size)
    except asyncio.IncompleteReadError:
        return None
    (size,) = FRAME.unpack(head)
    if size > MAX_FRAME:
        raise ValueError("frame too large")
    message = json.loads(await reader.readexactly(size))
    if not isinstance(message, dict):
        raise ValueError("not an object")
    return message


def application_name(pid: int | None = None) -> str:
    """The erasure process's connections in pg_stat_activity: which process holds them."""
    return f"fgentic-erasure-{os.getpid() if pid is None else pid}"


# -- the child ----------------------------------------------------------------------------


def _child_main(sock: socket.socket, dsn_file: Path, parent: int) -> int:  # pragma: no cover
    faults.kill_with(parent)
    # Stopped by its socket's end (the parent closed it, or died): a terminal's Ctrl-C or a
    # signal meant for the operator does not cut an erasure short on its own.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    asyncio.run(_serve(sock, dsn_file))
    return 0


async def _serve(sock: socket.socket, dsn_file: Path) -> None:  # pragma: no cover (child)
    reader, writer = await asyncio.open_unix_connection(sock=sock, limit=MAX_FRAME)
    store = _Store(dsn_file)
    running: set[asyncio.Task[None]] = set()
    try:
        while (request := await receive(reader)) is not None:
            task = asyncio.create_task(_answer(request, store, writer))
            running.add(task)
            task.add_done_callback(running.discard)
    except (ConnectionError, ValueError):
        pass
    finally:
        for task in running:
            task.cancel()
        await store.close()


async def _answer(request: dict[str, Any], store: _Store,
                  writer: asyncio.StreamWriter) -> None:  # pragma: no cover (child)
    call = int(request.get("id", 0))
    outcomes: list[ScopeOutcome] | None = None
    refusal: Reason | None = None
    try:
        principal = Principal.model_validate(request["principal"])
        scopes = [str(key) for key in request["scopes"]]
        outcomes = await offboard(await store.get(), principal, scopes)
    except StoreRefusal as exc:
        refusal = exc.reason
    except Exception as exc:  # The type only: a driver's text may quote a row.
        log.error("offboarding failed in the erasure process (%s)", type(exc).__name__)
    with contextlib.suppress(ConnectionError):
        await send(writer, answer_of(call, outcomes, refusal))


class _Store:
    """The child's store, opened at its first use (and again after a failed open)."""

    def __init__(self, dsn_file: Path) -> None:
        self._dsn_file = dsn_file
        self._pool: Any = None
        self._store: MemoryStore | None = None
        self._opening = asyncio.Lock()

    async def get(self) -> MemoryStore:
        async with self._opening:
            if self._store is None:
                try:
                    # Kept open however long no one leaves: asyncpg closes a connection idle
                    # for 300 s, and the next person's flow then paid a new connection and a
                    # prepare per statement. A connection a failover broke fails that run,
                    # which is retried.
                    self._pool = await leadership.gated_pool(
                        from_file(self._dsn_file), POOL_SIZE,
                        server_settings={"application_name": application_name()},
                        max_inactive_connection_lifetime=0)
                except Exception as exc:  # The type only, as above.
                    log.warning("erasure process: store unavailable (%s)", type(exc).__name__)
                    raise StoreRefusal(Reason.STORE_UNAVAILABLE) from None
                self._store = MemoryStore(self._pool)
            return self._store

    async def close(self) -> None:
        if self._pool is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._pool.close(), STOP_SECONDS)
