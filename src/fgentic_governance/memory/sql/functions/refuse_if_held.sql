-- requires: functions/held, functions/refuse
-- For enter_scope, which runs as its caller (the runtime may not call refuse() itself).
CREATE OR REPLACE FUNCTION fgentic_memory.refuse_if_held(p_scope_key text) RETURNS void
LANGUAGE plpgsql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF fgentic_memory.held(p_scope_key) THEN
        PERFORM fgentic_memory.refuse('SCOPE_DISABLED');
    END IF;
END
$$;

REVOKE ALL ON FUNCTION fgentic_memory.refuse_if_held(text)
    FROM PUBLIC, fgentic_memory_runtime, fgentic_memory_delegate;
