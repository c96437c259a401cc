"""CRD generation: structural translation, bounds, and the drift check."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from fgentic_devenv import paths
from fgentic_governance import cli
from fgentic_governance.api import KINDS, crdgen


def _walk(node: Any) -> list[dict[str, Any]]:
    out = []
    if isinstance(node, dict):
        out.append(node)
        for value in node.values():
            out += _walk(value)
    elif isinstance(node, list):
        for value in node:
            out += _walk(value)
    return out


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.kind)
def test_schema_is_structural(kind: crdgen.CustomResource) -> None:
    schema = crdgen.openapi_schema(kind)
    for node in _walk(schema):
        assert not {"$ref", "$defs", "anyOf", "allOf", "title", "propertyNames"} & node.keys()
    for node in _walk(schema["properties"]):
        if "properties" in node or "enum" in node or "maxLength" in node:
            assert "type" in node, node


def test_committed_crds_match_models() -> None:
    assert crdgen.drift(paths.crd_dirs()) == []


def test_drift_check_catches_edits_extra_and_missing_files(tmp_path: Path) -> None:
    crdgen.write([tmp_path])
    assert cli.main(["crds", "--check", "--output", str(tmp_path)]) == 0
    target = tmp_path / "governance.fgentic.dev_memoryscopes.yaml"
    target.write_text(target.read_text().replace("maximum: 7", "maximum: 30"))
    (tmp_path / "governance.fgentic.dev_rogue.yaml").write_text("{}\n")
    (tmp_path / "governance.fgentic.dev_consentrecords.yaml").unlink()
    problems = crdgen.drift([tmp_path])
    assert len(problems) == 3
    assert cli.main(["crds", "--check", "--output", str(tmp_path)]) == 1


def test_unbounded_strings_and_lists_are_reported() -> None:
    node = {"type": "object", "properties": {
        "free": {"type": "string"},
        "items": {"type": "array", "items": {"type": "string", "maxLength": 3}},
        "map": {"type": "object", "additionalProperties": {"type": "string", "maxLength": 1}},
        "ok": {"type": "string", "enum": ["a"]},
    }}
    assert crdgen.check_bounded(node) == [".free", ".items", ".map"]


def test_optional_and_nested_defaults_translate() -> None:
    schema = crdgen.openapi_schema(KINDS[0])
    spec = schema["properties"]["spec"]
    assert spec["properties"]["policy"]["default"] == {}
    assert spec["properties"]["policy"]["properties"]["entryCap"]["default"] == 100
    status = schema["properties"]["status"]
    assert all("default" not in n for n in _walk(status))
    assert "hardExpiry" in status["properties"]
    assert status["properties"]["hardExpiry"]["format"] == "date-time"


def test_label_key_constraints_become_cel() -> None:
    binding = next(k for k in KINDS if k.kind == "RetrievalBinding")
    selector = crdgen.openapi_schema(binding)["properties"]["spec"]["properties"][
        "retrievalService"]["properties"]["selector"]
    rules = [r["rule"] for r in selector["x-kubernetes-validations"]]
    assert any("k.matches(" in r for r in rules)
    assert selector["maxProperties"] == 16


def test_crd_files_parse_and_name_their_kinds() -> None:
    for name, text in crdgen.render_all().items():
        doc = yaml.safe_load(text)
        assert name == f"{doc['spec']['group']}_{doc['spec']['names']['plural']}.yaml"
        version = doc["spec"]["versions"][0]
        assert version["subresources"] == {"status": {}}
        assert doc["spec"]["names"]["categories"] == ["fgentic"]
        assert version["additionalPrinterColumns"]
