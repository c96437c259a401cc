"""`fgentic-governance offboard <mxid>`: create the PrincipalOffboarding the reconciler acts on.

The object name is a digest of the principal, so names, events and audit trails do not carry
the MXID itself; the principal lives only in the spec.
"""

from __future__ import annotations

import argparse
import hashlib
import time
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from fgentic_governance.api.common import GROUP, VERSION, OriginKind, Principal
from fgentic_governance.api.registry import PRINCIPAL_OFFBOARDING
from fgentic_governance.cli import inputs
from fgentic_governance.cli.errors import EXIT_UNUSABLE, fail


def object_name(principal: Principal) -> str:
    digest = hashlib.sha256(f"{principal.origin_kind.value}\0{principal.mxid}".encode())
    return f"offboard-{digest.hexdigest()[:20]}"


def manifest(principal: Principal) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "PrincipalOffboarding",
            "metadata": {"name": object_name(principal)},
            "spec": {"principal": principal.wire()}}


def run_offboard(args: argparse.Namespace) -> int:
    try:
        principal = Principal(mxid=args.mxid, origin_kind=OriginKind(args.origin_kind))
    except ValueError:
        return fail(args, "INVALID_SPEC: a complete MXID and a known origin kind are required",
                    EXIT_UNUSABLE)
    api = client.CustomObjectsApi(inputs.kube_client(args.kubeconfig))
    name = object_name(principal)
    try:
        api.create_cluster_custom_object(GROUP, VERSION, PRINCIPAL_OFFBOARDING.plural,
                                         manifest(principal))
        print(f"principaloffboarding/{name} created")
    except ApiException as exc:
        if exc.status != 409:
            return fail(args, f"create failed with status {exc.status}")
        print(f"principaloffboarding/{name} already exists")
    return _wait(api, name, args) if args.wait else 0


def _wait(api: client.CustomObjectsApi, name: str, args: argparse.Namespace) -> int:
    deadline = time.monotonic() + args.wait
    status: dict[str, Any] = {}
    while time.monotonic() < deadline:
        obj: Any = api.get_cluster_custom_object(GROUP, VERSION, PRINCIPAL_OFFBOARDING.plural, name)
        status = obj.get("status") or {}
        if status.get("phase") == "ReadyForDeactivation":
            print(f"ReadyForDeactivation: {status.get('scopesErased', 0)} scope(s) erased")
            return 0
        time.sleep(0.5)
    return fail(args, f"not ready: phase {status.get('phase')} reason {status.get('reasonCode')}")
