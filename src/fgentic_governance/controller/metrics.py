"""Operator metrics: aggregate counters whose labels are bounded enums only.

No label may carry a principal, a room, an Agent name or content.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

SCOPE_TRANSITIONS = Counter(
    "fgentic_scope_reconciles_total",
    "MemoryScope reconciliations by resulting phase and reason code.",
    ["phase", "reason"],
)
BINDING_RECONCILES = Counter(
    "fgentic_retrieval_binding_reconciles_total",
    "RetrievalBinding reconciliations by Ready and its reason code.",
    ["ready", "reason"],
)
SCOPE_STATUS_WRITES = Counter(
    "fgentic_scope_status_writes_total",
    "MemoryScope reconciliations that wrote the status, or found it already as computed.",
    ["result"],
)
SCOPE_SWEEPS = Counter(
    "fgentic_scope_sweeps_total",
    "Rounds of the MemoryScope sweep (one paged read of the store per round), by result "
    "(ok, failed); a round that finds every status as recorded writes nothing.",
    ["result"],
)
SCOPE_SWEEP_POKES = Counter(
    "fgentic_scope_sweep_pokes_total",
    "MemoryScopes the sweep found differing from the store (or from the store-wide conditions) "
    "and annotated, so that their reconcile runs.",
)
RECONCILE_SLOT_TIMEOUTS = Counter(
    "fgentic_reconcile_slot_timeouts_total",
    "ConsentRecord reconciliations that found no reconcile slot in time and were retried later "
    "without writing anything (the operator is overloaded, not the store).",
)
QUEUE_DEPTH = Gauge(
    "fgentic_workqueue_depth",
    "Keys queued in the operator's work queue and not yet started, by queue (memoryscopes).",
    ["queue"],
)
QUEUE_RUNNING = Gauge(
    "fgentic_workqueue_running",
    "Runs of the work queue in progress, by queue: at most its workers (the reconcile slots).",
    ["queue"],
)
QUEUE_RETRIES = Counter(
    "fgentic_workqueue_retries_total",
    "Failed runs of the work queue scheduled again after the handlers' backoff, by queue.",
    ["queue"],
)
QUEUE_WAIT = Histogram(
    "fgentic_workqueue_queue_duration_seconds",
    "Time a key waited in the work queue between being queued and its run starting, by queue.",
    ["queue"],
    buckets=(0.01, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0),
)
OFFBOARDING_STAGE = Histogram(
    "fgentic_offboarding_stage_seconds",
    "Time of each stage of a PrincipalOffboarding run on the erasure lane, by stage: erasure "
    "(every scope disabled, enumerated, erased and verified in the store) and ready_write (the "
    "ReadyForDeactivation status written to the API server).",
    ["stage"],
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0),
)
LEADING = Gauge(
    "fgentic_operator_leading",
    "1 while this operator replica holds the leader Lease and runs the handlers, else 0.",
)
CLEANUP_FAILURES = Counter(
    "fgentic_store_cleanup_failures_total",
    "Runs of the expired-memory cleanup (physical deletion, ADR 0023 §27) that failed, by reason "
    "code; a failed run is retried every store check until one succeeds.",
    ["reason"],
)
CLEANUP_LAST_SUCCESS = Gauge(
    "fgentic_store_cleanup_last_success_timestamp_seconds",
    "Unix time of the last successful expired-memory cleanup on this replica (0: none yet).",
)
FLOOR_RECONCILES = Counter(
    "fgentic_posture_floor_reconciles_total",
    "MemoryPostureFloor reconciliations by resulting phase and reason code.",
    ["phase", "reason"],
)
FLOOR_PURGE_SCOPES = Counter(
    "fgentic_posture_floor_purge_scopes_total",
    "Scopes a MemoryPostureFloor's purge erased, by result (Verified, Failed) and reason code.",
    ["result", "reason"],
)
