-- fgentic_memory 0008: delegation leases (issue 17 §2, ADR 0023 §6, §19-§20).
--
-- Why: kagent's runtime sends (Agent, X-User-Id) with every memory call and nothing else - no
-- room, no consent generation. The bridge knows the room: before it dispatches a turn to a
-- memory-enabled Agent it asks the control API (which checks the control-room state exactly as
-- for !memory commands) to open a lease for one scope at its current generation. The memory API
-- may then enter a scope only through enter_delegation(), which finds the one scope of
-- (subject, Agent) with a live lease and signs the claim of 0007 for it. Without a lease the
-- runtime's calls read nothing and write nothing.
--
-- A lease is live while it is not closed, has not reached its expiry (at most 540 s after it
-- was opened, the delegation ceiling), and its generation is still the scope's current one of
-- an enabled, unheld scope. Withdrawal, `off`, `forget all` and offboarding all advance the
-- generation (0002), so every lease of the scope ends in the same transaction as the fence;
-- nothing has to find and close them.

-- 1. Two more refusal codes: no live lease for (subject, Agent), or more than one.
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
        ELSE 'FG999'
    END;
BEGIN
    IF v_state = 'FG999' THEN
        RAISE EXCEPTION USING ERRCODE = 'FG999', MESSAGE = 'INTERNAL_ERROR';
    END IF;
    RAISE EXCEPTION USING ERRCODE = v_state, MESSAGE = p_reason;
END
$$;

-- 2. The leases. Rows are small and content-free; closed and expired ones are pruned by
-- cleanup_expired() below.
CREATE TABLE fgentic_memory.delegation_lease (
    lease_id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    scope_key text NOT NULL REFERENCES fgentic_memory.scope (scope_key) ON DELETE CASCADE,
    consent_generation bigint NOT NULL,
    opened_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL,
    closed_at timestamptz,
    CHECK (expires_at > opened_at AND expires_at <= opened_at + interval '540 seconds')
);
CREATE INDEX delegation_lease_open ON fgentic_memory.delegation_lease (scope_key)
    WHERE closed_at IS NULL;

-- 3. Open: the scope must be enabled (or capture-disabled: recall stays) at the caller's
-- generation, for exactly this subject, Agent and room (check_scope, as enter_scope does), and
-- not held. Owner only: the control API opens leases after its room-state check; the runtime
-- role can never open one.
CREATE FUNCTION fgentic_memory.open_lease(
    p_scope_key text, p_generation bigint, p_subject text,
    p_agent_namespace text, p_agent_name text, p_room text, p_seconds integer)
RETURNS TABLE (lease_id uuid, expires_at timestamptz)
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_seconds IS NULL OR p_seconds < 1 OR p_seconds > 540 THEN
        PERFORM fgentic_memory.refuse('INVALID_SPEC');
    END IF;
    PERFORM fgentic_memory.bound_transaction();
    PERFORM fgentic_memory.check_scope(
        p_scope_key, p_generation, p_subject, p_agent_namespace, p_agent_name, p_room, 'recall');
    PERFORM fgentic_memory.refuse_if_held(p_scope_key);
    RETURN QUERY
        INSERT INTO fgentic_memory.delegation_lease AS l (scope_key, consent_generation, expires_at)
        VALUES (p_scope_key, p_generation, now() + make_interval(secs => p_seconds))
        RETURNING l.lease_id, l.expires_at;
END
$$;

-- 4. Close: idempotent; true when the lease existed for this scope and was open.
CREATE FUNCTION fgentic_memory.close_lease(p_lease_id uuid, p_scope_key text)
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

-- 5. Enter the one leased scope of (subject, Agent): the memory API's only way in. The lease
-- must be live at this statement's time; exactly one scope may qualify (two rooms leased at
-- once for the same pair would make the runtime's call ambiguous: refused, never guessed).
-- Then enter_scope's own checks run and sign the claim. Returns what an insert needs.
CREATE TYPE fgentic_memory.delegation_context AS (
    scope_key text, consent_generation bigint, store_agent_name text, max_expiry timestamptz,
    lease_expires_at timestamptz);

CREATE FUNCTION fgentic_memory.enter_delegation(
    p_subject text, p_agent_namespace text, p_agent_name text, p_mode text)
RETURNS fgentic_memory.delegation_context
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_found integer;
    v_key text;
    s fgentic_memory.scope;
    v_lease_expiry timestamptz;
    v_context fgentic_memory.scope_context;
BEGIN
    IF p_mode IS NULL OR p_mode NOT IN ('capture', 'recall') THEN
        PERFORM fgentic_memory.refuse('INVALID_SPEC');
    END IF;
    SELECT count(DISTINCT sc.scope_key), min(sc.scope_key)
      INTO v_found, v_key
      FROM fgentic_memory.scope sc
      JOIN fgentic_memory.delegation_lease l ON l.scope_key = sc.scope_key
     WHERE sc.subject_mxid = p_subject
       AND sc.agent_namespace = p_agent_namespace
       AND sc.agent_name = p_agent_name
       AND l.closed_at IS NULL
       AND l.expires_at > statement_timestamp()
       AND l.consent_generation = sc.consent_generation
       AND sc.enabled;
    IF v_found = 0 THEN
        PERFORM fgentic_memory.refuse('LEASE_MISSING');
    ELSIF v_found > 1 THEN
        PERFORM fgentic_memory.refuse('SCOPE_AMBIGUOUS');
    END IF;
    SELECT * INTO s FROM fgentic_memory.scope WHERE scope_key = v_key;
    SELECT max(l.expires_at) INTO v_lease_expiry FROM fgentic_memory.delegation_lease l
     WHERE l.scope_key = s.scope_key AND l.closed_at IS NULL
       AND l.consent_generation = s.consent_generation;
    v_context := fgentic_memory.enter_scope(
        s.scope_key, s.consent_generation, s.subject_mxid, s.agent_namespace, s.agent_name,
        s.control_room, p_mode);
    RETURN ROW(s.scope_key, s.consent_generation, v_context.store_agent_name,
               v_context.max_expiry, v_lease_expiry)::fgentic_memory.delegation_context;
END
$$;

-- 6. Housekeeping: closed or expired leases go with expired rows (a lease row is evidence of
-- nothing once it cannot be used).
CREATE OR REPLACE FUNCTION fgentic_memory.prune_leases() RETURNS bigint
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    n bigint;
BEGIN
    DELETE FROM fgentic_memory.delegation_lease
     WHERE closed_at IS NOT NULL OR expires_at <= statement_timestamp();
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$$;

-- 7. Privileges: the runtime may only enter a leased scope (and still enter_scope, for adapted
-- runtimes that carry the full claim themselves; see docs/memory.md §6a) and prune dead leases
-- beside expired rows (as it may run cleanup_expired). Opening and closing are the owner's.
REVOKE ALL ON fgentic_memory.delegation_lease FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION
    fgentic_memory.open_lease(text, bigint, text, text, text, text, integer),
    fgentic_memory.close_lease(uuid, text),
    fgentic_memory.enter_delegation(text, text, text, text),
    fgentic_memory.prune_leases()
    FROM PUBLIC;
GRANT EXECUTE ON FUNCTION fgentic_memory.enter_delegation(text, text, text, text),
    fgentic_memory.prune_leases()
    TO fgentic_memory_runtime;
