"""kagent's coordinates have one definition, ``api/kagent.py`` (issue 41 §6), read from source:
no other module of the shipped or the development package spells kagent's API group, its
group/version or the kinds and plurals we address. Tests keep their literals: they write objects
as kagent and the API server send them, which is the wire format the definition must match."""

from __future__ import annotations

import ast
import typing
from pathlib import Path

from fgentic_governance.api import kagent
from fgentic_governance.api.retrieval import McpServerRef

REPO = Path(__file__).resolve().parents[2]
PACKAGES = (REPO / "src" / "fgentic_governance", REPO / "devtools" / "fgentic_devenv")
HOME = REPO / "src" / "fgentic_governance" / "api" / "kagent.py"
# A typing.Literal cannot name a constant: the CRD's field is compared below instead.
LITERAL_FIELDS = REPO / "src" / "fgentic_governance" / "api" / "retrieval.py"
# "Agent" and "agents" also name our own columns, enum values and webhook routes: not listed.
SPELLINGS = frozenset({
    "kagent.dev", "kagent.dev/v1alpha1", "kagent.dev/v1alpha2", "ModelConfig", "modelconfigs",
    "RemoteMCPServer", "remotemcpservers"})


def _spelled(path: Path) -> list[str]:
    return [f"{path.relative_to(REPO)}:{node.lineno} {node.value!r}"
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Constant) and node.value in SPELLINGS]


def test_kagents_coordinates_are_spelled_only_in_their_home() -> None:
    elsewhere = [hit for package in PACKAGES for path in sorted(package.rglob("*.py"))
                 if path not in (HOME, LITERAL_FIELDS) for hit in _spelled(path)]
    assert elsewhere == [], "import them from fgentic_governance.api.kagent"


def test_the_bindings_server_reference_is_kagents_definition() -> None:
    fields = McpServerRef.model_fields
    assert typing.get_args(fields["api_group"].annotation) == (kagent.GROUP,)
    assert typing.get_args(fields["kind"].annotation) == (kagent.REMOTE_MCP_SERVER.kind,)
    assert (kagent.API_VERSION, kagent.AGENT.plural) == ("kagent.dev/v1alpha2", "agents")
