"""The server's metrics: every label value comes from a closed set (guard.METHODS, the codes)."""

from __future__ import annotations

from typing import Final

from prometheus_client import Counter, Histogram

from fgentic_governance.retrievalserver.codes import Code
from fgentic_governance.retrievalserver.guard import METHODS

OTHER: Final = "other"
OK: Final = "OK"

REQUESTS: Final = Counter(
    "fgentic_knowledge_requests_total",
    "MCP requests by JSON-RPC method (closed set) and outcome (OK or a refusal code)",
    ["method", "outcome"])
TOOL_CALLS: Final = Counter(
    "fgentic_knowledge_tool_calls_total",
    "Tool calls by outcome (OK or a refusal code)", ["outcome"])
TOOL_SECONDS: Final = Histogram(
    "fgentic_knowledge_tool_call_seconds",
    "Seconds from an admitted tool call to its result (embedding and prefilter included)",
    buckets=(0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0))


def method_label(method: object) -> str:
    return method if isinstance(method, str) and method in METHODS else OTHER


def outcome(code: Code | None) -> str:
    return OK if code is None else code.value
