"""Webhook metrics: decisions by bounded reason code, and review latency. No object names."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

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
AUDIT_VIOLATIONS = Gauge(
    "fgentic_admission_audit_violations",
    "Existing kagent Agents violating the policy at the last audit, by reason code.",
    ["reason"],
)
AUDIT_RUNS = Counter("fgentic_admission_audit_runs_total", "Completed audit scans.")
