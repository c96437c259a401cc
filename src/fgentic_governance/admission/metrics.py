"""Webhook metrics. Every label value comes from a closed set, never from a request:

- ``webhook``/``route``: ``agents``, ``governance``, ``pods``, ``podcheck`` or ``other``
  (``ROUTES`` + ``OTHER``);
- ``reason``: a ``policy.Code`` value or ``OK``; ``allowed``: ``true``/``false``;
- ``status``: one of ``STATUSES`` or ``other``.

A caller choosing paths, methods or bodies cannot create a series (unbounded label values
would grow every scrape and Prometheus' memory without end).
"""

from __future__ import annotations

from typing import Final

from prometheus_client import Counter, Gauge, Histogram

ROUTES: Final = ("agents", "governance", "pods", "podcheck")
OTHER: Final = "other"
STATUSES: Final = frozenset({200, 400, 404, 405, 408, 413, 500, 503})

DECISIONS = Counter(
    "fgentic_admission_decisions_total",
    "Admission decisions by webhook, verdict and reason code.",
    ["webhook", "allowed", "reason"],
)
LATENCY = Histogram(
    "fgentic_admission_review_seconds",
    "Time to decide one AdmissionReview inside the webhook.",
    ["webhook"],
    buckets=(0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0),
)
REQUESTS = Counter(
    "fgentic_admission_requests_total",
    "HTTP answers of the review port by route label and status.",
    ["route", "status"],
)
AUDIT_VIOLATIONS = Gauge(
    "fgentic_admission_audit_violations",
    "Existing kagent Agents violating the policy at the last audit, by reason code.",
    ["reason"],
)
AUDIT_RUNS = Counter("fgentic_admission_audit_runs_total", "Completed audit scans.")
CERTIFICATE_EXPIRY = Gauge(
    "fgentic_webhook_certificate_expiry_timestamp_seconds",
    "When the serving certificate this webhook replica presents expires (Unix time).",
)


def route_label(webhook: str | None) -> str:
    """``agents``, ``governance``, or ``other`` for anything else."""
    return webhook if webhook in ROUTES else OTHER


def status_label(status: int) -> str:
    return str(status) if status in STATUSES else OTHER
