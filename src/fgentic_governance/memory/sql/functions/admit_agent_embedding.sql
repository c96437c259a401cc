-- requires: functions/admit, functions/enter_scope, functions/leased_scope
CREATE OR REPLACE FUNCTION fgentic_memory.admit_agent_embedding(
    p_agent_namespace text, p_agent_name text, p_subject text)
RETURNS integer
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    s fgentic_memory.scope :=
        fgentic_memory.leased_scope(p_agent_namespace, p_agent_name, p_subject);
BEGIN
    PERFORM fgentic_memory.enter_scope(
        s.scope_key, s.consent_generation, s.subject_mxid, s.agent_namespace, s.agent_name,
        s.control_room, 'recall');
    PERFORM fgentic_memory.admit('embedding', 1, false);
    RETURN 1;
END
$$;

REVOKE ALL ON FUNCTION fgentic_memory.admit_agent_embedding(text,text,text)
    FROM PUBLIC, fgentic_memory_runtime, fgentic_memory_delegate;
GRANT EXECUTE ON FUNCTION fgentic_memory.admit_agent_embedding(text,text,text) TO fgentic_memory_delegate;
