-- fgentic_memory 0004: durable cost admission, checked and consumed atomically BEFORE any
-- summarization, embedding or retrieval work (ADR 0023 §42). Metering of what was admitted is
-- Prometheus evidence in Python; the limit itself lives here so that every runtime replica and
-- restart shares one budget.

-- Sliding one-hour ledger per scope: at most hourly_operation_ceiling units in ANY 60-minute
-- window (a fixed clock-hour window would admit twice the ceiling across an hour boundary).
CREATE TABLE fgentic_memory.op_ledger (
    scope_key text NOT NULL REFERENCES fgentic_memory.scope (scope_key) ON DELETE CASCADE,
    operation text NOT NULL
        CHECK (operation IN ('save', 'load', 'prefetch', 'summarize', 'embedding')),
    units integer NOT NULL CHECK (units BETWEEN 1 AND 60),
    at timestamptz NOT NULL
);
CREATE INDEX op_ledger_scope_at_idx ON fgentic_memory.op_ledger (scope_key, at);

-- Token bucket for explicit load/save: per sender and Agent (ADR 0023 §42), refilled at
-- explicit_per_minute per minute up to explicit_burst tokens.
CREATE TABLE fgentic_memory.rate_bucket (
    subject_mxid text NOT NULL,
    agent_namespace text NOT NULL,
    agent_name text NOT NULL,
    tokens double precision NOT NULL,
    refreshed_at timestamptz NOT NULL,
    PRIMARY KEY (subject_mxid, agent_namespace, agent_name)
);

-- Since 0025 the functions, views and triggers of this step are each defined, as they are
-- now, in one file of sql/functions/, sql/views/ or sql/triggers/, with their grants.
