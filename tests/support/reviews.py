"""Pure reviewer fixtures of the admission unit tests: a policy state with one retrieval binding
and one gated demo scope, an Agent of it, AdmissionReview requests, in-memory lookups and a
ready memory routing."""

from __future__ import annotations

from typing import Any

from fgentic_governance.admission.policy import BindingView, PolicyState, ScopeView
from fgentic_governance.admission.review import Lookups, MemoryRouting
from tests.support.objects import example

SENTINEL = "SENTINEL-c0ffee"
SERVER = ("kagent.dev", "RemoteMCPServer", "ns", "knowledge")
STATE = PolicyState(
    bindings={("ns", "retriever"): [BindingView("ns", "b", ("ns", "retriever"), SERVER, "search")]},
    scopes={("ns", "mem"): [ScopeView("ns", "s", ("ns", "mem"), "demo", 3, True)]},
)


def agent(name: str = "retriever", headers: Any = None, **mcp: Any) -> dict[str, Any]:
    doc = example("Agent")
    doc["metadata"] = {"name": name, "namespace": "ns"}
    ref = {"apiGroup": "kagent.dev", "kind": "RemoteMCPServer", "namespace": "ns",
           "name": "knowledge", "toolNames": ["search"], **mcp}
    if headers is not None:
        ref["allowedHeaders"] = headers
    doc["spec"]["declarative"]["tools"] = [{"type": "McpServer", "mcpServer": ref}]
    return doc


def review(doc: dict[str, Any], operation: str = "CREATE") -> dict[str, Any]:
    return {"request": {"uid": "u-1", "operation": operation, "object": doc}}


def lookups(cached: PolicyState | None, live: PolicyState, fail: bool = False) -> Lookups:
    async def live_state() -> PolicyState:
        if fail:
            raise RuntimeError(SENTINEL)
        return live

    async def none(*_: Any) -> None:
        return None

    async def empty() -> list[Any]:
        return []

    async def false(_: Any) -> bool:
        return False

    return Lookups(cached_state=lambda: cached, live_state=live_state, get_scope=none,
                   list_bindings=empty, offboarding=false)


def ready_routing(agents: list[dict[str, Any]]) -> MemoryRouting:
    async def ready() -> bool:
        return True

    async def listed(_namespace: str) -> list[dict[str, Any]]:
        return agents

    return MemoryRouting("http://memory-api:8083", ready, listed)
