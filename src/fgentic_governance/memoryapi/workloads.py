"""Workload identity through the Kubernetes API: TokenReview and the namespace's Agents.

Both answers are cached briefly (``CACHE_SECONDS``) so that a turn's dozens of calls cost one
TokenReview: a token is keyed by its SHA-256 (the token itself is never kept), and only
successful reviews are cached. A deleted Pod's bound token therefore still works here for at
most ``CACHE_SECONDS``. Every API call has a deadline; a failure is IDENTITY_UNAVAILABLE.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Final, Generic, TypeVar

from kubernetes import client

from fgentic_governance.api import kagent
from fgentic_governance.api.kagent import ROUTED_LABEL, AgentRef
from fgentic_governance.kube.failures import failure_code
from fgentic_governance.memoryapi.codes import ApiError, ApiReason
from fgentic_governance.memoryapi.identity import (
    Workload,
    resolve_agent,
    routed_pod_agent,
    workload_of,
)

log = logging.getLogger("fgentic_governance.memoryapi")
AUDIENCE: Final = "kagent"
"""kagent v0.9.11 mounts the Agent Pod's token with this audience (manifest_builder.go)."""
CACHE_SECONDS: Final = 10.0
CACHE_ENTRIES: Final = 4096
API_SECONDS: Final = 5.0
LIVE_PHASES: Final = frozenset({"Pending", "Running"})
K = TypeVar("K")
V = TypeVar("V")


class TtlCache(Generic[K, V]):
    """A bounded map whose entries expire; the oldest entry goes first when full."""

    def __init__(self, seconds: float, entries: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._seconds, self._entries, self._clock = seconds, entries, clock
        self._items: OrderedDict[K, tuple[float, V]] = OrderedDict()

    def get(self, key: K) -> V | None:
        item = self._items.get(key)
        if item is None or item[0] <= self._clock():
            self._items.pop(key, None)
            return None
        return item[1]

    def put(self, key: K, value: V) -> None:
        self._items[key] = (self._clock() + self._seconds, value)
        self._items.move_to_end(key)
        while len(self._items) > self._entries:
            self._items.popitem(last=False)


def _live(pod: client.V1Pod) -> bool:
    """Whether ``pod`` may still own its address: a Failed, Succeeded (an evicted Pod is
    Failed) or terminating Pod keeps its ``status.podIP`` while the address is given to
    another Pod, which must never be taken for the Agent. Unknown or no phase: not live."""
    meta, status = pod.metadata, pod.status
    return meta is not None and not meta.deletion_timestamp \
        and status is not None and status.phase in LIVE_PHASES


class KubeIdentity:
    """Token -> Workload -> the one memory-enabled Agent it runs, via the API server."""

    def __init__(self, api: client.ApiClient, *, audience: str = AUDIENCE,
                 cache_seconds: float = CACHE_SECONDS) -> None:
        self._api = api
        self._auth = client.AuthenticationV1Api(api)
        self._core = client.CoreV1Api(api)
        self._custom = client.CustomObjectsApi(api)
        self._audience = audience
        self._tokens: TtlCache[bytes, Workload] = TtlCache(cache_seconds, CACHE_ENTRIES)
        self._agents: TtlCache[str, list[dict[str, Any]]] = TtlCache(cache_seconds, 256)
        self._addresses: TtlCache[str, AgentRef] = TtlCache(cache_seconds, CACHE_ENTRIES)

    async def agent_for(self, token: str) -> AgentRef:
        workload = await self.workload(token)
        return resolve_agent(workload, await self._namespace_agents(workload.namespace))

    async def workload(self, token: str) -> Workload:
        key = hashlib.sha256(token.encode("utf-8", "replace")).digest()
        cached = self._tokens.get(key)
        if cached is not None:
            return cached
        review = client.V1TokenReview(spec=client.V1TokenReviewSpec(
            token=token, audiences=[self._audience]))
        status = (await self._call(self._auth.create_token_review, review)).status
        workload = None
        if status is not None and status.authenticated and status.user is not None \
                and self._audience in (status.audiences or []):
            workload = workload_of(status.user.username or "")
        if workload is None:
            raise ApiError(ApiReason.UNAUTHENTICATED)
        self._tokens.put(key, workload)
        return workload

    async def agent_for_address(self, address: str) -> AgentRef:
        """The memory-enabled Agent of the one live routed Pod with this IP (embeddings requests
        carry the provider's key, not the Pod's token: the source address is what names
        them; NetworkPolicy admits only routed Pods to the memory API). The Agent is the one
        that runs as the Pod's service account, as for a token; never the Pod's labels."""
        cached = self._addresses.get(address)
        if cached is not None:
            return cached
        listed = await self._call(self._core.list_pod_for_all_namespaces,
                                  field_selector=f"status.podIP={address}")
        pods = [self._api.sanitize_for_serialization(p)  # type: ignore[no-untyped-call]
                for p in listed.items
                if _live(p) and (p.metadata.labels or {}).get(ROUTED_LABEL) == "true"]
        if len(pods) != 1:
            raise ApiError(ApiReason.AGENT_UNRESOLVED)
        namespace = str(pods[0]["metadata"]["namespace"])
        agent = routed_pod_agent(pods[0], await self._namespace_agents(namespace))
        self._addresses.put(address, agent)
        return agent

    async def _namespace_agents(self, namespace: str) -> list[dict[str, Any]]:
        cached = self._agents.get(namespace)
        if cached is not None:
            return cached
        listed = await self._call(self._custom.list_namespaced_custom_object,
                                  kagent.GROUP, kagent.VERSION, namespace,
                                  kagent.AGENT.plural)
        agents = list(listed.get("items") or [])
        self._agents.put(namespace, agents)
        return agents

    @staticmethod
    async def _call(method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        failure = ""
        try:
            async with asyncio.timeout(API_SECONDS + 1):
                return await asyncio.to_thread(method, *args, _request_timeout=API_SECONDS,
                                               **kwargs)
        except Exception as exc:  # the API's error body is not ours to log; keep only the code
            failure = failure_code(exc)
        log.warning("memory-api identity lookup failed: %s", failure)
        raise ApiError(ApiReason.IDENTITY_UNAVAILABLE)

