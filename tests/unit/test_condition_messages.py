"""A condition's message fits the CRDs' maxLength: the API server refuses a longer status,
and the operator then writes none at all (KIND_NOT_SERVED's first sentence was 270 bytes)."""

from __future__ import annotations

import itertools

import yaml

from fgentic_governance.controller.messages import MESSAGE_LIMIT, MESSAGES, kinds_not_served
from fgentic_governance.retrieval.render.names import RENDERED_KINDS
from tests.support.objects import ROOT


def test_the_limit_is_the_crds_condition_message_max_length() -> None:
    crd = yaml.safe_load((ROOT / "crds" / "governance.fgentic.dev_retrievalbindings.yaml")
                         .read_text())
    status = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
    message = status["properties"]["conditions"]["items"]["properties"]["message"]
    assert message["maxLength"] == MESSAGE_LIMIT


def test_every_message_fits() -> None:
    assert all(len(text) <= MESSAGE_LIMIT for text in MESSAGES.values())
    for count in range(1, len(RENDERED_KINDS) + 1):
        for kinds in itertools.combinations(RENDERED_KINDS, count):
            text = kinds_not_served(kinds)
            assert len(text) <= MESSAGE_LIMIT
            assert all(kind in text for _, kind in kinds)


def test_the_gateway_kinds_are_named_with_their_api_versions() -> None:
    gateway = [k for k in RENDERED_KINDS if k[0] not in ("v1", "networking.k8s.io/v1")]
    assert kinds_not_served(gateway) == (
        "Not served by the API server: AgentgatewayBackend (agentgateway.dev/v1alpha1), "
        "HTTPRoute (gateway.networking.k8s.io/v1), AgentgatewayPolicy "
        "(agentgateway.dev/v1alpha1). Install their CRDs (docs/install.md).")
