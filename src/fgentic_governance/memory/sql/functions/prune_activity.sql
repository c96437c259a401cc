-- Notes older than the longest window serve nothing (the operator's periodic cleanup). Like
-- prune_leases(), the runtime role may run it too: it deletes only notes no window counts.
-- Restated in cleanup_expired/prune_*: one shared EXECUTE'd DELETE measured 1.19-1.20x (sql/0027).
CREATE OR REPLACE FUNCTION fgentic_memory.prune_activity() RETURNS bigint
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    n bigint;
BEGIN
    DELETE FROM fgentic_memory.agent_activity
     WHERE seen_at <= statement_timestamp() - interval '2 hours';
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$$;

REVOKE ALL ON FUNCTION fgentic_memory.prune_activity()
    FROM PUBLIC, fgentic_memory_runtime, fgentic_memory_delegate;
GRANT EXECUTE ON FUNCTION fgentic_memory.prune_activity() TO fgentic_memory_runtime;
