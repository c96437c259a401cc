"""Small helpers shared by tests (no fixtures here: those live in conftest.py)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
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
