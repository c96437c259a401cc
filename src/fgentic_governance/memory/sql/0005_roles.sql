-- fgentic_memory 0005: least privilege.
--
-- fgentic_memory_runtime is the group role for adapted runtimes (kagent, the typed Python
-- client). Grant it to the runtime's login role. It may:
--   * INSERT into memory (every row passes the 0002 gate) and DELETE from it (deletion only
--     ever removes memory);
--   * UPDATE memory (expiry may only move earlier; content changes pass the gate);
--   * SELECT only the content-free columns of memory, so kagent's ID/expiry bookkeeping keeps
--     working while content, embeddings and metadata are readable solely through the fenced
--     view readable_memory (column privileges also cover WHERE/RETURNING, so a predicate on
--     content cannot be used as an oracle);
--   * call enter_scope/check_scope/admit/cleanup_expired.
-- It has no access to the scope record, the cost ledger or the rate buckets. The schema owner
-- (the migrating role) runs the operator's fenced operations: grant, withdraw, erase.

DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'fgentic_memory_runtime')
    THEN
        CREATE ROLE fgentic_memory_runtime NOLOGIN;
    END IF;
EXCEPTION
    -- Roles are cluster-wide: a concurrent migration of another database may have won.
    WHEN duplicate_object OR unique_violation THEN NULL;
END
$$;

REVOKE ALL ON SCHEMA fgentic_memory FROM PUBLIC;
REVOKE ALL ON ALL TABLES IN SCHEMA fgentic_memory FROM PUBLIC;
-- Functions are executable by PUBLIC by default; SECURITY DEFINER ones must not be.
REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA fgentic_memory FROM PUBLIC;

GRANT USAGE ON SCHEMA fgentic_memory TO fgentic_memory_runtime;
GRANT INSERT, UPDATE, DELETE ON fgentic_memory.memory TO fgentic_memory_runtime;
GRANT SELECT (id, scope_key, agent_name, user_id, consent_generation, created_at, expires_at,
              access_count, lifecycle)
    ON fgentic_memory.memory TO fgentic_memory_runtime;

-- Since 0025 the functions, views and triggers of this step are each defined, as they are
-- now, in one file of sql/functions/, sql/views/ or sql/triggers/, with their grants.
