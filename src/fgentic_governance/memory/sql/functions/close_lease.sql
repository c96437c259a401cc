-- Close: idempotent; true when the lease existed for this scope and was open.
CREATE OR REPLACE FUNCTION fgentic_memory.close_lease(p_lease_id uuid, p_scope_key text)
RETURNS boolean
LANGUAGE sql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    WITH closed AS (
        UPDATE fgentic_memory.delegation_lease SET closed_at = now()
         WHERE lease_id = p_lease_id AND scope_key = p_scope_key AND closed_at IS NULL
        RETURNING 1)
    SELECT EXISTS (SELECT 1 FROM closed)
$$;

REVOKE ALL ON FUNCTION fgentic_memory.close_lease(uuid,text)
    FROM PUBLIC, fgentic_memory_runtime, fgentic_memory_delegate;
