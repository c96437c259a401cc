"""Per Agent, whether kagent's memory model work goes through the governed model route, for
every MemoryScope of that Agent (its ``ModelRouteGoverned`` condition).

ADR 0023 §42 bounds summarisation and embeddings before any model work, which holds only where
the Agent's ModelConfigs point at the memory API's ``/v1`` (the webhook then refuses changes
that would take them off it). The bound is per Agent, so each scope's status says whether it
holds for its Agent. The Agent and its ModelConfigs are read at most once per sweep
interval per Agent (an Agent has one scope per user).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from kubernetes.client import ApiClient

from fgentic_governance.api import kagent
from fgentic_governance.api.kagent import governed, model_refs
from fgentic_governance.controller import kube_calls as kube
from fgentic_governance.controller.tuning import SCOPE_RESYNC
from fgentic_governance.reasons import Reason

log = logging.getLogger("fgentic_governance.controller.model_route_condition")


def judge(agent: Mapping[str, Any] | None,
          configs: Mapping[str, Mapping[str, Any] | None], route: str) -> Reason:
    """OK when the Agent's memory model work uses ``route`` (or it has no memory, so none).
    ``configs``: the ModelConfigs it names, by name (None when absent)."""
    if not route:
        return Reason.MODEL_ROUTE_UNCONFIGURED
    if agent is None:
        return Reason.AGENT_NOT_FOUND
    refs = model_refs(agent).values()
    if all(name is not None and governed(configs.get(name), route) for name in refs):
        return Reason.OK
    return Reason.MODEL_ROUTE_UNGOVERNED


class ModelRoutes:
    """The judged reason per Agent, cached; None while the API cannot say (the condition then
    keeps its last value)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._judged: dict[tuple[str, str], tuple[float, Reason]] = {}

    async def reason(self, api: ApiClient, namespace: str, name: str,
                     route: str) -> Reason | None:
        if not route:
            return Reason.MODEL_ROUTE_UNCONFIGURED
        key = (namespace, name)
        cached = self._judged.get(key)
        # As often as the sweep compares: an Agent's change shows at its next round.
        if cached is not None and self._clock() - cached[0] < SCOPE_RESYNC.read():
            return cached[1]
        try:
            agent = await kube.get_object(api, group=kagent.GROUP, version=kagent.VERSION,
                                          plural=kagent.AGENT.plural, namespace=namespace,
                                          name=name)
            configs: dict[str, Mapping[str, Any] | None] = {}
            for ref in {r for r in model_refs(agent or {}).values() if r}:
                configs[ref] = await kube.get_object(
                    api, group=kagent.GROUP, version=kagent.VERSION,
                    plural=kagent.MODEL_CONFIG.plural, namespace=namespace, name=ref)
        except Exception as exc:  # transient: judged again at the next reconcile
            log.warning("model route of an Agent not read (%s)", type(exc).__name__)
            return None
        judged = judge(agent, configs, route)
        if len(self._judged) > 4096:  # bounded: stale Agents fall out
            self._judged.clear()
        self._judged[key] = (self._clock(), judged)
        return judged
