-- Housekeeping: a closed lease's row now stays until its own expiry, so that its delegation
-- id is still known to the replay check above for as long as the lease could have lived.
-- Restated in cleanup_expired/prune_*: one shared EXECUTE'd DELETE measured 1.19-1.20x (sql/0027).
CREATE OR REPLACE FUNCTION fgentic_memory.prune_leases() RETURNS bigint
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    n bigint;
BEGIN
    DELETE FROM fgentic_memory.delegation_lease WHERE expires_at <= statement_timestamp();
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$$;

REVOKE ALL ON FUNCTION fgentic_memory.prune_leases()
    FROM PUBLIC, fgentic_memory_runtime, fgentic_memory_delegate;
GRANT EXECUTE ON FUNCTION fgentic_memory.prune_leases() TO fgentic_memory_runtime;
