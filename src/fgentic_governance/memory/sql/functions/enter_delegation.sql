-- requires: functions/enter_scope, functions/live_leases, functions/refuse
CREATE OR REPLACE FUNCTION fgentic_memory.enter_delegation(
    p_subject text, p_agent_namespace text, p_agent_name text, p_mode text)
RETURNS fgentic_memory.delegation_context
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_found integer;
    v_key text;
    s fgentic_memory.scope;
    v_lease_expiry timestamptz;
    v_context fgentic_memory.scope_context;
BEGIN
    IF p_mode IS NULL OR p_mode NOT IN ('capture', 'recall') THEN
        PERFORM fgentic_memory.refuse('INVALID_SPEC');
    END IF;
    SELECT count(DISTINCT l.scope_key), min(l.scope_key)
      INTO v_found, v_key
      FROM fgentic_memory.live_leases(p_agent_namespace, p_agent_name) l
     WHERE l.subject_mxid = p_subject;
    IF v_found = 0 THEN
        PERFORM fgentic_memory.refuse('LEASE_MISSING');
    ELSIF v_found > 1 THEN
        PERFORM fgentic_memory.refuse('SCOPE_AMBIGUOUS');
    END IF;
    SELECT * INTO s FROM fgentic_memory.scope WHERE scope_key = v_key;
    SELECT max(l.expires_at) INTO v_lease_expiry FROM fgentic_memory.delegation_lease l
     WHERE l.scope_key = s.scope_key AND l.closed_at IS NULL
       AND l.consent_generation = s.consent_generation;
    v_context := fgentic_memory.enter_scope(
        s.scope_key, s.consent_generation, s.subject_mxid, s.agent_namespace, s.agent_name,
        s.control_room, p_mode);
    RETURN ROW(s.scope_key, s.consent_generation, v_context.store_agent_name,
               v_context.max_expiry, v_lease_expiry)::fgentic_memory.delegation_context;
END
$$;

REVOKE ALL ON FUNCTION fgentic_memory.enter_delegation(text,text,text,text)
    FROM PUBLIC, fgentic_memory_runtime, fgentic_memory_delegate;
GRANT EXECUTE ON FUNCTION fgentic_memory.enter_delegation(text,text,text,text) TO fgentic_memory_delegate;
