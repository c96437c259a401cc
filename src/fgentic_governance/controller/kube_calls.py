"""The operator's direct Kubernetes API calls besides Kopf's own patching (async, via a
thread): the handlers' and `retrieval_apply`'s.

Each call is sent through the API client it is handed: the operator's, which ``main`` builds
before Kopf starts and keeps in the operator's context (``controller.context``,
``OperatorContext.kube``), so no module of the operator holds one (issue 41 item 2)."""

from __future__ import annotations

import asyncio
import contextvars
import functools
import json
from collections.abc import Callable
from typing import Any, Final, TypeVar

import kopf
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from fgentic_governance.controller import lanes
from fgentic_governance.controller.leadership import ensure_leading

T = TypeVar("T")
PARTIAL_METADATA_LIST: Final = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"


def _api(api: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api)


async def annotate(api: client.ApiClient, *, group: str, version: str, plural: str,
                   namespace: str, name: str, annotations: dict[str, str],
                   erasure: bool = False) -> None:
    """Change annotations on an object so that Kopf runs its update handler; 404 is fine.
    ``erasure``: sent on the erasure lane's threads, never queued behind scope reconciles."""
    body = {"metadata": {"annotations": annotations}}
    await _call(_api(api).patch_namespaced_custom_object, group, version, namespace, plural, name,
                body, erasure=erasure)


async def patch_status(api: client.ApiClient, *, group: str, version: str, plural: str,
                       namespace: str, name: str, status: dict[str, Any]) -> str | None:
    """Merge ``status`` in; the object's resourceVersion after it (unchanged when the API
    server found nothing to change), None when the object is gone."""
    written = await _call(_api(api).patch_namespaced_custom_object_status, group, version,
                          namespace, plural, name, {"status": status})
    return None if written is None else str(written.get("metadata", {}).get("resourceVersion"))


async def patch_cluster_status(api: client.ApiClient, *, group: str, version: str, plural: str,
                               name: str, status: dict[str, Any],
                               erasure: bool = False) -> bool:
    """A cluster-scoped object's status (a PrincipalOffboarding's); False when the object is
    gone. ``erasure``: sent on the erasure lane's threads, never behind scope reconciles."""
    return await _call(_api(api).patch_cluster_custom_object_status, group, version, plural,
                       name, {"status": status}, erasure=erasure) is not None


async def get_object(api: client.ApiClient, *, group: str, version: str, plural: str,
                     namespace: str, name: str) -> dict[str, Any] | None:
    """One namespaced custom object, or None when it does not exist."""
    try:
        found: dict[str, Any] = await asyncio.to_thread(
            _api(api).get_namespaced_custom_object, group, version, namespace, plural, name)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise kopf.TemporaryError(f"api {exc.status}", delay=5) from None
    return found


def _write(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """A write, sent only while this replica leads: checked in the thread that sends it, the
    last moment before the request (review R4-5)."""
    ensure_leading()
    return fn(*args, **kwargs)


async def _call(fn: Any, *args: Any, erasure: bool = False) -> Any:
    """The call's answer, or None when the object is gone."""
    executor = lanes.erasure_executor() if erasure else None  # None: the loop's default
    try:
        return await asyncio.get_running_loop().run_in_executor(
            executor, contextvars.copy_context().run, functools.partial(_write, fn, *args))
    except ApiException as exc:
        if exc.status != 404:  # A vanished object needs nothing more.
            raise kopf.TemporaryError(f"api {exc.status}", delay=5) from None
        return None


# -- server-side apply of rendered objects (RetrievalBinding) ---------------------------------

APPLY_PATCH = "application/apply-patch+yaml"


def _group_version(api_version: str) -> tuple[str, str]:
    group, _, version = api_version.rpartition("/")
    return group, version


def _core(api: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api)


def _is_config_map(api_version: str, plural: str) -> bool:
    # The one core-group kind we render (the projector's configuration); the custom-object
    # API only addresses /apis/<group>/..., so core objects take the typed client.
    return api_version == "v1" and plural == "configmaps"


async def server_side_apply(api: client.ApiClient, obj: dict[str, Any], plural: str,
                            field_manager: str) -> str:
    """Apply ``obj`` as ``field_manager`` with force: fields it owns are reset on every call,
    which is what corrects drift. Returns the applied object's resourceVersion. Raises
    ApiException (the caller reports APPLY_FAILED)."""
    meta = obj["metadata"]
    options: dict[str, Any] = {"field_manager": field_manager, "force": True,
                               "field_validation": "Strict", "_content_type": APPLY_PATCH}
    if _is_config_map(obj["apiVersion"], plural):
        typed = await asyncio.to_thread(_write, _core(api).patch_namespaced_config_map,
                                        meta["name"], meta["namespace"], obj, **options)
        return str(typed.metadata.resource_version if typed.metadata else "")
    group, version = _group_version(obj["apiVersion"])
    # The client does not deserialize apply-patch responses for custom objects: read the JSON.
    response = await asyncio.to_thread(
        _write, _api(api).patch_namespaced_custom_object, group, version, meta["namespace"], plural,
        meta["name"], obj, _preload_content=False, **options)
    applied: dict[str, Any] = json.loads(response.data)
    return str(applied.get("metadata", {}).get("resourceVersion", ""))


async def list_versions(api: client.ApiClient, api_version: str, plural: str,
                        selector: str) -> dict[tuple[str, str], str]:
    """(namespace, name) → resourceVersion of every object of a kind matching a label selector,
    read as metadata only (PartialObjectMetadataList): a drift sweep over thousands of rendered
    objects then transfers and parses names and versions, not bodies."""
    path = (f"/api/{api_version}/{plural}" if "/" not in api_version
            else f"/apis/{api_version}/{plural}")
    found = await asyncio.to_thread(_raw_get, api, path, selector)
    return {(str(item["metadata"].get("namespace", "")), str(item["metadata"]["name"])):
            str(item["metadata"]["resourceVersion"]) for item in found.get("items", [])}


def _raw_get(api: client.ApiClient, path: str, selector: str) -> dict[str, Any]:
    params = api.param_serialize(
        method="GET", resource_path=path, query_params=[("labelSelector", selector)],
        header_params={"Accept": PARTIAL_METADATA_LIST}, auth_settings=["BearerToken"])
    response = api.call_api(*params)
    data = response.read()  # type: ignore[no-untyped-call]
    if response.status >= 400:
        raise ApiException(status=response.status, reason=response.reason)
    found: dict[str, Any] = json.loads(data)
    return found


DISCOVERY_TIMEOUT: Final = 10.0


async def served(api: client.ApiClient, api_version: str, plural: str) -> bool:
    """The API server's discovery lists ``plural`` under ``api_version``: its CRD is installed
    and established. A 404 (the group/version is unknown) is False; any other error raises
    ApiException."""
    path = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    found = await asyncio.to_thread(_discovery, api, path)
    return found is not None and any(
        resource.get("name") == plural for resource in found.get("resources", []))


def _discovery(api: client.ApiClient, path: str) -> dict[str, Any] | None:
    params = api.param_serialize(method="GET", resource_path=path,
                                 header_params={"Accept": "application/json"},
                                 auth_settings=["BearerToken"])
    response = api.call_api(*params, _request_timeout=DISCOVERY_TIMEOUT)
    data = response.read()  # type: ignore[no-untyped-call]
    if response.status == 404:
        return None
    if response.status >= 400:
        raise ApiException(status=response.status, reason=response.reason)
    found: dict[str, Any] = json.loads(data)
    return found


async def list_labelled(api: client.ApiClient, api_version: str, plural: str,
                        selector: str) -> list[dict[str, Any]]:
    """Every object of a kind, in all namespaces, matching a label selector."""
    if _is_config_map(api_version, plural):
        typed = await asyncio.to_thread(_core(api).list_config_map_for_all_namespaces,
                                        label_selector=selector)
        found: dict[str, Any] = api.sanitize_for_serialization(  # type: ignore[no-untyped-call]
            typed)
    else:
        group, version = _group_version(api_version)
        found = await asyncio.to_thread(
            _api(api).list_cluster_custom_object, group, version, plural, label_selector=selector)
    return list(found.get("items", []))


async def delete_object(api: client.ApiClient, api_version: str, plural: str, namespace: str,
                        name: str) -> None:
    if _is_config_map(api_version, plural):
        await _call(_core(api).delete_namespaced_config_map, name, namespace)
        return
    group, version = _group_version(api_version)
    await _call(_api(api).delete_namespaced_custom_object, group, version, namespace, plural, name)


async def read_config_map_value(api: client.ApiClient, namespace: str, name: str,
                                key: str) -> str | None:
    """One entry of a ConfigMap, or None when the ConfigMap or the entry is missing."""
    try:
        config_map = await asyncio.to_thread(
            _core(api).read_namespaced_config_map, name, namespace)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise kopf.TemporaryError(f"api {exc.status}", delay=5) from None
    value = (config_map.data or {}).get(key)
    return str(value) if value else None
