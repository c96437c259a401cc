"""Fuzzing the admission policy with arbitrary Agent-like objects.

`agent_denials` must return a list of Denials and never raise; every code is from the bounded
AdmissionCode enum; a message is exactly "CODE at PATH" or "CODE at PATH (NAME)" where PATH is
built from
the policy's own field names and indices and NAME is a header name that appears in the object
(normalized) or the fixed placeholder. SENTINEL is placed in every non-name position (tool
names, secret refs, memory config, server refs, metadata) and must never surface.
"""

from __future__ import annotations

import re
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fgentic_governance.admission.policy import (
    AdmissionCode,
    BindingView,
    Denial,
    PolicyState,
    ScopeView,
    agent_denials,
    binding_denials,
    consent_denials,
    header_denials,
    scope_denials,
)

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SENTINEL = "qqsentinelqq"
SERVER = ("kagent.dev", "RemoteMCPServer", "ns", "knowledge")
STATE = PolicyState(
    bindings={("ns", "retriever"): [BindingView("ns", "b", ("ns", "retriever"), SERVER,
                                                "search")]},
    scopes={("ns", "mem"): [ScopeView("ns", "s", ("ns", "mem"), "demo", 3, True)]},
)
_PATH = re.compile(
    r"spec(\.declarative(\.tools\[\d+\](\.mcpServer(\.allowedHeaders\[\d+\]|\.requireApproval"
    r"|\.toolNames)|\.headersFrom\[\d+\])|\.memory(\.ttlDays)?)|\.memory(\.ttlDays)?"
    r"|\.subject|\.agent|\.scopeRef\.name|\.decision)?")
_MESSAGE = re.compile(rf"^([A-Z_]+) at ({_PATH.pattern})( \((?P<name>[^()]+)\))?$")

CARRIER_VARIANTS = ["x-fgentic-identity", "X-Fgentic-Identity", " X-FGENTIC-IDENTITY\t",
                    "x-fgentic-identit\u0443", "\uff58-fgentic-identity",
                    "x-fgentic-\u200didentity",
                    "x-fgentic-identity\u3000", "x-fgentic-room-context", "authorization",
                    "x-user-id", "X-User-Id ", "cookie", "*", "", "x-fg\u0435ntic-identity"]
HEADER_NAME = st.sampled_from(CARRIER_VARIANTS) | st.text(max_size=70)
# Any JSON-like value, tagged so an echo is visible.
LEAF = (st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
        | st.text(max_size=12).map(lambda s: SENTINEL + s))
JSON = st.recursive(LEAF, lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(st.text(max_size=8), inner, max_size=3), max_leaves=8)


def names_in(doc: Any) -> set[str]:
    """Every normalized header name the object carries (what a message may echo)."""
    found: set[str] = {"x-fgentic-identity"}
    tools = (((doc.get("spec") or {}) if isinstance(doc, dict) else {}) or {})
    if not isinstance(tools, dict):
        return found
    declarative = tools.get("declarative")
    items = declarative.get("tools") if isinstance(declarative, dict) else None
    for tool in items if isinstance(items, list) else []:
        if not isinstance(tool, dict):
            continue
        mcp = tool.get("mcpServer")
        if isinstance(mcp, dict) and isinstance(mcp.get("allowedHeaders"), list | str | dict):
            found |= {str(h).strip().lower() for h in mcp["allowedHeaders"]}
        entries = tool.get("headersFrom")
        if isinstance(entries, list | dict | str):
            for entry in entries:
                if isinstance(entry, dict):
                    found.add(str(entry.get("name", "")).strip().lower())
    return found


@st.composite
def tools(draw: st.DrawFn) -> Any:
    mcp: dict[str, Any] = {
        "apiGroup": draw(st.sampled_from(["kagent.dev", SENTINEL])),
        "kind": draw(st.sampled_from(["RemoteMCPServer", SENTINEL])),
        "namespace": draw(st.sampled_from(["ns", "", SENTINEL])),
        "name": draw(st.sampled_from(["knowledge", SENTINEL])),
        "toolNames": draw(st.lists(st.sampled_from(["search", SENTINEL]), max_size=2)),
    }
    if draw(st.booleans()):
        mcp["allowedHeaders"] = draw(st.lists(HEADER_NAME, max_size=3))
    if draw(st.booleans()):
        mcp["requireApproval"] = draw(st.lists(st.sampled_from(["search", SENTINEL]),
                                               max_size=2))
    tool: dict[str, Any] = {"type": "McpServer", "mcpServer": mcp}
    if draw(st.booleans()):
        tool["headersFrom"] = draw(st.lists(st.builds(
            lambda n, v: {"name": n, "valueFrom": v}, HEADER_NAME, JSON), max_size=3))
    # Occasionally break the shape anywhere.
    if draw(st.integers(0, 5)) == 0:
        key = draw(st.sampled_from(["mcpServer", "headersFrom", "type"]))
        tool[key] = draw(JSON)
    if draw(st.integers(0, 5)) == 0:
        key = draw(st.sampled_from(sorted(mcp)))
        mcp[key] = draw(JSON)
    return tool


@st.composite
def agents(draw: st.DrawFn) -> dict[str, Any]:
    declarative: dict[str, Any] = {"tools": draw(st.lists(tools(), max_size=3))}
    if draw(st.booleans()):
        declarative["memory"] = draw(st.fixed_dictionaries(
            {"modelConfig": st.just(SENTINEL)},
            optional={"ttlDays": st.integers(-2, 9) | JSON}))
    doc: dict[str, Any] = {
        "apiVersion": draw(st.sampled_from(["kagent.dev/v1alpha2", "kagent.dev/v1alpha1",
                                            SENTINEL])),
        "kind": "Agent",
        "metadata": {"name": draw(st.sampled_from(["retriever", "mem", SENTINEL])),
                     "namespace": draw(st.sampled_from(["ns", SENTINEL]))},
        "spec": {"declarative": declarative, "memory": draw(st.none() | JSON)},
    }
    if draw(st.integers(0, 6)) == 0:
        doc["spec"]["declarative"] = draw(JSON)
    if draw(st.integers(0, 6)) == 0:
        doc["spec"] = draw(JSON)
    return doc


def assert_bounded(denials: list[Denial], doc: Any) -> None:
    assert isinstance(denials, list)
    allowed = names_in(doc)
    for denial in denials:
        assert isinstance(denial, Denial) and isinstance(denial.code, AdmissionCode)
        message = denial.message()
        match = _MESSAGE.fullmatch(message)
        assert match is not None, message
        assert match.group(1) == denial.code.value
        assert SENTINEL not in message.lower()
        name = match.group("name")
        if name is not None:
            assert name == "<invalid header name>" or name in allowed, name
            assert len(name) <= 64 and all(c.isalnum() or c in "-_*<> " for c in name)


@FUZZ
@given(agents())
def test_agent_policy_returns_bounded_verdicts(doc: dict[str, Any]) -> None:
    for state in (STATE, PolicyState()):
        assert_bounded(agent_denials(doc, state), doc)
    assert_bounded(header_denials(doc), doc)


@FUZZ
@given(JSON)
def test_agent_policy_survives_any_json(doc: Any) -> None:
    if isinstance(doc, dict):
        assert_bounded(agent_denials(doc, STATE), doc)


OBJ = st.fixed_dictionaries({"metadata": st.fixed_dictionaries(
    {"namespace": st.sampled_from(["ns", SENTINEL]), "name": st.sampled_from(["a", "b"])}),
    "spec": st.dictionaries(st.sampled_from(["subject", "decision", "agent", "scopeRef"]),
                            JSON | st.sampled_from(["granted", "withdrawn"]), max_size=4)})


@FUZZ
@given(OBJ, st.none() | OBJ, st.booleans(), st.lists(OBJ, max_size=3))
def test_governance_policies_return_bounded_verdicts(
    obj: dict[str, Any], other: dict[str, Any] | None, offboarding: bool,
    others: list[dict[str, Any]],
) -> None:
    assert_bounded(consent_denials(obj, other, offboarding), obj)
    assert_bounded(binding_denials(obj, others), obj)
    assert_bounded(scope_denials(obj, "example.org"), obj)
