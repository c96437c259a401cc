"""RetrievalBinding → NetworkPolicies + agentgateway configuration (ADR 0017), as pure functions.

Shared by the operator (which applies the Kubernetes objects) and `fgentic-governance render`
(which prints either form for GitOps). Nothing here performs I/O; the JWKS of the public route
is an input, read by the caller from the binding's `jwksConfigMap`.

The digest is content-free: lowercase SHA-256 of the RFC 8785 (JCS) encoding of the rendered
Kubernetes object list, in apply order, before any owner reference is added.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import rfc8785
import yaml

from fgentic_governance.api.appservice import EMPTY, AppserviceRegistry
from fgentic_governance.api.retrieval import RetrievalBindingSpec
from fgentic_governance.retrieval.projector_config import (
    ProjectorConfigError,
    dump_config,
    projector_config,
)
from fgentic_governance.retrieval.render import names as n
from fgentic_governance.retrieval.render.k8s import KubernetesFormError, gateway_objects
from fgentic_governance.retrieval.render.netpol import network_policies
from fgentic_governance.retrieval.render.rules import DEVIATIONS, UNENFORCEABLE, gateway_rules
from fgentic_governance.retrieval.render.standalone import (
    StandaloneFormError,
    header_comment,
    standalone_config,
)
from fgentic_governance.retrieval.server_config import dump_config as dump_server_config
from fgentic_governance.retrieval.server_config import server_config

__all__ = ["KubernetesFormError", "RenderError", "RenderOptions", "Rendered", "StandaloneFormError",
           "digest", "render", "validate_jwks"]

# Private members of a JWK (RFC 7518 §6): a JWKS carrying any of them is a leaked secret, and
# the Kubernetes form would copy it into a readable AgentgatewayPolicy.
_PRIVATE_JWK_MEMBERS = frozenset({"d", "p", "q", "dp", "dq", "qi", "oth", "k"})
MAX_JWKS_BYTES = 65536  # the CRD's bound on an inline JWKS
_NO_WRAP = 1 << 16  # keep each CEL expression on one line


class RenderError(ValueError):
    """The binding cannot be rendered; the message names a field, never a value."""


@dataclass(frozen=True)
class RenderOptions:
    cluster_domain: str = "cluster.local"
    standalone_hosts: Mapping[str, str] = field(default_factory=dict)
    """host:port overrides for the standalone form, keyed `projector`, `kagent`, `retrieval`
    (a standalone proxy may run outside the cluster)."""
    appservice: AppserviceRegistry = EMPTY
    """The appservice-namespace registry (--appservice-namespaces) the projector classifies
    senders by: the same the webhook, memory API and control API refuse by."""


@dataclass(frozen=True)
class Rendered:
    binding: n.BindingId
    objects: list[dict[str, Any]]
    """Kubernetes objects in apply order, labelled and annotated."""
    standalone: dict[str, Any]
    unenforceable: tuple[str, ...]
    deviations: tuple[str, ...]
    digest: str

    @property
    def projector_config(self) -> str:
        """The projector's configuration file (the rendered ConfigMap's one entry)."""
        for obj in self.objects:
            if obj["kind"] == "ConfigMap" and n.PROJECTOR_CONFIG_KEY in obj["data"]:
                return str(obj["data"][n.PROJECTOR_CONFIG_KEY])
        raise LookupError("no projector ConfigMap")  # render() always emits one

    def standalone_yaml(self) -> str:
        reasons = {code: UNENFORCEABLE[code] for code in self.unenforceable}
        departures = {code: DEVIATIONS[code] for code in self.deviations}
        body = yaml.safe_dump(self.standalone, sort_keys=False, width=_NO_WRAP)
        return header_comment(self.binding, reasons, departures,
                              digest(self.standalone)) + body

    def kubernetes_yaml(self) -> str:
        head = (f"# RetrievalBinding {self.binding.namespace}/{self.binding.name}: "
                f"{len(self.objects)} objects, digest {self.digest}\n")
        return head + yaml.safe_dump_all(self.objects, sort_keys=False, width=_NO_WRAP,
                                         explicit_start=True)


def digest(value: Any) -> str:
    return hashlib.sha256(rfc8785.dumps(value)).hexdigest()


def validate_jwks(text: str) -> str:
    """The JWKS as compact JSON, or RenderError: not JSON, no `keys` list, or a private key."""
    if len(text.encode()) > MAX_JWKS_BYTES:
        raise RenderError("jwks exceeds 65536 bytes")
    try:
        doc = json.loads(text)
    except ValueError:
        raise RenderError("jwks is not JSON") from None
    keys = doc.get("keys") if isinstance(doc, dict) else None
    if not isinstance(keys, list) or not all(isinstance(k, dict) for k in keys):
        raise RenderError("jwks has no list of keys")
    if any(_PRIVATE_JWK_MEMBERS & k.keys() for k in keys):
        raise RenderError("jwks contains private or symmetric key material")
    return json.dumps(doc, separators=(",", ":"), sort_keys=True)


def _stamp(obj: dict[str, Any], binding: n.BindingId, codes: tuple[str, ...]) -> dict[str, Any]:
    meta = obj["metadata"]
    meta["labels"] = {n.BINDING_LABEL: binding.label, n.MANAGED_BY[0]: n.MANAGED_BY[1]}
    meta["annotations"] = {n.UNENFORCEABLE_ANNOTATION: ",".join(codes)}
    return obj


def _projector_config_map(binding: n.BindingId, spec: RetrievalBindingSpec,
                          namespace: str, appservice: AppserviceRegistry) -> dict[str, Any]:
    """The projector's configuration for this binding, to mount at `--config` (docs/projector.md).
    It holds names, issuers and the partner registry: no credential and no content."""
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": binding.object_name(n.PROJECTOR_CONFIG_SUFFIX),
                         "namespace": namespace},
            "data": {n.PROJECTOR_CONFIG_KEY: dump_config(projector_config(spec, appservice))}}


def _server_config_map(binding: n.BindingId, spec: RetrievalBindingSpec) -> dict[str, Any]:
    """The retrieval server's configuration (docs/retrieval-server.md), beside the server:
    the Agent, tool and path it enforces are the binding's. Names only."""
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": binding.object_name(n.SERVER_CONFIG_SUFFIX),
                         "namespace": spec.retrieval_service.namespace},
            "data": {n.SERVER_CONFIG_KEY: dump_server_config(server_config(spec))}}


def render(namespace: str, name: str, spec: RetrievalBindingSpec, *, jwks: str | None = None,
           options: RenderOptions | None = None) -> Rendered:
    """Both forms of one binding. ``jwks`` is the public route's key set (None: an empty set,
    so the Kubernetes form rejects every token until it is supplied)."""
    opts = options or RenderOptions()
    binding = n.BindingId(namespace, name)
    rules = gateway_rules(spec, validate_jwks(jwks) if jwks is not None else None)
    try:
        objects = [*network_policies(binding, spec),
                   _projector_config_map(binding, spec, rules.proxy_namespace, opts.appservice),
                   _server_config_map(binding, spec),
                   *gateway_objects(binding, rules, opts.cluster_domain)]
        standalone = standalone_config(binding, rules, opts.cluster_domain,
                                       opts.standalone_hosts)
    except (KubernetesFormError, StandaloneFormError, ProjectorConfigError) as exc:
        raise RenderError(str(exc)) from None
    objects = [_stamp(obj, binding, rules.unenforceable) for obj in objects]
    return Rendered(binding, objects, standalone, rules.unenforceable, rules.deviations,
                    digest(objects))
