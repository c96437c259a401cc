"""atheris harness: the pure admission policy on Agent-like objects.

`agent_denials` must return Denials and never raise; every code is from the bounded
AdmissionCode enum
and every message is "CODE at PATH" with an optional "(NAME)" where NAME is a header name the
object carries (normalized) or the fixed placeholder. Run:

    .venv/bin/python fuzz/fuzz_policy.py -runs=100000
"""

from __future__ import annotations

import re
import sys
from typing import Any

import atheris

with atheris.instrument_imports(include=["_common", "fgentic_governance.admission"]):
    import _common  # first: it puts a plain checkout on sys.path

    from fgentic_governance.admission.policy import (
        AdmissionCode,
        BindingView,
        Denial,
        PolicyState,
        ScopeView,
        agent_denials,
        scope_denials,
    )

SERVER = ("kagent.dev", "RemoteMCPServer", "ns", "knowledge")
STATE = PolicyState(
    bindings={("ns", "retriever"): [BindingView("ns", "b", ("ns", "retriever"), SERVER,
                                                "search")]},
    scopes={("ns", "mem"): [ScopeView("ns", "s", ("ns", "mem"), "demo", 3, True)]},
)
KEYS = ["apiVersion", "metadata", "name", "namespace", "spec", "declarative", "tools",
        "mcpServer", "apiGroup", "kind", "toolNames", "allowedHeaders", "headersFrom",
        "requireApproval", "memory", "ttlDays", "valueFrom", "subject", "mxid", "originKind"]
_PATH = (r"spec(\.declarative(\.tools\[\d+\](\.mcpServer(\.allowedHeaders\[\d+\]"
         r"|\.requireApproval|\.toolNames)|\.headersFrom\[\d+\])|\.memory(\.ttlDays)?)"
         r"|\.memory(\.ttlDays)?|\.subject)?")
_CODES = "|".join(c.value for c in AdmissionCode)
_MESSAGE = re.compile(rf"^({_CODES}) at {_PATH}( \((<invalid header name>|[^()\s]{{1,64}})\))?$")


def _agent(fdp: atheris.FuzzedDataProvider) -> dict[str, Any]:
    """Mostly the right skeleton, with fuzzer-built values where they matter."""
    names = ["x-fgentic-identity", "authorization", "x-user-id", "X-Api-Key"]
    headers = [names[fdp.ConsumeIntInRange(0, 3)] if fdp.ConsumeBool()
               else fdp.ConsumeUnicodeNoSurrogates(fdp.ConsumeIntInRange(0, 40))
               for _ in range(fdp.ConsumeIntInRange(0, 3))]
    mcp: dict[str, Any] = {"apiGroup": "kagent.dev", "kind": "RemoteMCPServer",
                           "namespace": "ns", "name": "knowledge", "toolNames": ["search"],
                           "allowedHeaders": headers}
    tool: dict[str, Any] = {"type": "McpServer", "mcpServer": mcp,
                            "headersFrom": [{"name": h} for h in headers]}
    if fdp.ConsumeBool():
        mcp[KEYS[fdp.ConsumeIntInRange(0, len(KEYS) - 1)]] = _common.json_value(fdp, KEYS)
    if fdp.ConsumeBool():
        tool[KEYS[fdp.ConsumeIntInRange(0, len(KEYS) - 1)]] = _common.json_value(fdp, KEYS)
    spec: dict[str, Any] = {"declarative": {"tools": [tool]}}
    if fdp.ConsumeBool():
        spec["declarative"]["memory"] = _common.json_value(fdp, KEYS)
    name = ["retriever", "mem", "other"][fdp.ConsumeIntInRange(0, 2)]
    return {"apiVersion": "kagent.dev/v1alpha2" if fdp.ConsumeBool() else "kagent.dev/v1alpha1",
            "metadata": {"name": name, "namespace": "ns"}, "spec": spec}


def _check(denials: Any) -> None:
    if not isinstance(denials, list):
        raise AssertionError("not a list")
    for denial in denials:
        if not isinstance(denial, Denial) or not isinstance(denial.code, AdmissionCode):
            raise AssertionError("not a bounded denial")
        _common.check_message(denial.message(), _MESSAGE)


def run(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    mode = fdp.ConsumeIntInRange(0, 2)
    if mode == 0:
        _check(agent_denials(_agent(fdp), STATE))
    elif mode == 1:
        doc = _common.json_value(fdp, KEYS)
        if isinstance(doc, dict):
            _check(agent_denials(doc, STATE))
    else:
        _check(scope_denials({"spec": _common.json_value(fdp, KEYS)}, "example.org"))


def main() -> None:
    atheris.Setup(sys.argv, run)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
