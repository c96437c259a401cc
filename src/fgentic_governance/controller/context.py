"""The operator's settings, store and API client, carried in Kopf's own memo (as Kopf's users
do).

``main`` builds one :class:`OperatorContext` and hands Kopf a memo holding it; Kopf copies that
memo shallowly into every object's memo, so each handler (and each ``when=`` filter) reads the
same instance through its ``memo`` argument (:func:`of`). Code that runs outside Kopf's handler
calls is handed the instance when it is started: the store loop and the sweep by the start-up
handler, the scope queue's workers through each queued object's memo (``Latest.memo``)."""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Protocol

import kopf

from fgentic_governance.api.appservice import EMPTY, AppserviceRegistry

if TYPE_CHECKING:  # Types only: the handlers import this module early and often.
    from kubernetes.client import ApiClient

    from fgentic_governance.memory import MemoryStore
    from fgentic_governance.reasons import Reason


class RouteJudge(Protocol):
    """What the scope handlers ask of ``controller.model_route_condition.ModelRoutes``. A
    protocol, not that class: it reads Agents through ``controller.kube_calls``, a layer above
    this module, so naming it here closed an import circle (.importlinter, controller-layers).
    ``api``: the client it reads them with (:meth:`OperatorContext.kube`)."""

    async def reason(self, api: ApiClient, namespace: str, name: str,
                     route: str) -> Reason | None: ...


@dataclass
class OperatorContext:
    local_homeserver: str = ""
    appservice: AppserviceRegistry = EMPTY
    """The appservice-namespace registry (--appservice-namespaces): the scope gates refuse a
    native-local subject in it, and the projector's configuration carries it."""
    store: MemoryStore | None = None
    """Set once the schema is migrated; None means no store."""
    erasure_store: MemoryStore | None = None
    """The erasure lane's store: its own small pool, for offboarding and the delete finalizer
    (``controller.lanes``); set together with ``store``."""
    store_schema_version: int = 0
    store_pool: Any = None
    """The asyncpg pool behind ``store`` (closed on shutdown)."""
    erasure_pool: Any = None
    """The asyncpg pool behind ``erasure_store`` (closed on shutdown)."""
    store_problem: Reason | None = None
    """A reason code while the store is connected but unfit to grant (STORE_SETTINGS_UNSAFE):
    nothing is granted, erasures still run, StoreReady is False."""
    cleanup: Reason | None = None
    """How the last expired-memory cleanup ended: OK, or the reason it failed (the scopes'
    ExpiryCleanup condition); None until the first run."""
    memory_model_url: str = ""
    """The governed model route (the memory API's /v1); empty: none is configured."""
    model_routes: RouteJudge | None = None
    """Judges each scope's ModelRouteGoverned condition (set at start-up)."""
    cluster_kinds: bool = True
    """This shard handles the cluster-scoped kinds (--cluster-kinds; kube/shards.py): exactly
    one shard of a store does; every shard still watches and indexes them."""
    scopes_by_subject: Mapping[Any, Any] | None = None
    """Kopf's index of MemoryScope keys by subject (``handlers.offboarding``), set at start-up:
    the erasure operator reads it from its own thread."""
    api: ApiClient | None = None
    """The operator's Kubernetes API client, built by ``main`` before Kopf starts: every direct
    API call (``controller.kube_calls``) is sent through it (:meth:`kube`)."""

    def kube(self) -> ApiClient:
        """The operator's API client; fails closed when none is configured."""
        if self.api is None:
            raise RuntimeError("the operator's API client is not configured")
        return self.api

    def update(self, **values: Any) -> OperatorContext:
        """Set several fields in one step: no handler runs in between (e.g. a store is never
        seen without its problem, ``main.open_store``)."""
        for key, value in values.items():
            if not hasattr(self, key):  # A typo would otherwise publish nothing, silently.
                raise AttributeError(key)
            setattr(self, key, value)
        return self


KEY: Final = "operator"
"""The memo's key for the operator's context (Kopf's memo is a dict; ours holds one entry)."""


def memo_of(ctx: OperatorContext) -> kopf.Memo:
    """The memo ``main`` hands Kopf: every object's memo is a shallow copy of it."""
    return kopf.Memo({KEY: ctx})


def of(memo: Mapping[str, Any]) -> OperatorContext:
    """The operator's context from a Kopf memo (the operator's, or any object's copy of it)."""
    ctx = memo.get(KEY)
    if not isinstance(ctx, OperatorContext):  # Fail closed: never a default store or setting.
        raise RuntimeError("the operator's context is not in Kopf's memo")
    return ctx


def owns_cluster_kinds(memo: kopf.Memo, **_: Any) -> bool:
    """Kopf's ``when=`` filter of every handler of a cluster-scoped kind: evaluated before the
    handler is invoked, so another shard's object is neither handled nor finalized here."""
    return of(memo).cluster_kinds


_LOCKS: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()


def scope_lock(scope_key: str) -> asyncio.Lock:
    """One lock per scope: flows on the same scope never interleave in this process.

    Kept only while a flow holds or awaits it (weakly referenced): a lock per scope kept for
    ever was one more object per scope the operator ever saw (issue 39, memory)."""
    lock = _LOCKS.get(scope_key)
    if lock is None:
        lock = _LOCKS[scope_key] = asyncio.Lock()
    return lock
