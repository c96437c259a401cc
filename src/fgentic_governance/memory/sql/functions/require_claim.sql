-- requires: functions/current_claim, functions/refuse
-- The claim a write of p_scope_key at p_generation needs: one entered in this transaction for
-- that scope and generation (any mode: the write gate's own capture check still applies).
CREATE OR REPLACE FUNCTION fgentic_memory.require_claim(p_scope_key text, p_generation bigint)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_key text;
    v_gen bigint;
BEGIN
    SELECT c.scope_key, c.generation INTO v_key, v_gen FROM fgentic_memory.current_claim() c;
    IF v_key IS NULL OR v_key IS DISTINCT FROM p_scope_key THEN
        PERFORM fgentic_memory.refuse('SCOPE_MISSING');
    END IF;
    IF v_gen IS DISTINCT FROM p_generation THEN
        PERFORM fgentic_memory.refuse('STALE_GENERATION');
    END IF;
END
$$;

REVOKE ALL ON FUNCTION fgentic_memory.require_claim(text,bigint)
    FROM PUBLIC, fgentic_memory_runtime, fgentic_memory_delegate;
