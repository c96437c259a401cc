"""Content-free views of RetrievalBindings and MemoryScopes, as the policy reads them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from fgentic_governance.admission.policy import BindingView, PolicyState, ScopeView
from fgentic_governance.api import kagent
from fgentic_governance.schema_version import SCHEMA_VERSION


def _conditions(obj: Mapping[str, Any]) -> dict[str, str]:
    status = obj.get("status") or {}
    return {str(c.get("type")): str(c.get("status")) for c in status.get("conditions") or []}


def binding_view(obj: Mapping[str, Any]) -> BindingView:
    meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    agent, mcp = spec.get("agent") or {}, spec.get("mcpServer") or {}
    active = not meta.get("deletionTimestamp") and _conditions(obj).get("Conflict") != "True"
    return BindingView(
        namespace=str(meta.get("namespace", "")), name=str(meta.get("name", "")),
        agent=(str(agent.get("namespace", "")), str(agent.get("name", ""))),
        server=(str(mcp.get("apiGroup", kagent.GROUP)),
                str(mcp.get("kind", kagent.REMOTE_MCP_SERVER.kind)),
                str(mcp.get("namespace", "")), str(mcp.get("name", ""))),
        tool=str(mcp.get("tool", "")), active=active)


def scope_view(obj: Mapping[str, Any]) -> ScopeView:
    meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    status, agent = obj.get("status") or {}, spec.get("agent") or {}
    conditions = _conditions(obj)
    gates = (
        status.get("storeSchemaVersion") == SCHEMA_VERSION
        and conditions.get("StoreReady") == "True"
        and conditions.get("ConsentGated") == "True"
        and status.get("observedGeneration") == meta.get("generation")
        and not meta.get("deletionTimestamp")
    )
    retention = (spec.get("policy") or {}).get("maxRetentionDays", 7)
    return ScopeView(
        namespace=str(meta.get("namespace", "")), name=str(meta.get("name", "")),
        agent=(str(agent.get("namespace", "")), str(agent.get("name", ""))),
        profile=str(spec.get("profile", "")),
        max_retention_days=int(retention) if isinstance(retention, int) else 0,
        gates_hold=bool(gates))


def build_state(bindings: Iterable[Mapping[str, Any]],
                scopes: Iterable[Mapping[str, Any]]) -> PolicyState:
    by_agent: dict[tuple[str, str], list[BindingView]] = {}
    for obj in bindings:
        view = binding_view(obj)
        by_agent.setdefault(view.agent, []).append(view)
    scopes_by_agent: dict[tuple[str, str], list[ScopeView]] = {}
    for obj in scopes:
        scope = scope_view(obj)
        scopes_by_agent.setdefault(scope.agent, []).append(scope)
    return PolicyState(bindings=by_agent, scopes=scopes_by_agent)
