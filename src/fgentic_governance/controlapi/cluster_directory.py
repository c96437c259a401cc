"""The scope directory over the Kubernetes API (MemoryScope and ConsentRecord objects).

Reads are per request: a command is rare and must see the current object, not a cache that
lags a deletion or a withdrawal. The ServiceAccount needs get/list on memoryscopes and
consentrecords, patch on memoryscopes/status and patch on consentrecords - nothing else.
Any API failure is DIRECTORY_UNAVAILABLE; the ApiException (whose body is the server's
response) is dropped, never logged.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

import pydantic
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from fgentic_governance.api.common import GROUP, VERSION
from fgentic_governance.api.memory import LastErasure, MemoryScopeSpec
from fgentic_governance.api.registry import CONSENT_RECORD, MEMORY_SCOPE
from fgentic_governance.controlapi.codes import ControlError, ControlReason
from fgentic_governance.controlapi.directory import DirectoryScope

SCOPES = MEMORY_SCOPE.plural
CONSENTS = CONSENT_RECORD.plural


def _view(obj: dict[str, Any]) -> DirectoryScope | None:
    meta = obj.get("metadata") or {}
    if meta.get("deletionTimestamp"):
        return None  # Being erased by the operator's finalizer: no more commands.
    try:
        spec = MemoryScopeSpec.from_wire(obj.get("spec") or {})
    except pydantic.ValidationError:
        return None
    last: LastErasure | None = None
    raw = (obj.get("status") or {}).get("lastErasure")
    if raw:
        try:
            last = LastErasure.from_wire(raw)
        except pydantic.ValidationError:
            last = None
    return DirectoryScope(str(meta.get("namespace", "")), str(meta.get("name", "")), spec, last)


class KubeDirectory:
    def __init__(self, api_client: Any, namespaces: Sequence[str] = ()) -> None:
        self._api = client.CustomObjectsApi(api_client)
        self._namespaces = tuple(namespaces)

    async def _call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            return await asyncio.to_thread(fn, *args, **kwargs)
        except (ApiException, HTTPError, OSError):
            pass  # Re-raised below as a bare code, without the text or the context.
        raise ControlError(ControlReason.DIRECTORY_UNAVAILABLE)

    async def _list(self, plural: str, namespace: str | None = None) -> list[dict[str, Any]]:
        if namespace is not None:
            body = await self._call(self._api.list_namespaced_custom_object, GROUP, VERSION,
                                    namespace, plural)
            return list(body.get("items", []))
        if self._namespaces:
            items: list[dict[str, Any]] = []
            for ns in self._namespaces:
                items += await self._list(plural, ns)
            return items
        body = await self._call(self._api.list_cluster_custom_object, GROUP, VERSION, plural)
        return list(body.get("items", []))

    async def list_scopes(self) -> Sequence[DirectoryScope]:
        return [v for v in map(_view, await self._list(SCOPES)) if v is not None]

    async def record_erasure(self, scope: DirectoryScope, erasure: LastErasure) -> None:
        await self.record_erasure_at(scope.namespace, scope.name, erasure)

    async def record_erasure_at(self, namespace: str, name: str, erasure: LastErasure) -> None:
        await self._call(self._api.patch_namespaced_custom_object_status, GROUP, VERSION,
                         namespace, SCOPES, name, {"status": {"lastErasure": erasure.wire()}})

    async def scope_status(self, namespace: str, name: str) -> dict[str, Any]:
        """The MemoryScope's (content-free) status block; {} if it has none yet."""
        obj = await self._call(self._api.get_namespaced_custom_object, GROUP, VERSION,
                               namespace, SCOPES, name)
        return dict(obj.get("status") or {})

    async def withdraw_consent(self, scope: DirectoryScope) -> None:
        """Withdraw the newest ConsentRecord of the scope (the one the operator obeys)."""
        records = [r for r in await self._list(CONSENTS, scope.namespace)
                   if (r.get("spec") or {}).get("scopeRef", {}).get("name") == scope.name]
        if not records:
            return
        # The operator's order: creationTimestamp, then name; the newest record decides.
        latest = max(records, key=lambda r: (str(r["metadata"].get("creationTimestamp", "")),
                                             str(r["metadata"].get("name", ""))))
        if latest["spec"].get("decision") != "granted":
            return
        await self._call(self._api.patch_namespaced_custom_object, GROUP, VERSION,
                         scope.namespace, CONSENTS, latest["metadata"]["name"],
                         {"spec": {"decision": "withdrawn"}})
