-- requires: functions/check_binding, functions/check_capture, functions/refuse
-- Validate a request context against the scope record. p_mode:
--   'capture' - a write: enabled, posture enabled, current generation;
--   'recall'  - a read: enabled, posture enabled or capture_disabled, current generation;
--   'erase'   - a per-entry forget: current generation only (erasure never needs consent).
-- Returns what a writer needs and may know: the agent_name spelling rows of this scope carry
-- and the latest expiry a new entry may have.
CREATE OR REPLACE FUNCTION fgentic_memory.check_scope(
    p_scope_key text, p_generation bigint, p_subject text,
    p_agent_namespace text, p_agent_name text, p_room text, p_mode text)
RETURNS fgentic_memory.scope_context
LANGUAGE plpgsql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    s fgentic_memory.scope;
BEGIN
    IF p_mode IS NULL OR p_mode NOT IN ('capture', 'recall', 'erase') THEN
        PERFORM fgentic_memory.refuse('INVALID_SPEC');
    END IF;
    SELECT * INTO s FROM fgentic_memory.scope WHERE scope_key = p_scope_key;
    IF NOT FOUND THEN
        PERFORM fgentic_memory.refuse('SCOPE_MISSING');
    END IF;
    PERFORM fgentic_memory.check_binding(s, p_subject, p_agent_namespace, p_agent_name, p_room);
    IF p_mode = 'capture' THEN
        PERFORM fgentic_memory.check_capture(s, p_generation);
    ELSIF p_mode = 'recall' THEN
        IF NOT s.enabled OR s.posture = 'fully_disabled' THEN
            PERFORM fgentic_memory.refuse('SCOPE_DISABLED');
        END IF;
    END IF;
    IF p_generation IS DISTINCT FROM s.consent_generation THEN
        PERFORM fgentic_memory.refuse('STALE_GENERATION');
    END IF;
    RETURN ROW(s.store_agent_name, now() + make_interval(days => s.max_retention_days))::
        fgentic_memory.scope_context;
END
$$;

REVOKE ALL ON FUNCTION fgentic_memory.check_scope(text,bigint,text,text,text,text,text)
    FROM PUBLIC, fgentic_memory_runtime, fgentic_memory_delegate;
GRANT EXECUTE ON FUNCTION fgentic_memory.check_scope(text,bigint,text,text,text,text,text) TO fgentic_memory_runtime;
