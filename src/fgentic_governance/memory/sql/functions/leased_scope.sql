-- requires: functions/live_leases, functions/refuse
CREATE OR REPLACE FUNCTION fgentic_memory.leased_scope(
    p_agent_namespace text, p_agent_name text, p_subject text)
RETURNS fgentic_memory.scope
LANGUAGE plpgsql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_found integer;
    v_subjects integer;
    v_key text;
    s fgentic_memory.scope;
BEGIN
    IF p_subject IS NULL THEN
        PERFORM fgentic_memory.refuse('LEASE_MISSING');
    END IF;
    -- Every live lease of the Agent, whoever's: the attributed user's scopes, and how many
    -- users hold one.
    SELECT count(DISTINCT l.scope_key) FILTER (WHERE l.subject_mxid = p_subject),
           min(l.scope_key) FILTER (WHERE l.subject_mxid = p_subject),
           count(DISTINCT l.subject_mxid)
      INTO v_found, v_key, v_subjects
      FROM fgentic_memory.live_leases(p_agent_namespace, p_agent_name) l;
    IF v_found = 0 THEN
        PERFORM fgentic_memory.refuse('LEASE_MISSING');
    ELSIF v_found > 1 OR v_subjects > 1 THEN
        PERFORM fgentic_memory.refuse('SCOPE_AMBIGUOUS');
    END IF;
    SELECT * INTO s FROM fgentic_memory.scope WHERE scope_key = v_key;
    RETURN s;
END
$$;

REVOKE ALL ON FUNCTION fgentic_memory.leased_scope(text,text,text)
    FROM PUBLIC, fgentic_memory_runtime, fgentic_memory_delegate;
