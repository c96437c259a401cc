"""The few direct API calls handlers make besides Kopf's own patching (async, via a thread)."""

from __future__ import annotations

import asyncio
from typing import Any

import kopf
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from fgentic_governance.runtime_context import context


def _api() -> client.CustomObjectsApi:
    return client.CustomObjectsApi(context().api_client)


async def annotate(*, group: str, version: str, plural: str, namespace: str, name: str,
                   annotations: dict[str, str]) -> None:
    """Change annotations on an object so that Kopf runs its update handler; 404 is fine."""
    body = {"metadata": {"annotations": annotations}}
    await _call(_api().patch_namespaced_custom_object, group, version, namespace, plural, name,
                body)


async def patch_status(*, group: str, version: str, plural: str, namespace: str, name: str,
                       status: dict[str, Any]) -> None:
    await _call(_api().patch_namespaced_custom_object_status, group, version, namespace,
                plural, name, {"status": status})


async def _call(fn: Any, *args: Any) -> None:
    try:
        await asyncio.to_thread(fn, *args)
    except ApiException as exc:
        if exc.status != 404:  # A vanished object needs nothing more.
            raise kopf.TemporaryError(f"api {exc.status}", delay=5) from None
