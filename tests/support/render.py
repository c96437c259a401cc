"""The example RetrievalBinding and its rendering (ADR 0017), with a fixed partner JWKS."""

from __future__ import annotations

import json
import subprocess
import uuid
from typing import Any

from fgentic_governance.api.retrieval import RetrievalBindingSpec
from fgentic_governance.retrieval.render.binding import Rendered, render
from tests.support.objects import example

JWKS = json.dumps({"keys": [{"kty": "EC", "crv": "P-256", "kid": "k1", "use": "sig",
                             "x": "f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU",
                             "y": "x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"}]})


def binding(**changes: Any) -> tuple[str, str, RetrievalBindingSpec]:
    """(namespace, name, spec) of the example binding with ``changes`` to its spec."""
    doc = example("RetrievalBinding")
    doc["spec"].update(changes)
    return (doc["metadata"]["namespace"], doc["metadata"]["name"],
            RetrievalBindingSpec.model_validate(doc["spec"]))


def rendered(**changes: Any) -> Rendered:
    namespace, name, spec = binding(**changes)
    return render(namespace, name, spec, jwks=JWKS)


class Env:
    """One test's namespaces: the binding and proxy in `ns`, retrieval pods in `retrieval`."""

    def __init__(self) -> None:
        suffix = uuid.uuid4().hex[:8]
        self.ns = f"rbop-{suffix}"
        self.retrieval = f"rbop-retrieval-{suffix}"
        self.operator: subprocess.Popen[bytes] | None = None

    def binding(self, name: str, **changes: Any) -> dict[str, Any]:
        obj = example("RetrievalBinding")
        obj["metadata"] = {"name": name, "namespace": self.ns}
        spec = obj["spec"]
        spec["agent"]["namespace"] = self.ns  # the Agent's pods get a NetworkPolicy there
        spec["proxy"]["namespace"] = self.ns
        spec["peers"]["embeddings"]["namespace"] = self.ns
        spec["retrievalService"]["namespace"] = self.retrieval
        spec["peers"]["database"]["namespace"] = self.retrieval
        spec["peers"]["observability"] = []
        spec.update(changes)
        return obj
