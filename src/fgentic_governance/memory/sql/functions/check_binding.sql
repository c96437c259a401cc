-- requires: functions/refuse
-- check_binding: ADR 0023 §6's scope check, in the one place enter_scope, save_fact and
-- check_scope call it: fail closed unless principal, Agent and room match the scope exactly.
CREATE OR REPLACE FUNCTION fgentic_memory.check_binding(
    s fgentic_memory.scope, p_subject text, p_agent_namespace text, p_agent_name text,
    p_room text)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_subject IS DISTINCT FROM s.subject_mxid THEN
        PERFORM fgentic_memory.refuse('CONSENT_SUBJECT_MISMATCH');
    END IF;
    IF p_agent_namespace IS DISTINCT FROM s.agent_namespace
       OR p_agent_name IS DISTINCT FROM s.agent_name
       OR p_room IS DISTINCT FROM s.control_room
    THEN
        PERFORM fgentic_memory.refuse('SCOPE_MISSING');
    END IF;
END
$$;

REVOKE ALL ON FUNCTION fgentic_memory.check_binding(fgentic_memory.scope,text,text,text,text)
    FROM PUBLIC, fgentic_memory_runtime, fgentic_memory_delegate;
