-- Notes no window counts any more (the operator's periodic cleanup, like prune_activity()).
-- A pruned session's count restarts unknown: its every final state is then followed by the
-- save wait (more refusals, never a missed save).
-- Restated in cleanup_expired/prune_*: one shared EXECUTE'd DELETE measured 1.19-1.20x (sql/0027).
CREATE OR REPLACE FUNCTION fgentic_memory.prune_contexts() RETURNS bigint
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    n bigint;
BEGIN
    DELETE FROM fgentic_memory.agent_context
     WHERE seen_at <= statement_timestamp() - interval '7 days';
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$$;

REVOKE ALL ON FUNCTION fgentic_memory.prune_contexts()
    FROM PUBLIC, fgentic_memory_runtime, fgentic_memory_delegate;
GRANT EXECUTE ON FUNCTION fgentic_memory.prune_contexts() TO fgentic_memory_runtime;
