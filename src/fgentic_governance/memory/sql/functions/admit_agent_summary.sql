-- requires: functions/admit, functions/enter_scope, functions/leased_scope, functions/max_summary_input_bytes, functions/refuse
CREATE OR REPLACE FUNCTION fgentic_memory.admit_agent_summary(
    p_agent_namespace text, p_agent_name text, p_input_bytes integer, p_subject text)
RETURNS void
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    s fgentic_memory.scope :=
        fgentic_memory.leased_scope(p_agent_namespace, p_agent_name, p_subject);
BEGIN
    IF p_input_bytes IS NULL OR p_input_bytes < 0 THEN
        PERFORM fgentic_memory.refuse('INVALID_SPEC');
    END IF;
    IF p_input_bytes > fgentic_memory.max_summary_input_bytes() THEN
        PERFORM fgentic_memory.refuse('SUMMARY_INPUT_TOO_LARGE');
    END IF;
    IF s.max_summary_facts = 0 THEN
        PERFORM fgentic_memory.refuse('SUMMARY_TOO_LARGE');
    END IF;
    PERFORM fgentic_memory.enter_scope(
        s.scope_key, s.consent_generation, s.subject_mxid, s.agent_namespace, s.agent_name,
        s.control_room, 'capture');
    UPDATE fgentic_memory.summary_cadence c SET reserved = c.reserved + 1
     WHERE c.scope_key = s.scope_key
       AND (c.summaries + c.reserved + 1) * s.min_user_turns <= c.leases;
    IF NOT FOUND THEN
        PERFORM fgentic_memory.refuse('SUMMARY_CADENCE_REACHED');
    END IF;
    PERFORM fgentic_memory.admit('summarize', 1, false);
END
$$;

REVOKE ALL ON FUNCTION fgentic_memory.admit_agent_summary(text,text,integer,text)
    FROM PUBLIC, fgentic_memory_runtime, fgentic_memory_delegate;
GRANT EXECUTE ON FUNCTION fgentic_memory.admit_agent_summary(text,text,integer,text) TO fgentic_memory_delegate;
