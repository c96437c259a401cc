"""`fgentic-governance offboard <mxid>`: create the PrincipalOffboarding the reconciler acts on.

The object name is a digest of the principal, so names, events and audit trails do not carry
the MXID itself; the principal lives only in the spec.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import time
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from fgentic_governance.api.common import GROUP, VERSION, OriginKind, Principal
from fgentic_governance.api.registry import PRINCIPAL_OFFBOARDING
from fgentic_governance.cli import inputs


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
        print("INVALID_SPEC: a complete MXID and a known origin kind are required",
              file=sys.stderr)
        return 2
    api = client.CustomObjectsApi(inputs.kube_client(args.kubeconfig))
    name = object_name(principal)
    try:
        api.create_cluster_custom_object(GROUP, VERSION, PRINCIPAL_OFFBOARDING.plural,
                                         manifest(principal))
        print(f"principaloffboarding/{name} created")
    except ApiException as exc:
        if exc.status != 409:
            print(f"create failed with status {exc.status}", file=sys.stderr)
            return 1
        print(f"principaloffboarding/{name} already exists")
    return _wait(api, name, args.wait) if args.wait else 0


def _wait(api: client.CustomObjectsApi, name: str, seconds: float) -> int:
    deadline = time.monotonic() + seconds
    status: dict[str, Any] = {}
    while time.monotonic() < deadline:
        obj: Any = api.get_cluster_custom_object(GROUP, VERSION, PRINCIPAL_OFFBOARDING.plural, name)
        status = obj.get("status") or {}
        if status.get("phase") == "ReadyForDeactivation":
            print(f"ReadyForDeactivation: {status.get('scopesErased', 0)} scope(s) erased")
            return 0
        time.sleep(0.5)
    print(f"not ready: phase {status.get('phase')} reason {status.get('reasonCode')}",
          file=sys.stderr)
    return 1
