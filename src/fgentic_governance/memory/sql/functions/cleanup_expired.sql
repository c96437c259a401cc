-- Physical deletion of expired rows (ADR 0023 §27: within 24 hours). It only deletes; it never
-- moves an expiry.
-- Restated in cleanup_expired/prune_*: one shared EXECUTE'd DELETE measured 1.19-1.20x (sql/0027).
CREATE OR REPLACE FUNCTION fgentic_memory.cleanup_expired() RETURNS bigint
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    n bigint;
BEGIN
    DELETE FROM fgentic_memory.memory WHERE expires_at <= statement_timestamp();
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$$;

REVOKE ALL ON FUNCTION fgentic_memory.cleanup_expired()
    FROM PUBLIC, fgentic_memory_runtime, fgentic_memory_delegate;
GRANT EXECUTE ON FUNCTION fgentic_memory.cleanup_expired() TO fgentic_memory_runtime;
