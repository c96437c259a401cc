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

-- 1. Two more refusal codes.
CREATE OR REPLACE FUNCTION fgentic_memory.refuse(p_reason text) RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_state text := CASE p_reason
        WHEN 'SCOPE_MISSING' THEN 'FG001'
        WHEN 'SCOPE_DISABLED' THEN 'FG002'
        WHEN 'CAPTURE_DISABLED' THEN 'FG003'
        WHEN 'STALE_GENERATION' THEN 'FG004'
        WHEN 'ENTRY_CAP_REACHED' THEN 'FG005'
        WHEN 'FACT_TOO_LARGE' THEN 'FG006'
        WHEN 'RETENTION_EXCEEDED' THEN 'FG007'
        WHEN 'EXPIRY_EXTENSION_DENIED' THEN 'FG008'
        WHEN 'CONSENT_SUBJECT_MISMATCH' THEN 'FG009'
        WHEN 'FEDERATION_DENIED' THEN 'FG010'
        WHEN 'BINDING_CONFLICT' THEN 'FG011'
        WHEN 'INVALID_SPEC' THEN 'FG012'
        WHEN 'COST_CEILING_REACHED' THEN 'FG013'
        WHEN 'RATE_LIMITED' THEN 'FG014'
        WHEN 'CREDENTIAL_CONTENT' THEN 'FG015'
        WHEN 'HIGH_RISK_INSTRUCTION_CONTENT' THEN 'FG016'
        WHEN 'LEASE_MISSING' THEN 'FG017'
        WHEN 'SCOPE_AMBIGUOUS' THEN 'FG018'
        WHEN 'ISOLATION_REFUSED' THEN 'FG019'
        WHEN 'LEASE_LIMIT_REACHED' THEN 'FG020'
        ELSE 'FG999'
    END;
BEGIN
    IF v_state = 'FG999' THEN
        RAISE EXCEPTION USING ERRCODE = 'FG999', MESSAGE = 'INTERNAL_ERROR';
    END IF;
    RAISE EXCEPTION USING ERRCODE = v_state, MESSAGE = p_reason;
END
$$;

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

REVOKE EXECUTE ON FUNCTION fgentic_memory.enter_delegation(text, text, text, text),
    fgentic_memory.admit_agent_embedding(text, text)
    FROM fgentic_memory_runtime;
GRANT EXECUTE ON FUNCTION fgentic_memory.enter_delegation(text, text, text, text),
    fgentic_memory.admit_agent_embedding(text, text)
    TO fgentic_memory_delegate;

-- 3. The entry lock (N2): shared by every transaction that entered the scope, exclusive for an
-- erasure that is about to verify. Transaction-level, so it cannot be released early. Key:
-- class b"FGSE" and the scope key's hash (a collision only makes an erasure wait for the
-- entrants of another scope too).
CREATE FUNCTION fgentic_memory.entry_lock(p_scope_key text, p_exclusive boolean)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_exclusive THEN
        PERFORM pg_advisory_xact_lock(1179079493, hashtext(p_scope_key));
    ELSE
        PERFORM pg_advisory_xact_lock_shared(1179079493, hashtext(p_scope_key));
    END IF;
END
$$;

-- 4. enter_scope: as in 0007, refused at any isolation but READ COMMITTED (a snapshot taken
-- before a fence would keep showing what the fence erased), and holding the entry lock from
-- before the scope record is read.
CREATE OR REPLACE FUNCTION fgentic_memory.enter_scope(
    p_scope_key text, p_generation bigint, p_subject text,
    p_agent_namespace text, p_agent_name text, p_room text, p_mode text)
RETURNS fgentic_memory.scope_context
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_context fgentic_memory.scope_context;
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        PERFORM fgentic_memory.refuse('ISOLATION_REFUSED');
    END IF;
    PERFORM fgentic_memory.bound_transaction();
    -- Before check_scope: in READ COMMITTED its statement then takes its snapshot after any
    -- wait here, so an entrant queued behind an erasure sees the fence.
    PERFORM fgentic_memory.entry_lock(p_scope_key, false);
    v_context := fgentic_memory.check_scope(
        p_scope_key, p_generation, p_subject, p_agent_namespace, p_agent_name, p_room, p_mode);
    -- A per-entry forget ('erase') is never blocked: erasure needs no consent.
    IF p_mode <> 'erase' THEN
        PERFORM fgentic_memory.refuse_if_held(p_scope_key);
    END IF;
    PERFORM set_config('fgentic_memory.claim',
        format('%s|%s|%s|%s', p_mode, p_generation, p_scope_key,
               fgentic_memory.claim_mac(pg_current_xact_id(), p_mode, p_generation,
                                        p_scope_key)),
        true);
    -- Informational only: nothing trusts these.
    PERFORM set_config('fgentic_memory.scope_key', p_scope_key, true);
    PERFORM set_config('fgentic_memory.generation', p_generation::text, true);
    RETURN v_context;
END
$$;

-- 5. current_claim: as in 0007, and no claim outside READ COMMITTED (the isolation of a
-- transaction cannot change after its first statement; this keeps the one verifier that the
-- view, the write gates and admit() share closed even if another signer is ever added).
CREATE OR REPLACE FUNCTION fgentic_memory.current_claim()
RETURNS TABLE (scope_key text, generation bigint, mode text)
LANGUAGE plpgsql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_token text := current_setting('fgentic_memory.claim', true);
    v_xact xid8 := pg_current_xact_id_if_assigned();
    v_part text[];
BEGIN
    IF v_token IS NULL OR v_xact IS NULL OR octet_length(v_token) > 1024
       OR v_token !~ '^(capture|recall|erase)\|[0-9]{1,18}\|[a-z0-9/-]+\|[0-9a-f]{64}$'
       OR current_setting('transaction_isolation') <> 'read committed'
    THEN
        RETURN;
    END IF;
    v_part := string_to_array(v_token, '|');
    IF fgentic_memory.claim_mac(v_xact, v_part[1], v_part[2]::bigint, v_part[3])
       IS DISTINCT FROM v_part[4]
    THEN
        RETURN;
    END IF;
    scope_key := v_part[3];
    generation := v_part[2]::bigint;
    mode := v_part[1];
    RETURN NEXT;
END
$$;

-- 6. Leases (L1): the bridge's delegation id, unique per scope.
ALTER TABLE fgentic_memory.delegation_lease ADD COLUMN delegation_id uuid;
CREATE UNIQUE INDEX delegation_lease_delegation
    ON fgentic_memory.delegation_lease (scope_key, delegation_id)
    WHERE delegation_id IS NOT NULL;

-- How many leases of one (subject, Agent) may live at once. A lease is opened per turn and
-- closed when the turn ends; more than this at once is a replay or a runaway bridge.
-- Mirrored by fgentic_governance.memory.model.MAX_LIVE_LEASES (a test holds them equal).
CREATE FUNCTION fgentic_memory.max_live_leases() RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT 8 $$;

-- Open: as in 0008, plus the replay and the cap, both decided under a transaction-level
-- advisory lock of the (subject, Agent) (class b"FGLS"), so concurrent opens cannot both pass.
-- Without a delegation id every call opens a new lease (the 0008 wire shape), within the cap.
DROP FUNCTION fgentic_memory.open_lease(text, bigint, text, text, text, text, integer);
CREATE FUNCTION fgentic_memory.open_lease(
    p_scope_key text, p_generation bigint, p_subject text,
    p_agent_namespace text, p_agent_name text, p_room text, p_seconds integer,
    p_delegation_id uuid DEFAULT NULL)
RETURNS TABLE (lease_id uuid, expires_at timestamptz)
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_lease fgentic_memory.delegation_lease;
    v_live bigint;
BEGIN
    IF p_seconds IS NULL OR p_seconds < 1 OR p_seconds > 540 THEN
        PERFORM fgentic_memory.refuse('INVALID_SPEC');
    END IF;
    PERFORM fgentic_memory.bound_transaction();
    PERFORM fgentic_memory.check_scope(
        p_scope_key, p_generation, p_subject, p_agent_namespace, p_agent_name, p_room, 'recall');
    PERFORM fgentic_memory.refuse_if_held(p_scope_key);
    PERFORM pg_advisory_xact_lock(1179077715, hashtext(
        format('%s|%s|%s', p_subject, p_agent_namespace, p_agent_name)));
    IF p_delegation_id IS NOT NULL THEN
        SELECT * INTO v_lease FROM fgentic_memory.delegation_lease l
         WHERE l.scope_key = p_scope_key AND l.delegation_id = p_delegation_id;
        IF FOUND THEN
            -- A replay gets the same lease, never a longer one; a delegation whose lease was
            -- closed, ran out or outlived its generation is not reopened.
            IF v_lease.closed_at IS NOT NULL OR v_lease.expires_at <= statement_timestamp()
               OR v_lease.consent_generation <> p_generation
            THEN
                PERFORM fgentic_memory.refuse('LEASE_MISSING');
            END IF;
            RETURN QUERY SELECT v_lease.lease_id, v_lease.expires_at;
            RETURN;
        END IF;
    END IF;
    SELECT count(*) INTO v_live
      FROM fgentic_memory.scope sc
      JOIN fgentic_memory.delegation_lease l ON l.scope_key = sc.scope_key
     WHERE sc.subject_mxid = p_subject
       AND sc.agent_namespace = p_agent_namespace
       AND sc.agent_name = p_agent_name
       AND l.closed_at IS NULL
       AND l.expires_at > statement_timestamp()
       AND l.consent_generation = sc.consent_generation
       AND sc.enabled;
    IF v_live >= fgentic_memory.max_live_leases() THEN
        PERFORM fgentic_memory.refuse('LEASE_LIMIT_REACHED');
    END IF;
    RETURN QUERY
        INSERT INTO fgentic_memory.delegation_lease AS l
               (scope_key, consent_generation, expires_at, delegation_id)
        VALUES (p_scope_key, p_generation, now() + make_interval(secs => p_seconds),
                p_delegation_id)
        RETURNING l.lease_id, l.expires_at;
END
$$;

-- Housekeeping: a closed lease's row now stays until its own expiry, so that its delegation
-- id is still known to the replay check above for as long as the lease could have lived.
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

-- 7. Privileges. The lock helper takes nothing the runtime could not take with the public
-- advisory-lock functions; granting it lets a runtime's per-entry forget wait as the
-- operator's erasure does.
REVOKE EXECUTE ON FUNCTION fgentic_memory.entry_lock(text, boolean),
    fgentic_memory.max_live_leases(),
    fgentic_memory.open_lease(text, bigint, text, text, text, text, integer, uuid)
    FROM PUBLIC;
GRANT EXECUTE ON FUNCTION fgentic_memory.entry_lock(text, boolean) TO fgentic_memory_runtime;

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
