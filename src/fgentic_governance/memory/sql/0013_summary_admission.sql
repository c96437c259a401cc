-- 0013: a summary is admitted before the model summarises (ADR 0023 §42-43, issue 26).
--
-- kagent-adk 0.9.11 summarises a session on the Agent's own model before it calls the memory
-- API, and that request names no user (it carries the provider's key). When the Agent's model
-- route is the memory API's (its /v1/chat/completions), the memory API recognises the
-- summarisation request and admits it here first, like an embedding (sql/0009, sql/0011):
-- charged to the one leased scope of the Agent (LEASE_MISSING with none, SCOPE_AMBIGUOUS with
-- several), its input at most 16 KiB (SUMMARY_INPUT_TOO_LARGE), its turn in the cadence
-- reserved (at most one automatic save per min_user_turns leases: SUMMARY_CADENCE_REACHED),
-- and one summarisation consumed from the hourly ceiling. The automatic save that follows
-- takes the reservation instead of being charged a second summarisation; one that comes
-- without a reservation (a summary made elsewhere, or kagent's fallback to the raw text after
-- a refused summary) is checked and charged as before.

-- 1. One more refusal code.
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
        WHEN 'RECALL_LIMIT_REACHED' THEN 'FG021'
        WHEN 'SUMMARY_TOO_LARGE' THEN 'FG022'
        WHEN 'SUMMARY_CADENCE_REACHED' THEN 'FG023'
        WHEN 'SUMMARY_INPUT_TOO_LARGE' THEN 'FG024'
        ELSE 'FG999'
    END;
BEGIN
    IF v_state = 'FG999' THEN
        RAISE EXCEPTION USING ERRCODE = 'FG999', MESSAGE = 'INTERNAL_ERROR';
    END IF;
    RAISE EXCEPTION USING ERRCODE = v_state, MESSAGE = p_reason;
END
$$;

-- 2. Summaries admitted at the model route whose automatic save has not arrived yet. A
-- reservation counts in the cadence like a summary (the model work was done).
ALTER TABLE fgentic_memory.summary_cadence
    ADD COLUMN reserved bigint NOT NULL DEFAULT 0 CHECK (reserved >= 0);

-- The summariser's input bound (ADR 0023 §43). Mirrored by
-- fgentic_governance.memory.bounds.MAX_SUMMARY_INPUT_BYTES (a test holds them equal).
CREATE FUNCTION fgentic_memory.max_summary_input_bytes() RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT 16384 $$;

-- 3. The one scope of an Agent with a live lease, or a refusal: what a request that names no
-- user (an embedding, a summarisation) is charged to.
CREATE FUNCTION fgentic_memory.leased_scope(p_agent_namespace text, p_agent_name text)
RETURNS fgentic_memory.scope
LANGUAGE plpgsql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_found integer;
    v_key text;
    s fgentic_memory.scope;
BEGIN
    SELECT count(DISTINCT sc.scope_key), min(sc.scope_key)
      INTO v_found, v_key
      FROM fgentic_memory.scope sc
      JOIN fgentic_memory.delegation_lease l ON l.scope_key = sc.scope_key
     WHERE sc.agent_namespace = p_agent_namespace
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
    RETURN s;
END
$$;

CREATE OR REPLACE FUNCTION fgentic_memory.admit_agent_embedding(
    p_agent_namespace text, p_agent_name text)
RETURNS integer
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    s fgentic_memory.scope := fgentic_memory.leased_scope(p_agent_namespace, p_agent_name);
BEGIN
    PERFORM fgentic_memory.enter_scope(
        s.scope_key, s.consent_generation, s.subject_mxid, s.agent_namespace, s.agent_name,
        s.control_room, 'recall');
    PERFORM fgentic_memory.admit('embedding', 1, false);
    RETURN 1;
END
$$;

-- 4. A summarisation of p_input_bytes bytes of conversation, before the model is called.
CREATE FUNCTION fgentic_memory.admit_agent_summary(
    p_agent_namespace text, p_agent_name text, p_input_bytes integer)
RETURNS void
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    s fgentic_memory.scope := fgentic_memory.leased_scope(p_agent_namespace, p_agent_name);
BEGIN
    IF p_input_bytes IS NULL OR p_input_bytes < 0 THEN
        PERFORM fgentic_memory.refuse('INVALID_SPEC');
    END IF;
    IF p_input_bytes > fgentic_memory.max_summary_input_bytes() THEN
        PERFORM fgentic_memory.refuse('SUMMARY_INPUT_TOO_LARGE');
    END IF;
    IF s.max_summary_facts = 0 THEN
        PERFORM fgentic_memory.refuse('SUMMARY_TOO_LARGE');
    END IF;
    PERFORM fgentic_memory.enter_scope(
        s.scope_key, s.consent_generation, s.subject_mxid, s.agent_namespace, s.agent_name,
        s.control_room, 'capture');
    UPDATE fgentic_memory.summary_cadence c SET reserved = c.reserved + 1
     WHERE c.scope_key = s.scope_key
       AND (c.summaries + c.reserved + 1) * s.min_user_turns <= c.leases;
    IF NOT FOUND THEN
        PERFORM fgentic_memory.refuse('SUMMARY_CADENCE_REACHED');
    END IF;
    PERFORM fgentic_memory.admit('summarize', 1, false);
END
$$;

-- 5. The automatic save (sql/0011) now answers whether its summarisation was already charged
-- at the model route (it takes that reservation) or must be charged now.
DROP FUNCTION fgentic_memory.check_summary(integer);
CREATE FUNCTION fgentic_memory.check_summary(p_facts integer) RETURNS boolean
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_scope text;
    v_most integer;
BEGIN
    SELECT c.scope_key INTO v_scope FROM fgentic_memory.current_claim() c
     WHERE c.mode = 'capture';
    IF v_scope IS NULL THEN
        PERFORM fgentic_memory.refuse('LEASE_MISSING');
    END IF;
    SELECT least(10, s.max_summary_facts) INTO v_most
      FROM fgentic_memory.scope s WHERE s.scope_key = v_scope;
    IF p_facts IS NULL OR p_facts < 1 OR v_most IS NULL OR p_facts > v_most THEN
        PERFORM fgentic_memory.refuse('SUMMARY_TOO_LARGE');
    END IF;
    UPDATE fgentic_memory.summary_cadence c
       SET reserved = c.reserved - 1, summaries = c.summaries + 1
     WHERE c.scope_key = v_scope AND c.reserved > 0;
    IF FOUND THEN
        RETURN true;
    END IF;
    UPDATE fgentic_memory.summary_cadence c SET summaries = c.summaries + 1
      FROM fgentic_memory.scope s
     WHERE c.scope_key = v_scope AND s.scope_key = v_scope
       AND (c.summaries + c.reserved + 1) * s.min_user_turns <= c.leases;
    IF NOT FOUND THEN
        PERFORM fgentic_memory.refuse('SUMMARY_CADENCE_REACHED');
    END IF;
    RETURN false;
END
$$;

-- 6. Privileges: only the delegating role admits and checks.
REVOKE EXECUTE ON FUNCTION fgentic_memory.max_summary_input_bytes(),
    fgentic_memory.leased_scope(text, text), fgentic_memory.check_summary(integer),
    fgentic_memory.admit_agent_summary(text, text, integer)
    FROM PUBLIC;
GRANT EXECUTE ON FUNCTION fgentic_memory.check_summary(integer),
    fgentic_memory.admit_agent_summary(text, text, integer)
    TO fgentic_memory_delegate;
