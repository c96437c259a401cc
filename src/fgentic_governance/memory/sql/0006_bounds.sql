-- fgentic_memory 0006: bounded waits, a hold that disables a scope without its row lock, a
-- guarded superseded_by, and content-free server logging for this database.
--
-- Why: a runtime transaction that holds the scope row (an uncommitted insert) or a memory row
-- (SELECT ... FOR UPDATE) blocked the erasure fence forever. Now (1) every runtime
-- transaction that enters a scope or writes is bounded from inside the database, (2) the
-- database's defaults bound every session, the runtime's login roles included, and (3) an
-- erasure first places a hold, which needs no lock a runtime can take: from that commit on no
-- read, write or cost admission of the scope passes, even while the fence still waits.

-- 1. The hold. One row per scope whose erasure has started and not yet been verified. It is
-- never granted to the runtime role; the gates read it as the owner (SECURITY DEFINER).
CREATE TABLE fgentic_memory.scope_hold (
    scope_key text PRIMARY KEY,
    held_at timestamptz NOT NULL DEFAULT now()
);

REVOKE ALL ON fgentic_memory.scope_hold FROM PUBLIC;

-- 4. Database defaults, for every session of this database (the runtime's login roles too,
-- whoever creates them later). Pools of the operator and the control API set their own,
-- longer bounds per connection. The logging settings keep statements, parameters and error
-- texts (which quote a refused literal) out of the server log. Each group needs its own
-- privilege (database owner; superuser or GRANT SET ON PARAMETER for the log_* settings):
-- without it the migration still applies, and the operator's StoreReady check reports
-- STORE_SETTINGS_UNSAFE until a DBA runs the statements listed in docs/memory.md.
-- The values mirror fgentic_governance.memory.bounds.PINNED (a test holds them equal).
DO $$
BEGIN
    EXECUTE format('ALTER DATABASE %I SET lock_timeout = %L', current_database(), '2s');
    EXECUTE format('ALTER DATABASE %I SET statement_timeout = %L', current_database(), '5s');
    EXECUTE format('ALTER DATABASE %I SET idle_in_transaction_session_timeout = %L',
                   current_database(), '5s');
EXCEPTION WHEN insufficient_privilege THEN
    RAISE NOTICE 'fgentic_memory: database timeouts not pinned (insufficient privilege)';
END
$$;

DO $$
DECLARE
    v_pin text[];
BEGIN
    FOREACH v_pin SLICE 1 IN ARRAY ARRAY[
        ['log_min_messages', 'fatal'],
        ['log_min_error_statement', 'panic'],
        ['log_statement', 'none'],
        ['log_min_duration_statement', '-1'],
        ['log_min_duration_sample', '-1'],
        ['log_transaction_sample_rate', '0'],
        ['log_parameter_max_length', '0'],
        ['log_parameter_max_length_on_error', '0'],
        ['debug_print_parse', 'off'],
        ['debug_print_rewritten', 'off'],
        ['debug_print_plan', 'off']]
    LOOP
        EXECUTE format('ALTER DATABASE %I SET %I = %L', current_database(), v_pin[1], v_pin[2]);
    END LOOP;
    -- auto_explain logs plans with constants; pin it only where the module is loaded.
    IF EXISTS (SELECT 1 FROM pg_settings WHERE name = 'auto_explain.log_min_duration') THEN
        EXECUTE format('ALTER DATABASE %I SET auto_explain.log_min_duration = %L',
                       current_database(), '-1');
    END IF;
EXCEPTION WHEN insufficient_privilege THEN
    RAISE NOTICE 'fgentic_memory: database log settings not pinned (insufficient privilege)';
END
$$;

-- Since 0025 the functions, views and triggers of this step are each defined, as they are
-- now, in one file of sql/functions/, sql/views/ or sql/triggers/, with their grants.
