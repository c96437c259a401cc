"""Prometheus counters of the content store: operation type and reason code labels only.

No label ever carries a principal, room, Agent, scope key, entry id or content: the label
values are drawn from closed enums, so series cardinality is bounded and nothing personal can
leak into a metrics backend.
"""

from __future__ import annotations

from typing import Final

from prometheus_client import Counter

from fgentic_governance.reasons import Reason

STORE_OPERATIONS: Final = Counter(
    "fgentic_memory_store_operations",
    "Content-store operations by type and outcome reason code.",
    ["operation", "reason"],
)
ADMISSIONS: Final = Counter(
    "fgentic_memory_admissions",
    "Cost admissions by memory operation type and outcome reason code.",
    ["operation", "reason"],
)
ADMITTED_UNITS: Final = Counter(
    "fgentic_memory_admitted_units",
    "Admitted memory-operation units (evidence after admission, never model tokens).",
    ["operation"],
)


def record(counter: Counter, operation: str, reason: Reason) -> None:
    counter.labels(operation=operation, reason=reason.value).inc()
