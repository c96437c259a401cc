"""The projector configuration: derived from a RetrievalBindingSpec, loaded strictly."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from fgentic_governance.retrieval.projector_config import (
    APPROVED,
    PUBLIC_ONLY,
    ProjectorConfigError,
    dump_config,
    load_config,
    parse_config,
    projector_config,
)
from tests.support.objects import example
from tests.support.projector import config, spec


def test_derived_from_the_example_binding() -> None:
    cfg = config()
    assert cfg.local.workload == "serviceaccount:matrix/matrix-a2a-bridge"
    assert (cfg.local.agent.namespace, cfg.local.agent.name) == ("fgentic-demo", "docs-agent")
    assert cfg.local.path == "/a2a/fgentic-demo/docs-agent"
    assert cfg.public is not None
    assert (cfg.public.issuer, cfg.public.audience, cfg.public.timeout_seconds) == (
        "https://issuer.example", "fgentic-a2a", 30)
    [partner] = cfg.public.partners
    assert (partner.azp, partner.policy_id, partner.groups) == ("org-b-a2a", "org-b", ["docs"])
    assert partner.allowed_classifications == PUBLIC_ONLY


def test_no_public_route_without_one_in_the_binding() -> None:
    assert config(publicRoute=None).public is None


def test_round_trips_through_json_and_yaml(tmp_path: Path) -> None:
    cfg = config()
    text = dump_config(cfg)
    assert parse_config(text) == cfg
    path = tmp_path / "projector.yaml"
    path.write_text(yaml.safe_dump(json.loads(text)))
    assert load_config(path) == cfg


def _public(**changes: Any) -> dict[str, Any]:
    public: dict[str, Any] = example("RetrievalBinding")["spec"]["publicRoute"]
    public.update(changes)
    return public


def test_approved_entry_becomes_the_contract_pair() -> None:
    partners = [{"azp": "a", "policyId": "org-b", "groups": ["docs"],
                 "allowedClassifications": ["approved_non_public"]}]
    cfg = config(publicRoute=_public(partners=partners))
    assert cfg.public is not None
    assert cfg.public.partners[0].allowed_classifications == APPROVED


def test_entry_above_the_ceiling_is_refused() -> None:
    partners = [{"azp": "a", "policyId": "org-b", "groups": ["docs"],
                 "allowedClassifications": ["approved_non_public", "public"]}]
    with pytest.raises(ProjectorConfigError, match="exceeds classificationCeiling"):
        config(publicRoute=_public(partners=partners), classificationCeiling="public")


def _doc(**public_changes: Any) -> dict[str, Any]:
    doc = config().wire()
    doc["public"].update(public_changes)
    return doc


@pytest.mark.parametrize(("change", "message"), [
    ({"partners": [{"azp": "a", "policyId": "p", "groups": ["g"]},
                   {"azp": "a", "policyId": "q", "groups": ["g"]}]}, "duplicate azp"),
    ({"partners": [{"azp": "a", "policyId": "p", "groups": ["g"]},
                   {"azp": "b", "policyId": "p", "groups": ["g"]}]}, "duplicate policy_id"),
    ({"partners": [{"azp": "a", "policyId": "p", "groups": ["g", "g"]}]}, "duplicate group"),
    ({"partners": [{"azp": "a", "policyId": "P", "groups": ["g"]}]}, "policyId"),
    ({"partners": [{"azp": "a", "policyId": "p", "groups": ["partner/x"]}]}, "groups"),
    ({"partners": []}, "partners"),
    ({"timeoutSeconds": 61}, "timeoutSeconds"),
    ({"timeoutSeconds": 0}, "timeoutSeconds"),
    # 300 two-byte characters: within 512 characters, beyond the contract's 512 bytes.
    ({"issuer": "https://" + "é" * 300}, "cannot be projected"),
    ({"extra": 1}, "extra"),
])
def test_invalid_registries_are_refused_at_load(change: dict[str, Any], message: str) -> None:
    with pytest.raises(ProjectorConfigError, match=message):
        parse_config(json.dumps(_doc(**change)))


@pytest.mark.parametrize("text", ["[]", "just text", "{", "version: 2\n"])
def test_unusable_documents_are_refused(text: str) -> None:
    with pytest.raises(ProjectorConfigError):
        parse_config(text)


def test_bad_appservice_regex_is_refused() -> None:
    doc = config().wire()
    doc["local"]["appserviceNamespaces"] = [{"network": "slack", "userRegex": "(@slack"}]
    with pytest.raises(ProjectorConfigError, match="regular expression"):
        parse_config(json.dumps(doc))


def test_error_messages_do_not_quote_values() -> None:
    doc = _doc(partners=[{"azp": "a", "policyId": "Secret-Policy", "groups": ["g"]}])
    with pytest.raises(ProjectorConfigError) as info:
        parse_config(json.dumps(doc))
    assert "Secret-Policy" not in str(info.value)


def test_derivation_is_pure() -> None:
    binding = spec()
    assert projector_config(binding) == projector_config(binding)
