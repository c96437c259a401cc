"""A status transition's Event against a real API server that refuses the status write
recording it (issue 39: an Event belongs to a transition): the one check every kind's operator
test runs (controller/handlers/common.py, ``announce``)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kubernetes import client

from fgentic_governance.api.common import GROUP, VERSION
from tests.support.kube import Check, get_object, refusing, until_refused, until_status
from tests.support.polling import until_async

REFUSED = "test.fgentic.dev/refused"
"""The label of the objects whose status writes the test's admission policy refuses."""


def posted(api_client: client.ApiClient, namespace: str, name: str, reason: str) -> int:
    """How many Events with ``reason`` were posted about the object ``name`` (a cluster-scoped
    object's land in ``default``); a repeated Event counts each time it was posted."""
    events = client.CoreV1Api(api_client).list_namespaced_event(
        namespace or "default", field_selector=f"involvedObject.name={name},reason={reason}")
    return sum(event.count or 1 for event in events.items)


def _patch(api: client.CustomObjectsApi, plural: str, namespace: str, name: str,
           body: dict[str, Any], *, status: bool = False) -> object:
    """A merge patch of an object of our group (cluster-scoped when ``namespace`` is empty)."""
    if namespace:
        call = (api.patch_namespaced_custom_object_status if status
                else api.patch_namespaced_custom_object)
        return call(GROUP, VERSION, namespace, plural, name, body)
    cluster = api.patch_cluster_custom_object_status if status else api.patch_cluster_custom_object
    return cluster(GROUP, VERSION, plural, name, body)


async def announced_once_written(  # noqa: PLR0917
    api: client.CustomObjectsApi, log: Path, plural: str, namespace: str,
    create: Callable[[str], object], shown: Check, reason: str,
) -> None:
    """While the API server refuses an object's status writes, the operator's reconcile (its
    status patch seen refused in the operator's log) posts no ``reason`` Event and leaves no
    status showing the transition; once it accepts them (the object's next reconcile: an
    annotation change, or Kopf's retry), the status shows it and exactly one Event is posted.

    ``create(name)`` creates a labelled (``REFUSED``) object of ``plural`` in ``namespace``
    (empty: cluster-scoped): first a probe, whose own status patch shows when the admission
    policy is in force, then the object under test."""
    suffix = uuid.uuid4().hex[:6]
    probe, name = f"probe-{suffix}", f"refused-{suffix}"
    create(probe)

    def probe_status() -> object:
        return _patch(api, plural, namespace, probe, {"status": {"observedGeneration": 0}},
                      status=True)

    refusal = f'{plural}.{GROUP} "{name}" is forbidden'  # as Kopf logs the API's refusal
    failed = f"{plural} {namespace}/{name}: reconcile failed"  # as the operator's work queue
    with refusing(api.api_client, resource=f"{plural}/status", label=REFUSED, allow="false"):
        await until_refused(probe_status)
        create(name)
        await until_async(lambda: refusal in (text := log.read_text()) or failed in text,
                          f"the operator's refused status write of {plural}/{name}")
        status = get_object(api, plural, namespace, name).get("status") or {}
        assert not shown(status), status  # the refused write left no trace
        assert posted(api.api_client, namespace, name, reason) == 0, "announced, not written"
    await until_refused(probe_status, refused=False)
    _patch(api, plural, namespace, name,
           {"metadata": {"annotations": {"test.fgentic.dev/again": suffix}}})
    await until_status(api, plural, namespace, name, shown, timeout=60)
    await until_async(lambda: posted(api.api_client, namespace, name, reason),
                      f"the {reason} Event of {plural}/{name}")
    assert posted(api.api_client, namespace, name, reason) == 1
