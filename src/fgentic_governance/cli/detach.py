"""`fgentic-governance detach`: what the chart's pre-delete hook runs before `helm uninstall`.

Without the operator, the finalizer it put on our objects would hold every MemoryScope (and
so its namespace) in deletion forever. Detaching stops the operator, fences memory, then lets
go:

1. the operator's Deployment is scaled to 0 and its pods are waited out (a running operator
   would put its finalizer back at the next event, and could grant again);
2. with a store, every scope is disabled and its consent generation advanced (nothing stays
   readable or writable; nothing is deleted: a reinstalled operator re-evaluates consent and
   re-enables, `memory erase-scope` erases);
3. our finalizer is removed from every object of our kinds;
4. what RetrievalBindings rendered is deleted in every namespace (NetworkPolicies, routes,
   gateway policies and backends, ConfigMaps: cross-namespace objects have no owner reference,
   and once the CRDs go no binding is left to prune them), selected by the binding label and
   our managed-by label together, so an object someone else labelled stays;
5. the stopped operator's Lease is deleted (``--operator-lease``).

Any failure exits non-zero, so helm stops the uninstall rather than leave memory unfenced.
Input that cannot be used (credentials, the DSN file, ``--operator-deployment``) is one line and
exit 2, before anything is changed (``cli.errors``). Output is counts only (content-free).
"""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path
from typing import Any, cast

from fgentic_governance.api.common import FINALIZER, GROUP, VERSION
from fgentic_governance.api.registry import KINDS
from fgentic_governance.cli import inputs
from fgentic_governance.cli.errors import InputError, fail
from fgentic_governance.retrieval.render.names import RENDERED_KINDS
from fgentic_governance.retrieval.render.ownership import RENDERED_SELECTOR, rendered_by

OPERATOR_GONE_SECONDS = 90.0
"""How long the operator's pods may take to go (its grace period is 30 s) before detach fails."""
REQUEST_SECONDS = 10
"""Bound of each list and delete of rendered objects and of the Lease."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kubeconfig", type=Path, help="default: in-cluster or ~/.kube/config")
    parser.add_argument("--store-dsn-file", type=Path,
                        help="file holding the PostgreSQL DSN: fence every scope first")
    parser.add_argument("--operator-deployment", metavar="NAMESPACE/NAME",
                        help="stop this operator Deployment first (scale to 0, pods gone)")
    parser.add_argument("--operator-lease", metavar="NAMESPACE/NAME",
                        help="delete the stopped operator's Lease last")


def run_detach(args: argparse.Namespace) -> int:
    for flag, value in (("--operator-deployment", args.operator_deployment),
                        ("--operator-lease", args.operator_lease)):
        namespace, _, name = (value or "").partition("/")
        if value is not None and (not namespace or not name or "/" in name):
            raise InputError(f"{flag} must be NAMESPACE/NAME")
    api = inputs.kube_client(args.kubeconfig)
    if args.operator_deployment and not _stop_operator(api, args.operator_deployment):
        return fail(args, f"refused: the operator did not stop within "
                          f"{OPERATOR_GONE_SECONDS:.0f}s; nothing detached")
    fenced = 0
    if args.store_dsn_file:
        from fgentic_governance.memory import StoreRefusal
        try:
            fenced = asyncio.run(_fence_all(args.store_dsn_file))
        except (StoreRefusal, OSError) as exc:
            code = getattr(getattr(exc, "reason", None), "value", "STORE_UNAVAILABLE")
            return fail(args, f"refused: {code}; nothing detached")
    released = _release_finalizers(api)
    removed = _remove_rendered(api)
    if args.operator_lease:
        _delete_lease(api, args.operator_lease)
    print(f"detached: {fenced} scopes fenced, {released} finalizers released, "
          f"{removed} rendered objects removed")
    return 0


async def _fence_all(dsn_file: Path) -> int:
    from fgentic_governance.cli.memory import store_from_file

    async with store_from_file(dsn_file) as store:
        states = await store.scope_states()
        for state in states:
            await store.disable_and_advance(state.scope_key)
        return len(states)


def _stop_operator(api: Any, deployment: str) -> bool:
    from kubernetes import client

    namespace, _, name = deployment.partition("/")
    apps, core = client.AppsV1Api(api), client.CoreV1Api(api)
    try:
        found = apps.read_namespaced_deployment(name, namespace)
    except client.ApiException as exc:
        if exc.status == 404:  # nothing to stop
            return True
        raise
    labels = found.spec.selector.match_labels or {}
    selector = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
    apps.patch_namespaced_deployment_scale(name, namespace, {"spec": {"replicas": 0}})
    deadline = time.monotonic() + OPERATOR_GONE_SECONDS
    while time.monotonic() < deadline:
        if not core.list_namespaced_pod(namespace, label_selector=selector).items:
            return True
        time.sleep(1)
    return False


def _release_finalizers(api_client: Any) -> int:
    from kubernetes import client

    api = client.CustomObjectsApi(api_client)
    released = 0
    for kind in KINDS:
        listing = cast(dict[str, Any], api.list_cluster_custom_object(GROUP, VERSION, kind.plural))
        for obj in listing.get("items", []):
            meta = obj["metadata"]
            finalizers = meta.get("finalizers") or []
            if FINALIZER not in finalizers:
                continue
            # The resourceVersion makes this a compare-and-swap: a concurrent change fails
            # the hook instead of being overwritten.
            patch = {"metadata": {"finalizers": [f for f in finalizers if f != FINALIZER],
                                  "resourceVersion": meta["resourceVersion"]}}
            if kind.namespaced:
                api.patch_namespaced_custom_object(GROUP, VERSION, meta["namespace"],
                                                   kind.plural, meta["name"], patch)
            else:
                api.patch_cluster_custom_object(GROUP, VERSION, kind.plural, meta["name"],
                                                patch)
            released += 1
    return released


def _remove_rendered(api_client: Any) -> int:
    """Delete every object any RetrievalBinding rendered; a kind whose CRD is not installed
    (404) has nothing to delete. Idempotent: an object already gone counts for nothing."""
    removed = 0
    for (api_version, _kind), plural in RENDERED_KINDS.items():
        for namespace, name in _rendered(api_client, api_version, plural):
            removed += _delete(api_client, api_version, plural, namespace, name)
    return removed


def _rendered(api_client: Any, api_version: str, plural: str) -> list[tuple[str, str]]:
    from kubernetes import client

    try:
        if api_version == "v1":
            found: dict[str, Any] = client.CoreV1Api(
                api_client).list_config_map_for_all_namespaces(
                label_selector=RENDERED_SELECTOR, _request_timeout=REQUEST_SECONDS).to_dict()
        else:
            group, _, version = api_version.rpartition("/")
            found = cast(dict[str, Any], client.CustomObjectsApi(
                api_client).list_cluster_custom_object(
                group, version, plural, label_selector=RENDERED_SELECTOR,
                _request_timeout=REQUEST_SECONDS))
    except client.ApiException as exc:
        if exc.status == 404:  # the kind is not installed
            return []
        raise
    # The selector chose them; the labels are checked again before anything is deleted.
    return [(item["metadata"]["namespace"], item["metadata"]["name"])
            for item in found.get("items") or [] if rendered_by(item)]


def _delete(api_client: Any, api_version: str, plural: str, namespace: str, name: str) -> int:
    from kubernetes import client

    try:
        if api_version == "v1":
            client.CoreV1Api(api_client).delete_namespaced_config_map(
                name, namespace, _request_timeout=REQUEST_SECONDS)
        else:
            group, _, version = api_version.rpartition("/")
            client.CustomObjectsApi(api_client).delete_namespaced_custom_object(
                group, version, namespace, plural, name, _request_timeout=REQUEST_SECONDS)
    except client.ApiException as exc:
        if exc.status == 404:  # already gone
            return 0
        raise
    return 1


def _delete_lease(api_client: Any, lease: str) -> None:
    """The operator is stopped, so nobody renews or recreates its Lease."""
    from kubernetes import client

    namespace, _, name = lease.partition("/")
    try:
        client.CoordinationV1Api(api_client).delete_namespaced_lease(
            name, namespace, _request_timeout=REQUEST_SECONDS)
    except client.ApiException as exc:
        if exc.status != 404:
            raise
