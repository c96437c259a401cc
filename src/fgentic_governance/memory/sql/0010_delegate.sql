-- fgentic_memory 0010: delegation for the memory API alone, no snapshot that outlives a
-- verified erasure, and an idempotent, capped lease open (review N1, N2, L1).
--
-- Why:
--   N1. enter_delegation and admit_agent_embedding were granted to fgentic_memory_runtime.
--       They need only a subject and an Agent, both readable from content-free columns, so any
--       runtime login could read, write and spend in every scope while it was leased. They now
--       belong to fgentic_memory_delegate, a NOLOGIN role granted to the memory API's login
--       alone.
--   N2. A runtime transaction at REPEATABLE READ that had entered a scope kept reading the
--       erased rows from its snapshot after the erasure reported Verified; at READ COMMITTED
--       an open cursor or a long statement did the same (the runtime may SET its own timeouts
--       to 0, so they bound nothing). Now (1) a claim exists only at READ COMMITTED, where
--       every statement takes a fresh snapshot, and (2) entering a scope takes a
--       transaction-level shared advisory lock on it, which an erasure takes exclusively
--       (bounded by its lock_timeout) before it verifies. Verified therefore means that every
--       transaction that entered the scope before the fence has ended.
--   L1. Each replay of one lease/open body opened another 540 s lease. A lease may now carry
--       the bridge's delegation id (a replay of a live delegation returns its lease, an ended
--       one is not reopened), and at most max_live_leases() leases of one (subject, Agent)
--       live at once (LEASE_LIMIT_REACHED).


-- 2. The delegating role (N1). It has the runtime's privileges plus delegation; kagent's own
-- runtime logins keep fgentic_memory_runtime alone.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'fgentic_memory_delegate')
    THEN
        CREATE ROLE fgentic_memory_delegate NOLOGIN;
    END IF;
EXCEPTION
    -- Roles are cluster-wide: a concurrent migration of another database may have won.
    WHEN duplicate_object OR unique_violation THEN NULL;
END
$$;

DO $$
BEGIN
    GRANT fgentic_memory_runtime TO fgentic_memory_delegate;
EXCEPTION
    WHEN duplicate_object OR unique_violation THEN NULL;
END
$$;

-- 6. Leases (L1): the bridge's delegation id, unique per scope.
ALTER TABLE fgentic_memory.delegation_lease ADD COLUMN delegation_id uuid;
CREATE UNIQUE INDEX delegation_lease_delegation
    ON fgentic_memory.delegation_lease (scope_key, delegation_id)
    WHERE delegation_id IS NOT NULL;

-- 8. No copy that outlives an erasure (N2): a runtime that entered a scope could otherwise
-- copy its rows into a temporary table and read them after Verified. Only the database's
-- owner (the operator's role) keeps TEMPORARY; without the privilege to revoke it the
-- migration still applies and says so.
DO $$
BEGIN
    EXECUTE format('REVOKE TEMPORARY ON DATABASE %I FROM PUBLIC', current_database());
EXCEPTION
    WHEN insufficient_privilege THEN
        RAISE NOTICE 'TEMPORARY on this database stays granted to PUBLIC (not its owner)';
END
$$;

-- Since 0025 the functions, views and triggers of this step are each defined, as they are
-- now, in one file of sql/functions/, sql/views/ or sql/triggers/, with their grants.
