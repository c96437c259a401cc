"""The Kubernetes form of a rendered RetrievalBinding in the real kube-apiserver with the pinned
agentgateway v1.3.1 and Gateway API v1.6.0 CRDs: every object is accepted with strict field
validation (an unknown field would fail, not be dropped) and reads back as rendered."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from kubernetes import client

from fgentic_governance.retrieval.render import ownership
from fgentic_governance.retrieval.render.binding import Rendered, render
from tests.support.objects import object_path, raw_request
from tests.support.render import JWKS, binding

pytestmark = pytest.mark.integration


def _rendered_in_fresh_namespaces(control_plane: Any, public: bool) -> Rendered:
    suffix = uuid.uuid4().hex[:6]
    spaces = {role: f"rb-{role}-{suffix}" for role in ("proxy", "retrieval", "obs")}
    for namespace in spaces.values():
        control_plane.ensure_namespace(namespace)
    changes: dict[str, Any] = {
        # The Agent's pods get their ingress NetworkPolicy in the Agent's namespace.
        "agent": {"namespace": spaces["proxy"], "name": "docs-agent"},
        "proxy": {"namespace": spaces["proxy"], "selector": {"app": "agw"}, "port": 8080},
        "retrievalService": {"namespace": spaces["retrieval"],
                             "selector": {"app": "retrieval"}, "port": 8080},
        "peers": {
            "database": {"namespace": spaces["retrieval"], "selector": {"app": "db"},
                         "port": 5432},
            "embeddings": {"namespace": spaces["proxy"], "selector": {"app": "agw"},
                           "port": 8443},
            "observability": [{"namespace": spaces["obs"], "selector": {"app": "otel"},
                               "port": 4317}]},
    }
    if not public:
        changes["publicRoute"] = None
    namespace, name, spec = binding(**changes)
    return render(spaces["proxy"], name, spec, jwks=JWKS)


@pytest.mark.parametrize("public", [True, False])
def test_kubernetes_form_is_accepted_by_the_api_server(
    control_plane: Any, k8s_client: client.ApiClient, public: bool
) -> None:
    rendered = _rendered_in_fresh_namespaces(control_plane, public)
    assert len(rendered.objects) == (15 if public else 13)
    for obj in rendered.objects:
        meta = obj["metadata"]
        created = raw_request(k8s_client, "POST",
                              object_path(obj, ownership.plural(obj), named=False), obj,
                              fieldValidation="Strict")
        body = "data" if obj["kind"] == "ConfigMap" else "spec"
        for key, value in obj[body].items():
            assert _subset(value, created[body][key]), f"{obj['kind']} {key} changed"
        assert created["metadata"]["labels"] == meta["labels"]


def test_server_side_apply_dry_run_of_the_whole_set(
    control_plane: Any, k8s_client: client.ApiClient
) -> None:
    rendered = _rendered_in_fresh_namespaces(control_plane, True)
    for obj in rendered.objects:
        raw_request(k8s_client, "PATCH", object_path(obj, ownership.plural(obj)), obj,
                    content_type="application/apply-patch+yaml", dryRun="All",
                    fieldManager="fgentic-governance", force="true", fieldValidation="Strict")


def _subset(want: Any, got: Any) -> bool:
    """``want`` is contained in ``got`` (the server may add defaults, never drop or change)."""
    if isinstance(want, dict):
        return isinstance(got, dict) and all(k in got and _subset(v, got[k])
                                              for k, v in want.items())
    if isinstance(want, list):
        return (isinstance(got, list) and len(want) == len(got)
                and all(_subset(w, g) for w, g in zip(want, got, strict=True)))
    return bool(want == got)
