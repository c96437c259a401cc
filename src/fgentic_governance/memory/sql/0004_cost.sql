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

-- Admit p_units of p_operation in the fenced context entered with enter_scope(). Raises
-- RATE_LIMITED or COST_CEILING_REACHED; on any refusal nothing is consumed (the transaction
-- aborts). Returns the hourly units left.
CREATE FUNCTION fgentic_memory.admit(p_operation text, p_units integer, p_explicit boolean)
RETURNS integer
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_key text := current_setting('fgentic_memory.scope_key', true);
    v_gen text := current_setting('fgentic_memory.generation', true);
    v_now timestamptz := clock_timestamp();
    s fgentic_memory.scope;
    v_used bigint;
    v_tokens double precision;
    v_at timestamptz;
BEGIN
    IF p_operation IS NULL
       OR p_operation NOT IN ('save', 'load', 'prefetch', 'summarize', 'embedding')
       OR p_units IS NULL OR p_units NOT BETWEEN 1 AND 60 OR p_explicit IS NULL
    THEN
        PERFORM fgentic_memory.refuse('INVALID_SPEC');
    END IF;
    IF v_key IS NULL OR v_key = '' THEN
        PERFORM fgentic_memory.refuse('SCOPE_MISSING');
    END IF;
    -- The scope lock serializes admissions of one scope (and, by touching the row, makes a
    -- concurrent REPEATABLE READ admission fail to serialize rather than overspend).
    s := fgentic_memory.lock_scope(v_key);
    IF NOT s.enabled OR s.posture = 'fully_disabled' THEN
        PERFORM fgentic_memory.refuse('SCOPE_DISABLED');
    END IF;
    -- Summaries and saves are capture; loads, prefetch and embeddings serve recall too.
    IF p_operation IN ('save', 'summarize') AND s.posture <> 'enabled' THEN
        PERFORM fgentic_memory.refuse('CAPTURE_DISABLED');
    END IF;
    IF s.consent_generation::text IS DISTINCT FROM v_gen THEN
        PERFORM fgentic_memory.refuse('STALE_GENERATION');
    END IF;

    IF p_explicit THEN
        INSERT INTO fgentic_memory.rate_bucket AS b
               (subject_mxid, agent_namespace, agent_name, tokens, refreshed_at)
        VALUES (s.subject_mxid, s.agent_namespace, s.agent_name, s.explicit_burst, v_now)
        ON CONFLICT (subject_mxid, agent_namespace, agent_name)
        DO UPDATE SET tokens = b.tokens
        RETURNING b.tokens, b.refreshed_at INTO v_tokens, v_at;
        v_tokens := least(s.explicit_burst::double precision,
                          v_tokens + greatest(0, extract(epoch FROM v_now - v_at))
                                     * s.explicit_per_minute / 60.0);
        IF v_tokens < 1 THEN
            PERFORM fgentic_memory.refuse('RATE_LIMITED');
        END IF;
        UPDATE fgentic_memory.rate_bucket
           SET tokens = v_tokens - 1, refreshed_at = v_now
         WHERE subject_mxid = s.subject_mxid
           AND agent_namespace = s.agent_namespace
           AND agent_name = s.agent_name;
    END IF;

    DELETE FROM fgentic_memory.op_ledger
     WHERE scope_key = s.scope_key AND at <= v_now - interval '1 hour';
    SELECT coalesce(sum(units), 0) INTO v_used
      FROM fgentic_memory.op_ledger WHERE scope_key = s.scope_key;
    IF v_used + p_units > s.hourly_operation_ceiling THEN
        PERFORM fgentic_memory.refuse('COST_CEILING_REACHED');
    END IF;
    INSERT INTO fgentic_memory.op_ledger (scope_key, operation, units, at)
    VALUES (s.scope_key, p_operation, p_units, v_now);
    RETURN s.hourly_operation_ceiling - v_used - p_units;
END
$$;
