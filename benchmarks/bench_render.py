"""Time to render one RetrievalBinding (both forms plus the JCS digest), per binding.

Prints median and p99 of `render()` for the example binding and for a larger one (64 partners,
8 observability sinks: the model's bounds), next to a baseline measured in the same run: a
deep copy of the rendered Kubernetes object set, the floor of producing that many dicts. Also
the cost of the YAML text of each form, which the CLI adds. Reports figures; asserts nothing.

    .venv/bin/python -m benchmarks.bench_render [--rounds N]
"""

from __future__ import annotations

import argparse
import copy
import json
from typing import Any

from benchmarks.common import Table, banner, command_line, machine, time_sync
from fgentic_governance.api.retrieval import RetrievalBindingSpec
from fgentic_governance.retrieval.render.binding import render
from tests.support.objects import example

JWKS = json.dumps({"keys": [{"kty": "EC", "crv": "P-256", "kid": "k1",
                             "x": "f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU",
                             "y": "x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"}]})


def _spec(large: bool) -> RetrievalBindingSpec:
    spec: dict[str, Any] = example("RetrievalBinding")["spec"]
    if large:
        spec["publicRoute"]["partners"] = [
            {"azp": f"partner-{i:02d}-a2a", "policyId": f"p{i:02d}", "groups": ["docs"]}
            for i in range(64)]
        spec["peers"]["observability"] = [
            {"namespace": f"obs-{i}", "selector": {"app": "otel"}, "port": 4317}
            for i in range(8)]
    return RetrievalBindingSpec.model_validate(spec)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=2000)
    args = parser.parse_args()
    banner("RetrievalBinding renderer")
    print(f"{machine()}\n{command_line()}")
    table = Table("render(): NetworkPolicies + both gateway forms + digest, per binding")
    for label, large in (("example binding", False), ("64 partners, 8 sinks", True)):
        spec = _spec(large)
        rendered = render("fgentic-demo", "docs-agent-retrieval", spec, jwks=JWKS)
        baseline = time_sync(lambda r=rendered: copy.deepcopy(r.objects), args.rounds)
        samples = time_sync(
            lambda s=spec: render("fgentic-demo", "docs-agent-retrieval", s, jwks=JWKS),
            args.rounds)
        table.add(f"{label}: render", samples, baseline=baseline)
        table.add(f"{label}: + YAML of both forms", time_sync(
            lambda r=rendered: (r.kubernetes_yaml(), r.standalone_yaml()), args.rounds // 4))
    table.print()
    print("baseline: copy.deepcopy of the same rendered object set")


if __name__ == "__main__":
    main()
