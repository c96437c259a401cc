"""`kubectl explain` has a description for every field, and the CRD reference page is generated.

Every property of every generated CRD version (spec and status, recursively, array items and
map values included) carries a non-empty description taken from the models, so does each
kind's top-level schema, and docs/crd-reference.md is exactly what the models render.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from fgentic_devenv import paths
from fgentic_governance import cli
from fgentic_governance.api import KINDS, crdgen, crdref

CRDS = crdgen.render_all()


def _undescribed(node: dict[str, Any], path: str) -> Iterator[str]:
    """Paths below ``node`` (itself excluded) whose schema has no description."""
    children = [(f"{path}.{name}", child) for name, child in node.get("properties", {}).items()]
    if isinstance(node.get("items"), dict):
        children.append((f"{path}[]", node["items"]))
    if isinstance(node.get("additionalProperties"), dict):
        children.append((f"{path}{{}}", node["additionalProperties"]))
    for child_path, child in children:
        if not str(child.get("description", "")).strip():
            yield child_path
        yield from _undescribed(child, child_path)


def _versions(text: str) -> list[tuple[str, dict[str, Any]]]:
    doc = yaml.safe_load(text)
    return [(v["name"], v["schema"]["openAPIV3Schema"]) for v in doc["spec"]["versions"]]


@pytest.mark.parametrize("name", sorted(CRDS))
def test_every_spec_and_status_field_has_a_description(name: str) -> None:
    for version, schema in _versions(CRDS[name]):
        for part in ("spec", "status"):
            node = schema["properties"][part]
            assert str(node.get("description", "")).strip(), (version, part)
            assert list(_undescribed(node, f".{part}")) == [], (version, part)


@pytest.mark.parametrize("name", sorted(CRDS))
def test_every_kind_has_a_description(name: str) -> None:
    kind = yaml.safe_load(CRDS[name])["spec"]["names"]["kind"]
    for _, schema in _versions(CRDS[name]):
        description = str(schema.get("description", "")).strip()
        assert description and description != kind


def test_the_walk_finds_a_missing_description() -> None:
    node = {"type": "object", "properties": {
        "a": {"type": "string", "description": "A."},
        "b": {"type": "array", "description": "B.", "items": {"type": "object", "properties": {
            "c": {"type": "integer"}}}},
        "d": {"type": "object", "description": "D.", "additionalProperties": {"type": "string"}},
    }}
    assert list(_undescribed(node, ".spec")) == [".spec.b[]", ".spec.b[].c", ".spec.d{}"]


def test_docstrings_become_one_line_paragraphs() -> None:
    assert crdgen.prose("  One\n  line.\n\n  Two\n   lines.\n") == "One line.\n\nTwo lines."
    for kind in KINDS:
        assert "\n" not in crdgen.kind_description(kind)
    for text in CRDS.values():
        for _, schema in _versions(text):
            for part in ("spec", "status"):
                for field, node, _ in crdref.fields(schema["properties"][part], part, False):
                    description = str(node.get("description", ""))
                    assert description == crdgen.prose(description), field


def test_reference_page_matches_the_models() -> None:
    assert crdref.drift(paths.repo_root() / crdref.PATH) == []


def test_reference_page_lists_every_field_of_every_kind() -> None:
    page = crdref.render()
    for kind in KINDS:
        assert f"## {kind.kind}\n" in page
        schema = crdgen.openapi_schema(kind)
        for part in ("spec", "status"):
            for field, _, _ in crdref.fields(schema["properties"][part], part, False):
                assert f"| `{field}` |" in page, field


def test_reference_drift_is_caught_by_crds_check(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert cli.main(["crds"]) == 0
    page = tmp_path / crdref.PATH
    assert page.read_text() == crdref.render()
    assert cli.main(["crds", "--check"]) == 0
    page.write_text(page.read_text().replace("| yes |", "| no |", 1))
    assert crdref.drift(page) == [f"{page}: differs from the models"]
    assert cli.main(["crds", "--check"]) == 1
    page.unlink()
    assert crdref.drift(page) == [f"{page}: missing"]
    assert cli.main(["crds", "--check"]) == 1
