-- 0023: posture floors (issue 38 §7): an administrator disables memory once, per Agent, per
-- namespace or cluster-wide, without patching every scope.
--
-- A floor is a row of posture_floor, written only by the operator (the schema owner) from a
-- MemoryPostureFloor object. The effective posture of a scope is the most restrictive of its
-- own posture and every floor that covers its Agent (cluster, its namespace, the Agent
-- itself): floor_posture() takes the maximum restriction, so a lower level, or the scope, can
-- never loosen what a higher one set (an 'enabled' floor is no floor).
--
-- Enforced where every other gate is, inside the fence:
--   * enter_scope()  (capture and recall; the delegate path enter_delegation() and the
--     embedding and summary admissions enter through it): POSTURE_FLOOR_DISABLED, or
--     POSTURE_FLOOR_CAPTURE_DISABLED for a capture under a capture_disabled floor;
--   * check_capture() (the insert and update triggers and save_fact()): the same, so a
--     runtime's own claim + INSERT meets the floor too;
--   * current_claim() (the view readable_memory and admit()): a capture or recall claim of a
--     scope under a fully_disabled floor is no claim, so a transaction that entered before the
--     floor was committed reads nothing more after it (READ COMMITTED: every statement sees
--     the floor as soon as it is committed).
-- Erasure ('erase' claims, the operator's fence, delete and verify) is never blocked by a
-- floor. The floor is read per statement; nothing caches it.
--
-- A floor may also carry a recall policy (sql/0022's, in the same columns as a scope's): the
-- effective recall policy of a scope becomes the meet of its own and of every floor over its
-- Agent (effective_recall_policy(), the one place it is computed), so a floor can only narrow
-- what the read view admits and what recall_withheld() counts.

CREATE TABLE fgentic_memory.posture_floor (
    floor_key text PRIMARY KEY CHECK (octet_length(floor_key) BETWEEN 1 AND 253),
    level text NOT NULL CHECK (level IN ('cluster', 'namespace', 'agent')),
    agent_namespace text NOT NULL DEFAULT '' CHECK (octet_length(agent_namespace) <= 63),
    agent_name text NOT NULL DEFAULT '' CHECK (octet_length(agent_name) <= 63),
    posture text NOT NULL CHECK (posture IN ('enabled', 'capture_disabled', 'fully_disabled')),
    -- The floor's recall policy (sql/0022): NULL does not narrow that dimension.
    recall_memory_types text[],
    recall_source_kinds text[],
    recall_confirmation_statuses text[],
    recall_sensitivities text[],
    recall_max_age_seconds integer,
    updated_at timestamptz NOT NULL DEFAULT now(),
    CHECK ((level = 'cluster' AND agent_namespace = '' AND agent_name = '')
        OR (level = 'namespace' AND agent_namespace <> '' AND agent_name = '')
        OR (level = 'agent' AND agent_namespace <> '' AND agent_name <> ''))
);
CREATE INDEX posture_floor_target ON fgentic_memory.posture_floor (agent_namespace, agent_name);
REVOKE ALL ON fgentic_memory.posture_floor FROM PUBLIC;
-- A floor's recall sets are validated as a scope's are (sql/0022's guard reads the same
-- column names): each NULL or 1..N distinct known values, the age 1 s .. 7 days.
CREATE TRIGGER posture_floor_recall_guard BEFORE INSERT OR UPDATE ON fgentic_memory.posture_floor
    FOR EACH ROW EXECUTE FUNCTION fgentic_memory.scope_recall_guard();

-- Every floor over one Agent: the cluster's, its namespace's, its own.
CREATE FUNCTION fgentic_memory.floors_over(p_agent_namespace text, p_agent_name text)
RETURNS SETOF fgentic_memory.posture_floor
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT f.* FROM fgentic_memory.posture_floor f
     WHERE f.level = 'cluster'
        OR (f.level = 'namespace' AND f.agent_namespace = p_agent_namespace)
        OR (f.level = 'agent' AND f.agent_namespace = p_agent_namespace
            AND f.agent_name = p_agent_name)
$$;

-- The most restrictive floor over one Agent: 'fully_disabled', 'capture_disabled' or
-- 'enabled' (no floor, or only 'enabled' ones).
CREATE FUNCTION fgentic_memory.floor_posture(p_agent_namespace text, p_agent_name text)
RETURNS text
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT CASE coalesce(max(CASE f.posture WHEN 'fully_disabled' THEN 2
                                            WHEN 'capture_disabled' THEN 1 ELSE 0 END), 0)
               WHEN 2 THEN 'fully_disabled' WHEN 1 THEN 'capture_disabled' ELSE 'enabled' END
      FROM fgentic_memory.floors_over(p_agent_namespace, p_agent_name) f
$$;

-- The meet of every floor's recall policy over one Agent (all NULL: no floor narrows).
CREATE FUNCTION fgentic_memory.floor_recall_policy(p_agent_namespace text, p_agent_name text)
RETURNS fgentic_memory.recall_policy
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v fgentic_memory.recall_policy := ROW(NULL, NULL, NULL, NULL, NULL);
    f fgentic_memory.posture_floor;
BEGIN
    FOR f IN SELECT * FROM fgentic_memory.floors_over(p_agent_namespace, p_agent_name) LOOP
        v := fgentic_memory.recall_policy_meet(v, ROW(
            f.recall_memory_types, f.recall_source_kinds, f.recall_confirmation_statuses,
            f.recall_sensitivities, f.recall_max_age_seconds)::fgentic_memory.recall_policy);
    END LOOP;
    RETURN v;
END
$$;

-- effective_recall_policy: as in 0022 (the scope's own), met with its Agent's floors'.
CREATE OR REPLACE FUNCTION fgentic_memory.effective_recall_policy(p_scope_key text)
RETURNS fgentic_memory.recall_policy
LANGUAGE sql STABLE
RETURN (SELECT fgentic_memory.recall_policy_meet(
                   fgentic_memory.scope_recall_policy(s.scope_key),
                   fgentic_memory.floor_recall_policy(s.agent_namespace, s.agent_name))
          FROM fgentic_memory.scope s WHERE s.scope_key = p_scope_key);

-- The floor's refusal for an access mode ('erase' is never refused).
CREATE FUNCTION fgentic_memory.check_floor(
    p_agent_namespace text, p_agent_name text, p_mode text)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_floor text;
BEGIN
    IF p_mode = 'erase' THEN
        RETURN;
    END IF;
    v_floor := fgentic_memory.floor_posture(p_agent_namespace, p_agent_name);
    IF v_floor = 'fully_disabled' THEN
        PERFORM fgentic_memory.refuse('POSTURE_FLOOR_DISABLED');
    END IF;
    IF v_floor = 'capture_disabled' AND p_mode = 'capture' THEN
        PERFORM fgentic_memory.refuse('POSTURE_FLOOR_CAPTURE_DISABLED');
    END IF;
END
$$;

-- The two new codes. refuse() is wrapped rather than rewritten: the migrations numbered just
-- before this one were written at the same time and may add codes of their own to refuse()'s
-- table; whatever table is in force when this applies keeps answering every other code.
ALTER FUNCTION fgentic_memory.refuse(text) RENAME TO refuse_listed;
CREATE FUNCTION fgentic_memory.refuse(p_reason text)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_reason = 'POSTURE_FLOOR_DISABLED' THEN
        RAISE EXCEPTION USING ERRCODE = 'FG040', MESSAGE = p_reason;
    ELSIF p_reason = 'POSTURE_FLOOR_CAPTURE_DISABLED' THEN
        RAISE EXCEPTION USING ERRCODE = 'FG041', MESSAGE = p_reason;
    END IF;
    PERFORM fgentic_memory.refuse_listed(p_reason);
END
$$;

-- check_capture: as in 0014, then the floor (the triggers and save_fact() call it).
CREATE OR REPLACE FUNCTION fgentic_memory.check_capture(
    s fgentic_memory.scope, p_generation bigint)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF NOT s.enabled OR s.posture = 'fully_disabled' THEN
        PERFORM fgentic_memory.refuse('SCOPE_DISABLED');
    END IF;
    IF s.posture <> 'enabled' THEN
        PERFORM fgentic_memory.refuse('CAPTURE_DISABLED');
    END IF;
    PERFORM fgentic_memory.check_floor(s.agent_namespace, s.agent_name, 'capture');
    IF p_generation IS DISTINCT FROM s.consent_generation THEN
        PERFORM fgentic_memory.refuse('STALE_GENERATION');
    END IF;
END
$$;

-- enter_scope: as in 0015, with the floor after the scope's own posture.
CREATE OR REPLACE FUNCTION fgentic_memory.enter_scope(
    p_scope_key text, p_generation bigint, p_subject text,
    p_agent_namespace text, p_agent_name text, p_room text, p_mode text)
RETURNS fgentic_memory.scope_context
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    s fgentic_memory.scope;
    r record;
    v_held boolean;
    v_secret bytea;
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        PERFORM fgentic_memory.refuse('ISOLATION_REFUSED');
    END IF;
    PERFORM fgentic_memory.bound_transaction();
    -- Before the scope is read: its statement then takes its snapshot after any wait here.
    PERFORM fgentic_memory.entry_lock(p_scope_key, false);
    -- check_scope(), inline.
    IF p_mode IS NULL OR p_mode NOT IN ('capture', 'recall', 'erase') THEN
        PERFORM fgentic_memory.refuse('INVALID_SPEC');
    END IF;
    SELECT sc AS s,
           EXISTS (SELECT 1 FROM fgentic_memory.scope_hold h
                    WHERE h.scope_key = p_scope_key) AS held,
           (SELECT k.secret FROM fgentic_memory.claim_key k) AS secret
      INTO r
      FROM fgentic_memory.scope sc WHERE sc.scope_key = p_scope_key;
    IF NOT FOUND THEN
        PERFORM fgentic_memory.refuse('SCOPE_MISSING');
    END IF;
    s := r.s;
    v_held := r.held;
    v_secret := r.secret;
    IF p_subject IS DISTINCT FROM s.subject_mxid THEN
        PERFORM fgentic_memory.refuse('CONSENT_SUBJECT_MISMATCH');
    END IF;
    IF p_agent_namespace IS DISTINCT FROM s.agent_namespace
       OR p_agent_name IS DISTINCT FROM s.agent_name
       OR p_room IS DISTINCT FROM s.control_room
    THEN
        PERFORM fgentic_memory.refuse('SCOPE_MISSING');
    END IF;
    IF p_mode = 'capture' THEN
        IF NOT s.enabled OR s.posture = 'fully_disabled' THEN
            PERFORM fgentic_memory.refuse('SCOPE_DISABLED');
        END IF;
        IF s.posture <> 'enabled' THEN
            PERFORM fgentic_memory.refuse('CAPTURE_DISABLED');
        END IF;
    ELSIF p_mode = 'recall' THEN
        IF NOT s.enabled OR s.posture = 'fully_disabled' THEN
            PERFORM fgentic_memory.refuse('SCOPE_DISABLED');
        END IF;
    END IF;
    PERFORM fgentic_memory.check_floor(s.agent_namespace, s.agent_name, p_mode);
    IF p_generation IS DISTINCT FROM s.consent_generation THEN
        PERFORM fgentic_memory.refuse('STALE_GENERATION');
    END IF;
    -- A per-entry forget ('erase') is never blocked: erasure needs no consent.
    IF p_mode <> 'erase' AND v_held THEN
        PERFORM fgentic_memory.refuse('SCOPE_DISABLED');
    END IF;
    -- claim_mac(), inline (a NULL key signs nothing that verifies, as before).
    PERFORM set_config('fgentic_memory.claim',
        format('%s|%s|%s|%s', p_mode, p_generation, p_scope_key,
               encode(sha256(v_secret || sha256(v_secret || convert_to(
                   format('fgentic-claim|%s|%s|%s|%s', pg_current_xact_id(), p_mode,
                          p_generation, p_scope_key), 'UTF8'))), 'hex')),
        true);
    -- Informational only: nothing trusts these.
    PERFORM set_config('fgentic_memory.scope_key', p_scope_key, true);
    PERFORM set_config('fgentic_memory.generation', p_generation::text, true);
    RETURN ROW(s.store_agent_name, now() + make_interval(days => s.max_retention_days))::
        fgentic_memory.scope_context;
END
$$;

-- current_claim: as in 0015; a capture or recall claim of a scope under a fully_disabled
-- floor is no claim (the view shows nothing, admit() refuses), from the first statement
-- after the floor is committed, even inside a transaction that entered before it.
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
       OR v_token !~ '^(capture|recall|erase)\|[0-9]+\|[a-z0-9/-]+\|[0-9a-f]+$'
       OR current_setting('transaction_isolation') <> 'read committed'
    THEN
        RETURN;
    END IF;
    v_part := string_to_array(v_token, '|');
    IF octet_length(v_part[2]) > 18 OR octet_length(v_part[4]) <> 64
       OR fgentic_memory.claim_mac(v_xact, v_part[1], v_part[2]::bigint, v_part[3])
          IS DISTINCT FROM v_part[4]
    THEN
        RETURN;
    END IF;
    IF v_part[1] <> 'erase' AND EXISTS (
        SELECT 1 FROM fgentic_memory.scope sc
         WHERE sc.scope_key = v_part[3]
           AND fgentic_memory.floor_posture(sc.agent_namespace, sc.agent_name)
               = 'fully_disabled')
    THEN
        RETURN;
    END IF;
    scope_key := v_part[3];
    generation := v_part[2]::bigint;
    mode := v_part[1];
    RETURN NEXT;
END
$$;

REVOKE EXECUTE ON FUNCTION fgentic_memory.floors_over(text, text) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION fgentic_memory.floor_posture(text, text) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION fgentic_memory.floor_recall_policy(text, text) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION fgentic_memory.check_floor(text, text, text) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION fgentic_memory.refuse(text) FROM PUBLIC;
