-- 0011: per-delegation bounds (ADR 0023 §43, issue 26).
--
-- A delegation lease is one turn of one (subject, Agent): the bridge opens one before it hands a
-- turn to a memory-enabled Agent. kagent-adk 0.9.11 prefetches on a session's first turn with
-- one search per sentence of at least 30 characters, all in parallel and without a cap, and its
-- load_memory tool searches the same way; the two requests look alike. So the bound is on what
-- a lease admits: at most max_recalls_per_lease() = 8 searches are charged to one lease, which
-- makes eight the most a new session can issue, and an explicit load in the same turn takes one
-- of the eight. A search is charged to the oldest live lease of the scope with a recall left;
-- with none left it is refused (RECALL_LIMIT_REACHED), before any cost is admitted (the charge
-- and the admission are one transaction, so a refused search charges nothing). A scope may
-- lower the bound (its policy's prefetch.maxSubqueries, 0-8; 0 leaves kagent no recall at
-- all, since its prefetch and load_memory are the same request).
--
-- The runtime's automatic save is one summary of the session: at most ten facts (ADR 0023 §43),
-- or fewer by the scope's automaticSave.maxFacts (0-10). check_summary() refuses a larger one
-- (SUMMARY_TOO_LARGE) before its summarisation, saves and embeddings are admitted. And there is
-- at most one automatic save per five user turns (ADR 0023 §43), or per the scope's
-- automaticSave.minUserTurns (5-1000): the scope's leases are counted as they are opened, and a
-- summary is admitted only while the summaries so far stay within leases / minUserTurns
-- (SUMMARY_CADENCE_REACHED).
--
-- An embedding is charged to exactly one live delegation or refused: with several scopes of
-- the Agent leased at once (two users), admit_agent_embedding (sql/0009) let it through
-- uncharged; it is now SCOPE_AMBIGUOUS, as enter_delegation answers the same ambiguity.

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
        ELSE 'FG999'
    END;
BEGIN
    IF v_state = 'FG999' THEN
        RAISE EXCEPTION USING ERRCODE = 'FG999', MESSAGE = 'INTERNAL_ERROR';
    END IF;
    RAISE EXCEPTION USING ERRCODE = v_state, MESSAGE = p_reason;
END
$$;

-- 2. The scope's own bounds (the operator copies them from the MemoryScope's policy).
ALTER TABLE fgentic_memory.scope
    ADD COLUMN max_recalls integer NOT NULL DEFAULT 8 CHECK (max_recalls BETWEEN 0 AND 8),
    ADD COLUMN max_summary_facts integer NOT NULL DEFAULT 10
        CHECK (max_summary_facts BETWEEN 0 AND 10),
    ADD COLUMN min_user_turns integer NOT NULL DEFAULT 5
        CHECK (min_user_turns BETWEEN 5 AND 1000);

-- The cadence of automatic saves: leases opened (a replayed delegation opens none) and
-- summaries admitted, per scope, never reset. Owner only.
CREATE TABLE fgentic_memory.summary_cadence (
    scope_key text PRIMARY KEY REFERENCES fgentic_memory.scope (scope_key) ON DELETE CASCADE,
    leases bigint NOT NULL DEFAULT 0 CHECK (leases >= 0),
    summaries bigint NOT NULL DEFAULT 0 CHECK (summaries >= 0)
);
REVOKE ALL ON fgentic_memory.summary_cadence FROM PUBLIC;

CREATE FUNCTION fgentic_memory.count_lease() RETURNS trigger
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    INSERT INTO fgentic_memory.summary_cadence AS c (scope_key, leases)
    VALUES (NEW.scope_key, 1)
    ON CONFLICT (scope_key) DO UPDATE SET leases = c.leases + 1;
    RETURN NEW;
END
$$;
CREATE TRIGGER delegation_lease_counted AFTER INSERT ON fgentic_memory.delegation_lease
    FOR EACH ROW EXECUTE FUNCTION fgentic_memory.count_lease();

-- The recalls a lease has admitted. Mirrored by
-- fgentic_governance.memory.model.MAX_RECALLS_PER_LEASE (a test holds them equal).
ALTER TABLE fgentic_memory.delegation_lease
    ADD COLUMN recalls integer NOT NULL DEFAULT 0 CHECK (recalls >= 0);

CREATE FUNCTION fgentic_memory.max_recalls_per_lease() RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT 8 $$;

-- 3. Charge one search to a live lease of the scope this transaction entered for recall. Only
-- the claim names the scope (a caller cannot pick another), and only the delegating role may
-- call it. FOR UPDATE serialises the parallel searches of one prefetch: a second charge waits
-- for the first and then re-reads the row, so two can never take the last recall; one that
-- finds the lease used up after the wait is refused rather than moved to another lease (fail
-- closed; the bridge's next turn opens a fresh lease).
CREATE FUNCTION fgentic_memory.charge_recall() RETURNS uuid
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_scope text;
    v_generation bigint;
    v_lease uuid;
BEGIN
    SELECT c.scope_key, c.generation INTO v_scope, v_generation
      FROM fgentic_memory.current_claim() c
     WHERE c.mode = 'recall';
    IF v_scope IS NULL THEN
        PERFORM fgentic_memory.refuse('LEASE_MISSING');
    END IF;
    SELECT l.lease_id INTO v_lease
      FROM fgentic_memory.delegation_lease l
      JOIN fgentic_memory.scope s ON s.scope_key = l.scope_key
     WHERE l.scope_key = v_scope
       AND l.consent_generation = v_generation
       AND l.closed_at IS NULL
       AND l.expires_at > statement_timestamp()
       AND l.recalls < least(fgentic_memory.max_recalls_per_lease(), s.max_recalls)
     ORDER BY l.opened_at, l.lease_id
     LIMIT 1
       FOR UPDATE OF l;
    IF v_lease IS NULL THEN
        PERFORM fgentic_memory.refuse('RECALL_LIMIT_REACHED');
    END IF;
    UPDATE fgentic_memory.delegation_lease SET recalls = recalls + 1 WHERE lease_id = v_lease;
    RETURN v_lease;
END
$$;

-- 4. An automatic save of p_facts facts into the scope this transaction entered for capture:
-- its size, then its turn in the cadence (counted here, undone with the transaction if the
-- admission that follows is refused).
CREATE FUNCTION fgentic_memory.check_summary(p_facts integer) RETURNS void
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
    UPDATE fgentic_memory.summary_cadence c SET summaries = c.summaries + 1
      FROM fgentic_memory.scope s
     WHERE c.scope_key = v_scope AND s.scope_key = v_scope
       AND (c.summaries + 1) * s.min_user_turns <= c.leases;
    IF NOT FOUND THEN
        PERFORM fgentic_memory.refuse('SUMMARY_CADENCE_REACHED');
    END IF;
END
$$;

-- 5. Embeddings (sql/0009): exactly one leased scope of the Agent, or a refusal. Replaced in
-- place, so the delegate role keeps the grant sql/0010 gave it.
CREATE OR REPLACE FUNCTION fgentic_memory.admit_agent_embedding(
    p_agent_namespace text, p_agent_name text)
RETURNS integer
LANGUAGE plpgsql VOLATILE
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
    PERFORM fgentic_memory.enter_scope(
        s.scope_key, s.consent_generation, s.subject_mxid, s.agent_namespace, s.agent_name,
        s.control_room, 'recall');
    PERFORM fgentic_memory.admit('embedding', 1, false);
    RETURN v_found;
END
$$;

-- 6. Privileges: the owner reads the constant; only the delegating role charges and checks.
REVOKE EXECUTE ON FUNCTION fgentic_memory.max_recalls_per_lease(),
    fgentic_memory.charge_recall(), fgentic_memory.check_summary(integer),
    fgentic_memory.count_lease()
    FROM PUBLIC;
GRANT EXECUTE ON FUNCTION fgentic_memory.charge_recall(), fgentic_memory.check_summary(integer)
    TO fgentic_memory_delegate;
