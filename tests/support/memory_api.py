"""The governed memory API in tests: an Agent's workload identity in the real API server, and
the API served in-process on a loopback port over a runtime-role pool."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
from kubernetes import client

from fgentic_devenv import free_port
from fgentic_governance.api.appservice import EMPTY, AppserviceRegistry
from fgentic_governance.api.kagent import ROUTED_LABEL, app_name
from fgentic_governance.memory.delegated import DelegatedStore
from fgentic_governance.memoryapi import proxy
from fgentic_governance.memoryapi.activity import WINDOW_SECONDS, Activity
from fgentic_governance.memoryapi.http import make_handler
from fgentic_governance.memoryapi.service import MemoryApi
from fgentic_governance.memoryapi.workloads import KubeIdentity
from fgentic_governance.serving import http as serving

LOCAL = "example.org"
"""The homeserver of tests/support/store.py's ALICE."""


def agent_object(ns: str, name: str, *, memory: bool = True,
                 service_account: str | None = None) -> dict[str, Any]:
    declarative: dict[str, Any] = {"modelConfig": "default-model-config",
                                   "systemMessage": "You help."}
    if memory:
        declarative["memory"] = {"modelConfig": "embedding-model-config", "ttlDays": 3}
    if service_account:
        declarative["deployment"] = {"serviceAccountName": service_account}
    return {"apiVersion": "kagent.dev/v1alpha2", "kind": "Agent",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"type": "Declarative", "declarative": declarative}}


def ensure_service_account(core: client.CoreV1Api, ns: str, account: str) -> None:
    """Create ``account`` in ``ns`` unless it exists."""
    try:
        core.create_namespaced_service_account(
            ns, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name=account)))
    except client.ApiException as exc:
        if exc.status != 409:
            raise


async def agent_token(api: client.ApiClient, ns: str, agent: str, *, memory: bool = True,
                      service_account: str | None = None, audience: str = "kagent") -> str:
    """Create the Agent (and its service account) and return a projected-style token for the
    account from TokenRequest, as kubelet mounts it into the Agent's Pods."""
    account = service_account or agent
    core = client.CoreV1Api(api)
    custom = client.CustomObjectsApi(api)

    def create() -> str:
        ensure_service_account(core, ns, account)
        custom.create_namespaced_custom_object(
            "kagent.dev", "v1alpha2", ns, "agents",
            agent_object(ns, agent, memory=memory, service_account=service_account))
        return token(api, ns, account, audience)

    return await asyncio.to_thread(create)


def token(api: client.ApiClient, ns: str, account: str, audience: str = "kagent") -> str:
    request = client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(
        audiences=[audience], expiration_seconds=3600))
    answer = client.CoreV1Api(api).create_namespaced_service_account_token(
        account, ns, request)
    return str(answer.status.token)


def headers(token_: str, ns: str, agent: str, user: str | None) -> dict[str, str]:
    """What kagent's runtime sends with every call (RUNTIME.md, _token.py)."""
    sent = {"Authorization": f"Bearer {token_}", "X-Agent-Name": app_name(ns, agent)}
    if user is not None:
        sent["X-User-Id"] = user
    return sent


def routed_pod(api: client.ApiClient, ns: str, agent: str, address: str) -> None:
    """A routed Pod of ``agent`` (kagent's labels, the webhook's label, the Agent's account)
    whose status says it runs at ``address``: what the API server would hold for a running
    Agent Pod (no kubelet here, so the test writes the status)."""
    core = client.CoreV1Api(api)
    core.create_namespaced_pod(ns, {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"{agent}-pod", "labels": {
            "app": "kagent", "kagent": agent, ROUTED_LABEL: "true"}},
        "spec": {"serviceAccountName": agent, "automountServiceAccountToken": False,
                 "containers": [{"name": "kagent", "image": "kagent:0.9.11"}]}})
    core.patch_namespaced_pod_status(f"{agent}-pod", ns, {"status": {
        "phase": "Running", "podIP": address, "podIPs": [{"ip": address}]}})


@asynccontextmanager
async def memory_api(delegate_pool: asyncpg.Pool, api: client.ApiClient, upstream_url: str,
                     *, local_server: str = LOCAL, embeddings_url: str = "",
                     model_url: str = "",
                     activity_seconds: float = WINDOW_SECONDS,
                     appservice: AppserviceRegistry = EMPTY) -> AsyncIterator[str]:
    """The memory API served on 127.0.0.1; yields its base URL. With ``embeddings_url`` it
    also serves ``/v1/embeddings``, with ``model_url`` ``/v1/chat/completions``, identifying
    the caller's Pod by address and charging them to the user whose calls it saw within
    ``activity_seconds``; ``appservice`` is its --appservice-namespaces."""
    upstream = proxy.Upstreams()
    identity = KubeIdentity(api)
    handler = make_handler(MemoryApi(DelegatedStore(delegate_pool), local_server, appservice),
                           identity.agent_for, upstream, upstream_url,
                           embeddings_url=embeddings_url, model_url=model_url,
                           identify_address=identity.agent_for_address,
                           activity=Activity(activity_seconds))
    port = free_port()
    runner = await serving.serve(handler, "127.0.0.1", port)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()
        await upstream.close()
