-- requires: functions/current_claim, functions/lock_scope, functions/refuse
-- admit(): the hourly operation ceiling and the explicit-operation rate of the scope of the
-- transaction's verified claim, charged before the operation runs.
CREATE OR REPLACE FUNCTION fgentic_memory.admit(
    p_operation text, p_units integer, p_explicit boolean)
RETURNS integer
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_key text;
    v_gen bigint;
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
    SELECT c.scope_key, c.generation INTO v_key, v_gen FROM fgentic_memory.current_claim() c;
    IF v_key IS NULL THEN
        PERFORM fgentic_memory.refuse('SCOPE_MISSING');
    END IF;
    s := fgentic_memory.lock_scope(v_key);
    IF NOT s.enabled OR s.posture = 'fully_disabled' THEN
        PERFORM fgentic_memory.refuse('SCOPE_DISABLED');
    END IF;
    IF p_operation IN ('save', 'summarize') AND s.posture <> 'enabled' THEN
        PERFORM fgentic_memory.refuse('CAPTURE_DISABLED');
    END IF;
    IF s.consent_generation IS DISTINCT FROM v_gen THEN
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

REVOKE ALL ON FUNCTION fgentic_memory.admit(text,integer,boolean)
    FROM PUBLIC, fgentic_memory_runtime, fgentic_memory_delegate;
GRANT EXECUTE ON FUNCTION fgentic_memory.admit(text,integer,boolean) TO fgentic_memory_runtime;
