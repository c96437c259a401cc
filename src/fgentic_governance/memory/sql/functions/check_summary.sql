-- requires: functions/current_claim, functions/refuse
CREATE OR REPLACE FUNCTION fgentic_memory.check_summary(p_facts integer) RETURNS boolean
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_scope text;
    v_most integer;
BEGIN
    SELECT c.scope_key INTO v_scope FROM fgentic_memory.current_claim() c
     WHERE c.mode = 'capture';
    IF v_scope IS NULL THEN
        PERFORM fgentic_memory.refuse('LEASE_MISSING');
    END IF;
    SELECT least(10, s.max_summary_facts) INTO v_most
      FROM fgentic_memory.scope s WHERE s.scope_key = v_scope;
    IF p_facts IS NULL OR p_facts < 1 OR v_most IS NULL OR p_facts > v_most THEN
        PERFORM fgentic_memory.refuse('SUMMARY_TOO_LARGE');
    END IF;
    UPDATE fgentic_memory.summary_cadence c
       SET reserved = c.reserved - 1, summaries = c.summaries + 1
     WHERE c.scope_key = v_scope AND c.reserved > 0;
    IF FOUND THEN
        RETURN true;
    END IF;
    UPDATE fgentic_memory.summary_cadence c SET summaries = c.summaries + 1
      FROM fgentic_memory.scope s
     WHERE c.scope_key = v_scope AND s.scope_key = v_scope
       AND (c.summaries + c.reserved + 1) * s.min_user_turns <= c.leases;
    IF NOT FOUND THEN
        PERFORM fgentic_memory.refuse('SUMMARY_CADENCE_REACHED');
    END IF;
    RETURN false;
END
$$;

REVOKE ALL ON FUNCTION fgentic_memory.check_summary(integer)
    FROM PUBLIC, fgentic_memory_runtime, fgentic_memory_delegate;
GRANT EXECUTE ON FUNCTION fgentic_memory.check_summary(integer) TO fgentic_memory_delegate;
