"""The example manifests and small builders and paths for Kubernetes objects."""

from __future__ import annotations

import copy
import json
import uuid
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def example(kind: str) -> dict[str, Any]:
    """A deep copy of the first example manifest of ``kind``."""
    for path in sorted(EXAMPLES.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") == kind:
                return copy.deepcopy(doc)
    raise LookupError(kind)


def set_path(obj: dict[str, Any], dotted: str, value: Any) -> dict[str, Any]:
    """Set ``a.b.c`` in a nested dict (creating maps on the way); returns obj."""
    *parents, leaf = dotted.split(".")
    node = obj
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = value
    return obj


def api_message(exc: Exception) -> str:
    """The Status message of a kubernetes ApiException."""
    body = getattr(exc, "body", None) or "{}"
    try:
        return str(json.loads(body).get("message", body))
    except ValueError:
        return str(body)


def api_prefix(api_version: str) -> str:
    """``/api/v1`` for the core group, ``/apis/<group>/<version>`` otherwise."""
    return f"/apis/{api_version}" if "/" in api_version else f"/api/{api_version}"


def object_path(obj: dict[str, Any], plural: str, *, named: bool = True) -> str:
    meta = obj["metadata"]
    path = f"{api_prefix(obj['apiVersion'])}/namespaces/{meta['namespace']}/{plural}"
    return f"{path}/{meta['name']}" if named else path


def raw_request(api_client: Any, method: str, path: str, body: Any = None,
                content_type: str = "application/json", **query: str) -> Any:
    """One call to any API path (core or not) with plain JSON in and out; raises ApiException."""
    from kubernetes.client.exceptions import ApiException

    params = api_client.param_serialize(
        method=method, resource_path=path, query_params=list(query.items()),
        header_params={"Content-Type": content_type, "Accept": "application/json"},
        body=body, auth_settings=["BearerToken"])
    response = api_client.call_api(*params)
    data = response.read()
    if response.status >= 400:
        raise ApiException(status=response.status, reason=response.reason, body=data)
    return json.loads(data)


def scope_obj(ns: str, name: str, mxid: str, agent: str = "docs-agent",
              homeserver: str = "fgentic.local") -> dict[str, Any]:
    """The example MemoryScope for ``mxid`` and ``agent`` with a control room of its own."""
    obj = example("MemoryScope")
    obj["metadata"] = {"name": name, "namespace": ns}
    obj["spec"]["subject"]["mxid"] = mxid
    obj["spec"]["agent"] = {"namespace": ns, "name": agent}
    obj["spec"]["controlRoom"] = f"!{name}-{uuid.uuid4().hex[:6]}:{homeserver}"
    return obj


def consent_obj(ns: str, scope: str, mxid: str) -> dict[str, Any]:
    """A granting ConsentRecord (unique name) for ``scope``."""
    obj = example("ConsentRecord")
    obj["metadata"] = {"name": f"{scope}-{uuid.uuid4().hex[:6]}", "namespace": ns}
    obj["spec"]["scopeRef"] = {"name": scope}
    obj["spec"]["subject"]["mxid"] = mxid
    obj["spec"]["decision"] = "granted"
    return obj


def scoped_policies(pairs: Iterable[Sequence[dict[str, Any]]], selector: dict[str, Any],
                    suffix: str) -> list[dict[str, Any]]:
    """ValidatingAdmissionPolicies and their bindings (``render.admission_policy`` pairs) named
    apart by ``suffix`` and bound only to the namespaces ``selector`` matches: a test's own,
    beside every other test's on the shared API server."""
    docs = []
    for policy, binding in pairs:
        policy["metadata"]["name"] += suffix
        binding["metadata"]["name"] += suffix
        binding["spec"]["policyName"] = policy["metadata"]["name"]
        binding["spec"]["matchResources"] = {"namespaceSelector": selector}
        docs += [policy, binding]
    return docs
