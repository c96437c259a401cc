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

CREATE FUNCTION fgentic_memory.held(p_scope_key text) RETURNS boolean
LANGUAGE sql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT EXISTS (SELECT 1 FROM fgentic_memory.scope_hold WHERE scope_key = p_scope_key)
$$;

-- For enter_scope, which runs as its caller (the runtime may not call refuse() itself).
CREATE FUNCTION fgentic_memory.refuse_if_held(p_scope_key text) RETURNS void
LANGUAGE plpgsql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF fgentic_memory.held(p_scope_key) THEN
        PERFORM fgentic_memory.refuse('SCOPE_DISABLED');
    END IF;
END
$$;

-- 2. Transaction-local bounds for a runtime transaction, set by every gate it must pass
-- (enter_scope, and lock_scope for plain-SQL writers). A session may have set looser values;
-- from the gate on, the transaction holds a lock for at most these times, so an erasure's
-- fence (which waits longer: see memory/bounds.py) always outlasts it.
-- The values mirror fgentic_governance.memory.bounds.RUNTIME (a test holds them equal).
CREATE FUNCTION fgentic_memory.bound_transaction() RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    PERFORM pg_catalog.set_config('lock_timeout', '2s', true);
    PERFORM pg_catalog.set_config('statement_timeout', '5s', true);
    PERFORM pg_catalog.set_config('idle_in_transaction_session_timeout', '5s', true);
END
$$;

CREATE OR REPLACE FUNCTION fgentic_memory.lock_scope(p_scope_key text)
RETURNS fgentic_memory.scope
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    s fgentic_memory.scope;
BEGIN
    PERFORM fgentic_memory.bound_transaction();
    IF p_scope_key IS NULL THEN
        PERFORM fgentic_memory.refuse('SCOPE_MISSING');
    END IF;
    -- Writes and cost admissions of a held scope are refused before they queue for the row
    -- (reads: enter_scope and the view). A hold placed after this check is covered by the
    -- fence that follows it, which waits for this transaction and then deletes its rows.
    IF fgentic_memory.held(p_scope_key) THEN
        PERFORM fgentic_memory.refuse('SCOPE_DISABLED');
    END IF;
    UPDATE fgentic_memory.scope SET last_gated_at = clock_timestamp()
     WHERE scope_key = p_scope_key
    RETURNING * INTO s;
    IF NOT FOUND THEN
        PERFORM fgentic_memory.refuse('SCOPE_MISSING');
    END IF;
    RETURN s;
END
$$;

-- As in 0003, plus the bounds and the hold. SECURITY INVOKER and without a SET clause, so the
-- set_config() calls outlive the function (the fenced context and the bounds).
CREATE OR REPLACE FUNCTION fgentic_memory.enter_scope(
    p_scope_key text, p_generation bigint, p_subject text,
    p_agent_namespace text, p_agent_name text, p_room text, p_mode text)
RETURNS fgentic_memory.scope_context
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_context fgentic_memory.scope_context;
BEGIN
    PERFORM fgentic_memory.bound_transaction();
    v_context := fgentic_memory.check_scope(
        p_scope_key, p_generation, p_subject, p_agent_namespace, p_agent_name, p_room, p_mode);
    -- A per-entry forget ('erase') is never blocked: erasure needs no consent.
    IF p_mode <> 'erase' THEN
        PERFORM fgentic_memory.refuse_if_held(p_scope_key);
    END IF;
    PERFORM pg_catalog.set_config('fgentic_memory.scope_key', p_scope_key, true);
    PERFORM pg_catalog.set_config('fgentic_memory.generation', p_generation::text, true);
    RETURN v_context;
END
$$;

-- As in 0003, and nothing of a held scope is readable.
CREATE OR REPLACE VIEW fgentic_memory.readable_memory WITH (security_barrier = true) AS
SELECT m.id,
       m.scope_key,
       m.agent_name,
       m.user_id,
       m.content,
       m.embedding,
       m.metadata,
       m.created_at,
       m.expires_at,
       m.consent_generation,
       m.memory_type,
       m.source_kind,
       m.write_reason,
       m.confirmation_status,
       m.sensitivity
  FROM fgentic_memory.memory m
  JOIN fgentic_memory.scope s ON s.scope_key = m.scope_key
 WHERE m.expires_at > statement_timestamp()
   AND m.lifecycle = 'active'
   AND s.enabled
   AND s.posture IN ('enabled', 'capture_disabled')
   AND m.consent_generation = s.consent_generation
   AND m.scope_key = current_setting('fgentic_memory.scope_key', true)
   AND m.consent_generation::text = current_setting('fgentic_memory.generation', true)
   AND NOT EXISTS (SELECT 1 FROM fgentic_memory.scope_hold h WHERE h.scope_key = m.scope_key);

-- 3. superseded_by is an opaque id of another row of the same scope, or NULL; setting it is a
-- write and passes the capture gate (it was an unbounded, unchecked text column).
CREATE FUNCTION fgentic_memory.memory_superseded_guard() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    s fgentic_memory.scope;
BEGIN
    IF NEW.superseded_by IS NOT DISTINCT FROM OLD.superseded_by OR NEW.superseded_by IS NULL
    THEN
        RETURN NEW;
    END IF;
    IF octet_length(NEW.superseded_by) <> 36
       OR NEW.superseded_by !~ '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'
       OR NEW.superseded_by = NEW.id
       OR NOT EXISTS (SELECT 1 FROM fgentic_memory.memory
                       WHERE id = NEW.superseded_by AND scope_key = NEW.scope_key)
    THEN
        PERFORM fgentic_memory.refuse('INVALID_SPEC');
    END IF;
    s := fgentic_memory.lock_scope(NEW.scope_key);
    PERFORM fgentic_memory.check_capture(s, NEW.consent_generation);
    RETURN NEW;
END
$$;

CREATE TRIGGER memory_superseded_guard BEFORE UPDATE OF superseded_by ON fgentic_memory.memory
    FOR EACH ROW EXECUTE FUNCTION fgentic_memory.memory_superseded_guard();

REVOKE ALL ON fgentic_memory.scope_hold FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION fgentic_memory.held(text), fgentic_memory.refuse_if_held(text),
    fgentic_memory.bound_transaction(), fgentic_memory.memory_superseded_guard() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION fgentic_memory.refuse_if_held(text),
    fgentic_memory.bound_transaction() TO fgentic_memory_runtime;

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
