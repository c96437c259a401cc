-- Whether the operator holds the scope (erasure in progress): nothing enters a held scope.
CREATE OR REPLACE FUNCTION fgentic_memory.held(p_scope_key text) RETURNS boolean
LANGUAGE sql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT EXISTS (SELECT 1 FROM fgentic_memory.scope_hold WHERE scope_key = p_scope_key)
$$;

REVOKE ALL ON FUNCTION fgentic_memory.held(text)
    FROM PUBLIC, fgentic_memory_runtime, fgentic_memory_delegate;
