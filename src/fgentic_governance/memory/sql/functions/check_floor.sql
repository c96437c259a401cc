-- requires: functions/floor_posture, functions/refuse
-- The floor's refusal for an access mode ('erase' is never refused).
CREATE OR REPLACE FUNCTION fgentic_memory.check_floor(
    p_agent_namespace text, p_agent_name text, p_mode text)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_floor text;
BEGIN
    IF p_mode = 'erase' THEN
        RETURN;
    END IF;
    v_floor := fgentic_memory.floor_posture(p_agent_namespace, p_agent_name);
    IF v_floor = 'fully_disabled' THEN
        PERFORM fgentic_memory.refuse('POSTURE_FLOOR_DISABLED');
    END IF;
    IF v_floor = 'capture_disabled' AND p_mode = 'capture' THEN
        PERFORM fgentic_memory.refuse('POSTURE_FLOOR_CAPTURE_DISABLED');
    END IF;
END
$$;

REVOKE ALL ON FUNCTION fgentic_memory.check_floor(text,text,text)
    FROM PUBLIC, fgentic_memory_runtime, fgentic_memory_delegate;
