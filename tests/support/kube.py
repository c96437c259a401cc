"""Our custom objects in a real kube-apiserver: the API group, the project's CRDs and bounded
waits on an object's status."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kubernetes import client

from fgentic_governance.api.common import GROUP, VERSION
from tests.support.objects import ROOT

Check = Callable[[dict[str, Any]], bool]


def project_crds() -> list[Path]:
    """This repo's generated CRDs (none yet is fine)."""
    return sorted((ROOT / "crds").glob("*.yaml"))


def get_object(api: client.CustomObjectsApi, plural: str, namespace: str, name: str,
               request_timeout: float | None = None) -> dict[str, Any]:
    """One object of our group (cluster-scoped when ``namespace`` is empty);
    ``request_timeout`` bounds the call if given."""
    timeout: dict[str, Any] = ({} if request_timeout is None
                               else {"_request_timeout": request_timeout})
    if not namespace:
        return api.get_cluster_custom_object(  # type: ignore[no-any-return]
            GROUP, VERSION, plural, name, **timeout)
    return api.get_namespaced_custom_object(  # type: ignore[no-any-return]
        GROUP, VERSION, namespace, plural, name, **timeout)


async def until_status(api: client.CustomObjectsApi, plural: str, namespace: str, name: str,
                       check: Check, *, timeout: float = 30, interval: float = 0.2,
                       tolerate: tuple[type[BaseException], ...] = (),
                       request_timeout: float | None = None) -> dict[str, Any]:
    """Poll the object until ``check`` holds for its status and return the object; fail after
    ``timeout`` seconds. Errors of the ``tolerate`` types count as a poll that did not hold."""
    deadline = time.monotonic() + timeout
    obj: dict[str, Any] = {}
    while time.monotonic() < deadline:
        with contextlib.suppress(*tolerate):
            obj = await asyncio.to_thread(get_object, api, plural, namespace, name,
                                          request_timeout)
            if check(obj.get("status") or {}):
                return obj
        await asyncio.sleep(interval)
    raise AssertionError(f"{plural}/{name} never reached the state in {timeout:.0f}s; "
                         f"last status {obj.get('status')}")


def phase(expected: str, reason: str | None = None) -> Check:
    """A check: the status is in phase ``expected`` (with reason code ``reason`` if given)."""
    return lambda s: s.get("phase") == expected and (reason is None
                                                     or s.get("reasonCode") == reason)
