-- requires: functions/check_floor, functions/refuse
-- check_capture: the capture gate (scope enabled, posture 'enabled', current generation),
-- then the posture floor (the triggers, save_fact() and enter_scope() call it).
CREATE OR REPLACE FUNCTION fgentic_memory.check_capture(
    s fgentic_memory.scope, p_generation bigint)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF NOT s.enabled OR s.posture = 'fully_disabled' THEN
        PERFORM fgentic_memory.refuse('SCOPE_DISABLED');
    END IF;
    IF s.posture <> 'enabled' THEN
        PERFORM fgentic_memory.refuse('CAPTURE_DISABLED');
    END IF;
    PERFORM fgentic_memory.check_floor(s.agent_namespace, s.agent_name, 'capture');
    IF p_generation IS DISTINCT FROM s.consent_generation THEN
        PERFORM fgentic_memory.refuse('STALE_GENERATION');
    END IF;
END
$$;

REVOKE ALL ON FUNCTION fgentic_memory.check_capture(fgentic_memory.scope,bigint)
    FROM PUBLIC, fgentic_memory_runtime, fgentic_memory_delegate;
