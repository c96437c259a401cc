"""A minimal list+watch cache of one custom resource, in a background thread.

The webhook is stateless across replicas: each keeps its own cache, fed by the API server.
Until the first list completes the cache is not synced, and every decision that depends on
it denies with POLICY_STATE_UNAVAILABLE (fail closed).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from fgentic_governance.kube.failures import describe

log = logging.getLogger("fgentic_governance.admission.informer")
WATCH_TIMEOUT = 60  # Server-side watch timeout: a silently dead watch is replaced this often.


class Informer:
    def __init__(self, api_client: client.ApiClient, group: str, version: str, plural: str,
                 on_change: Callable[[], None] = lambda: None) -> None:
        self._api = client.CustomObjectsApi(api_client)
        self._what = (group, version, plural)
        self._items: dict[tuple[str, str], dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._on_change = on_change
        self.synced = threading.Event()
        self._stop = threading.Event()

    def items(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._items.values())

    def start(self) -> None:
        threading.Thread(target=self._run, name=f"informer-{self._what[2]}",
                         daemon=True).start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                version = self._relist()
                self._watch(version)
            except ApiException as exc:  # which request, its status and bounded reason
                log.warning("%s", describe("list/watch", self._what[2], exc))
                time.sleep(1)
            except Exception as exc:
                log.warning("%s list/watch failed: %s", self._what[2], type(exc).__name__)
                time.sleep(1)

    def _relist(self) -> str:
        listing: dict[str, Any] = self._api.list_cluster_custom_object(*self._what)  # type: ignore[assignment]
        with self._lock:
            self._items = {_key(o): o for o in listing.get("items", [])}
        self.synced.set()
        self._on_change()
        return str(listing["metadata"]["resourceVersion"])

    def _watch(self, version: str) -> None:
        stream = watch.Watch().stream(  # type: ignore[no-untyped-call]
            self._api.list_cluster_custom_object, *self._what, resource_version=version,
            timeout_seconds=WATCH_TIMEOUT, allow_watch_bookmarks=True)
        for event in stream:
            if self._stop.is_set():
                return
            kind, obj = event["type"], event["object"]
            if kind == "ERROR":
                return  # Typically 410 Gone: relist.
            if kind == "BOOKMARK":
                continue
            with self._lock:
                if kind == "DELETED":
                    self._items.pop(_key(obj), None)
                else:
                    self._items[_key(obj)] = obj
            self._on_change()


def _key(obj: dict[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return (str(meta.get("namespace", "")), str(meta.get("name", "")))
