-- 0015: one pass through the write gate (the fenced insert was 1.48x a plain insert).
--
-- Same gate, same refusals (codes and SQLSTATEs), same order; fewer statements per save:
-- 1. enter_scope() inlines check_scope() and reads the scope row, its hold and the claim key
--    in one statement (was three, each a separate function), then signs the claim as
--    claim_mac() does.
-- 2. The insert trigger verifies the claim itself (the MAC of this transaction's token,
--    recomputed from the owner-only key exactly as current_claim() does; nothing is cached,
--    so a token the runtime writes is still checked against the key), reads the key and the
--    hold in one statement, and counts the scope's rows and its expired ones in one scan: the
--    expired-row DELETE and a recount run only when an expired row exists (the cap still
--    counts unexpired rows under the scope lock, in a snapshot taken after the lock).
-- 3. The token's shape check: '[0-9]{1,18}' and '[0-9a-f]{64}' made the regex cost ~13 us;
--    '+' plus the two lengths accepts exactly the same tokens (no part can contain '|').
--    current_claim() uses the same check.
-- 4. policy_reason(): an ASCII text is its own NFKC form (nothing to normalise or strip),
--    and the costliest patterns run only when a literal every match must contain is present
--    (case-sensitive literals by strpos; the case-insensitive ones by a literal regex with
--    the same case folding). Every pattern is unchanged; a prefilter only skips a pattern
--    that cannot match.
-- The foreign key, the scope-row lock, the hold, the bounds and the write policy all stay.

-- 1. enter_scope: as in 0010.
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

-- 2. The insert gate: as in 0007 with lock_scope() of 0014, in fewer statements.
CREATE OR REPLACE FUNCTION fgentic_memory.memory_before_insert() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    s fgentic_memory.scope;
    n bigint;
    v_expired bigint;
    v_token text := current_setting('fgentic_memory.claim', true);
    v_xact xid8 := pg_current_xact_id_if_assigned();
    v_part text[];
    v_secret bytea;
    v_held boolean;
BEGIN
    -- The claim first, before the scope row is locked or its state revealed: the key and the
    -- hold in one read (the hold is acted on only after the claim verified).
    SELECT (SELECT k.secret FROM fgentic_memory.claim_key k),
           EXISTS (SELECT 1 FROM fgentic_memory.scope_hold h WHERE h.scope_key = NEW.scope_key)
      INTO v_secret, v_held;
    IF v_token IS NULL OR v_xact IS NULL OR octet_length(v_token) > 1024
       OR v_token !~ '^(capture|recall|erase)\|[0-9]+\|[a-z0-9/-]+\|[0-9a-f]+$'
       OR current_setting('transaction_isolation') <> 'read committed'
    THEN
        PERFORM fgentic_memory.refuse('SCOPE_MISSING');
    END IF;
    -- No part can contain '|': the same tokens as '[0-9]{1,18}' and '[0-9a-f]{64}'.
    v_part := string_to_array(v_token, '|');
    IF octet_length(v_part[2]) > 18 OR octet_length(v_part[4]) <> 64 THEN
        PERFORM fgentic_memory.refuse('SCOPE_MISSING');
    END IF;
    -- claim_mac() of this transaction, inline; then the claim's scope must be the row's.
    IF encode(sha256(v_secret || sha256(v_secret || convert_to(
           format('fgentic-claim|%s|%s|%s|%s', v_xact, v_part[1], v_part[2]::bigint, v_part[3]),
           'UTF8'))), 'hex') IS DISTINCT FROM v_part[4]
       OR v_part[3] IS DISTINCT FROM NEW.scope_key
    THEN
        PERFORM fgentic_memory.refuse('SCOPE_MISSING');
    END IF;
    IF v_part[2]::bigint IS DISTINCT FROM NEW.consent_generation THEN
        PERFORM fgentic_memory.refuse('STALE_GENERATION');
    END IF;
    NEW.id := gen_random_uuid()::text;
    NEW.created_at := now();
    NEW.access_count := 0;
    NEW.metadata := coalesce(NEW.metadata, '{}'::jsonb);
    NEW.memory_type := coalesce(NEW.memory_type, 'fact');
    NEW.source_kind := coalesce(NEW.source_kind, 'unknown');
    NEW.write_reason := coalesce(NEW.write_reason, 'unspecified');
    NEW.confirmation_status := coalesce(NEW.confirmation_status, 'unknown');
    NEW.sensitivity := coalesce(NEW.sensitivity, 'normal');
    NEW.lifecycle := coalesce(NEW.lifecycle, 'active');

    -- lock_scope(), inline: bounds, hold, then the row lock that serialises with the fence.
    PERFORM fgentic_memory.bound_transaction();
    IF v_held THEN
        PERFORM fgentic_memory.refuse('SCOPE_DISABLED');
    END IF;
    SELECT * INTO s FROM fgentic_memory.scope
     WHERE scope_key = NEW.scope_key
       FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        PERFORM fgentic_memory.refuse('SCOPE_MISSING');
    END IF;
    IF NEW.user_id IS DISTINCT FROM s.subject_mxid THEN
        PERFORM fgentic_memory.refuse('CONSENT_SUBJECT_MISMATCH');
    END IF;
    IF NEW.agent_name IS DISTINCT FROM s.store_agent_name THEN
        PERFORM fgentic_memory.refuse('SCOPE_MISSING');
    END IF;
    PERFORM fgentic_memory.check_capture(s, NEW.consent_generation);
    PERFORM fgentic_memory.check_payload(s, NEW);
    IF NEW.lifecycle <> 'active' OR NEW.superseded_by IS NOT NULL THEN
        PERFORM fgentic_memory.refuse('INVALID_SPEC');
    END IF;
    IF NEW.expires_at IS NULL
       OR NEW.expires_at > now() + make_interval(days => s.max_retention_days)
    THEN
        PERFORM fgentic_memory.refuse('RETENTION_EXCEEDED');
    END IF;
    -- The cap, under the scope lock, in a statement after it (a fresh snapshot): expired rows
    -- are deleted first, as before, but only looked for in the same scan as the count.
    SELECT count(*), count(*) FILTER (WHERE m.expires_at <= statement_timestamp())
      INTO n, v_expired
      FROM fgentic_memory.memory m WHERE m.scope_key = s.scope_key;
    IF v_expired > 0 THEN
        DELETE FROM fgentic_memory.memory
         WHERE scope_key = s.scope_key AND expires_at <= statement_timestamp();
        SELECT count(*) INTO n FROM fgentic_memory.memory WHERE scope_key = s.scope_key;
    END IF;
    IF n >= s.entry_cap THEN
        PERFORM fgentic_memory.refuse('ENTRY_CAP_REACHED');
    END IF;
    RETURN NEW;
END
$$;

-- 3. current_claim: as in 0010, with the cheaper shape check of the insert gate.
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
    scope_key := v_part[3];
    generation := v_part[2]::bigint;
    mode := v_part[1];
    RETURN NEXT;
END
$$;

-- 4. The write policy: as in 0014, the same patterns behind exact prefilters.
CREATE OR REPLACE FUNCTION fgentic_memory.policy_reason(p_text text) RETURNS text
LANGUAGE plpgsql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    -- policy_text(), inline; ASCII is already NFKC and has none of the stripped characters.
    v text := CASE
        WHEN octet_length(p_text) = length(p_text)
             AND current_setting('server_encoding') = 'UTF8' THEN p_text
        ELSE translate(
            CASE WHEN current_setting('server_encoding') = 'UTF8'
                 THEN normalize(p_text, NFKC) ELSE p_text END,
            U&'\00AD\200B\200C\200D\200E\200F\2060\FEFF', '') END;
BEGIN
    RETURN CASE
        WHEN (strpos(v, '-----BEGIN ') > 0 AND v ~ '-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY')
          OR v ~ '\m(AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AIPA|ANPA|ANVA|AROA|APKA)[A-Z0-9]{16}\M'
          OR (strpos(v, 'eyJ') > 0
              AND v ~ '\meyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{4,}')
          OR ((strpos(v, '_') > 0 OR strpos(v, '-') > 0 OR strpos(v, 'AIza') > 0)
              AND v ~ ('\m(gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{20,}'
                  '|glpat-[A-Za-z0-9_-]{20,}|sk-(proj-|ant-|live-|test-)?[A-Za-z0-9_-]{20,}'
                  '|(sk|rk|pk)_(live|test)_[A-Za-z0-9]{16,}|xox[abposr]-[A-Za-z0-9-]{10,}'
                  '|AIza[0-9A-Za-z_-]{35}|hf_[A-Za-z0-9]{30,}|syt_[A-Za-z0-9_]{10,}'
                  '|mct_[A-Za-z0-9_]{10,})'))
          OR (v ~* 'bearer'
              AND v ~* '\mbearer\s+(?=[A-Za-z._~+/=-]*[0-9])[A-Za-z0-9._~+/=-]{12,}')
          OR ((strpos(v, ':') > 0 OR strpos(v, '=') > 0)
              AND v ~* ('\m(password|passwd|pwd|passphrase|passcode|api[_-]?key|apikey'
                   '|client[_-]?secret|access[_-]?token|auth[_-]?token|secret[_-]?key'
                   '|private[_-]?key)["'']?\s*(:|=>|=)\s*["'']?[^\s"'']{3,}'))
          OR (strpos(v, '://') > 0
              AND v ~* '\m[a-z][a-z0-9+.-]{1,15}://[^\s/:@]{1,64}:[^\s/@]{1,128}@')
        THEN 'CREDENTIAL_CONTENT'
        -- Each pattern below contains one of these words.
        WHEN v ~* ('(ignore|disregard|forget|override|prompt|henceforth|now'
                   '|obey|comply|approve|bypass)')
         AND (v ~* ('\m(ignore|disregard|forget|override)\s+((all|any|the|your|my)\s+){0,2}'
                   '(previous|prior|above|earlier|preceding|system|safety)\s+'
                   '(instructions?|rules?|prompts?|guidelines?|guardrails?)\M')
          OR v ~* '\m(new|override|replace|reveal|ignore)\s+((the|your)\s+)?system\s+prompt\M'
          OR v ~* ('\m(from\s+now\s+on|henceforth)[\s,:;-]{0,3}(you|the\s+assistant'
                   '|the\s+agent)\s+(must|will|shall|should)\M')
          OR v ~* '\m(always|unconditionally|blindly)\s+(obey|comply|approve|bypass)\M')
        THEN 'HIGH_RISK_INSTRUCTION_CONTENT'
    END;
END
$$;
