"""Every Kopf handler of the operator is a coroutine (issue 39, a restart holding 10,000 scopes):
Kopf runs a plain function in its thread pool, one hop per object and event (a restart: every
index function for every listed object, then every event handler, each with its own copied
context and kwargs queued for eight threads). Names only, no timing."""

from __future__ import annotations

import kopf
from kopf._core.actions.invocation import is_async_fn

from fgentic_governance.controller import lanes
from fgentic_governance.controller.handlers import (  # noqa: F401  (registration by import)
    diffbase,
    floors,
    memoryscope,
    offboarding,
    retrievalbinding,
    sweep,
)


def test_no_resource_handler_runs_in_kopfs_thread_pool() -> None:
    registry = kopf.get_default_registry()
    if not any(h.id == "forget-diff-base" for h in registry._watching.get_all_handlers()):
        diffbase.register(cluster_kinds=True)  # (as ``main`` does; not by import)
    handlers = [h for r in (registry, lanes.ERASURE_REGISTRY)  # both of the process's operators
                for h in (*r._indexing.get_all_handlers(), *r._watching.get_all_handlers(),
                          *r._changing.get_all_handlers())]
    ours = [h for h in handlers if h.fn.__module__.startswith("fgentic_governance")]
    assert ours
    sync = sorted({f"{h.fn.__module__}.{h.fn.__qualname__}" for h in ours
                   if not is_async_fn(h.fn)})
    assert sync == []  # Kopf's own test of a handler: a plain function goes to its threads
