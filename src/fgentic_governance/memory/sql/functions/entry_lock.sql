-- entry_lock: the scope's entry lock, shared or exclusive, bounded by the lock timeout.
CREATE OR REPLACE FUNCTION fgentic_memory.entry_lock(p_scope_key text, p_exclusive boolean)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_locked text;
BEGIN
    IF p_exclusive THEN
        v_locked := pg_advisory_xact_lock(1179079493, hashtext(p_scope_key));
    ELSE
        v_locked := pg_advisory_xact_lock_shared(1179079493, hashtext(p_scope_key));
    END IF;
END
$$;

REVOKE ALL ON FUNCTION fgentic_memory.entry_lock(text,boolean)
    FROM PUBLIC, fgentic_memory_runtime, fgentic_memory_delegate;
GRANT EXECUTE ON FUNCTION fgentic_memory.entry_lock(text,boolean) TO fgentic_memory_runtime;
