-- 0014: a cheaper write gate (issue 26: the fenced insert was 1.6-1.7x a plain insert).
--
-- 1. lock_scope() took the scope row by updating it (last_gated_at, written and never read):
--    a new row version, its WAL and index work on every insert and admission. It now locks
--    the row (FOR NO KEY UPDATE, the lock an UPDATE of non-key columns takes), which
--    serialises with the fence's UPDATE of the scope row in the same way.
-- 2. check_payload() scanned the metadata's text with the write policy even when it is the
--    empty object, as it is for every governed writer; it now scans only non-empty metadata.
-- 3. policy_reason() is a SQL function whose normalised text was a flattened subquery, so
--    the NFKC normalisation ran once per pattern (eleven times). It now normalises once; the
--    patterns are the same, each its own scan (one alternation of them was measured slower:
--    the regex engine then loses each pattern's fixed-string prefilter).
--    All three keep their refusals.

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
    -- A row lock, not an update: it conflicts with the fence's UPDATE of the row exactly as
    -- an update did, and after a wait returns the row as the fence left it (READ
    -- COMMITTED), without writing a new row version per insert.
    SELECT * INTO s FROM fgentic_memory.scope
     WHERE scope_key = p_scope_key
       FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        PERFORM fgentic_memory.refuse('SCOPE_MISSING');
    END IF;
    RETURN s;
END
$$;

CREATE OR REPLACE FUNCTION fgentic_memory.check_payload(s fgentic_memory.scope, m fgentic_memory.memory)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_reason text;
BEGIN
    IF m.content IS NULL OR m.content = '' THEN
        PERFORM fgentic_memory.refuse('INVALID_SPEC');
    END IF;
    -- octet_length: the bound is UTF-8 bytes, not characters.
    IF octet_length(m.content) > s.max_fact_bytes THEN
        PERFORM fgentic_memory.refuse('FACT_TOO_LARGE');
    END IF;
    -- Metadata could smuggle a second, unbounded fact; bound it too.
    IF m.metadata IS NULL OR jsonb_typeof(m.metadata) <> 'object' THEN
        PERFORM fgentic_memory.refuse('INVALID_SPEC');
    END IF;
    IF octet_length(m.metadata::text) > 1024 THEN
        PERFORM fgentic_memory.refuse('FACT_TOO_LARGE');
    END IF;
    -- After the size bounds, so the scan only ever sees bounded input.
    -- Empty metadata (every governed writer's) has nothing to scan.
    v_reason := fgentic_memory.policy_reason(m.content);
    IF v_reason IS NULL AND m.metadata <> '{}'::jsonb THEN
        v_reason := fgentic_memory.policy_reason(m.metadata::text);
    END IF;
    IF v_reason IS NOT NULL THEN
        PERFORM fgentic_memory.refuse(v_reason);
    END IF;
    IF m.memory_type IS NULL
       OR m.memory_type NOT IN ('preference', 'fact', 'decision', 'instruction',
                                'relationship', 'task_state', 'working_note')
       OR m.source_kind IS NULL
       OR m.source_kind NOT IN ('user_message', 'assistant_response', 'automatic_summary',
                                'save_memory_tool', 'unknown')
       OR m.write_reason IS NULL
       OR m.write_reason NOT IN ('explicit_user_request', 'user_preference_extracted',
                                 'automatic_summary', 'task_checkpoint', 'unspecified')
       OR m.confirmation_status IS NULL
       OR m.confirmation_status NOT IN ('user_confirmed', 'model_inferred', 'unknown')
       OR m.sensitivity IS NULL OR m.sensitivity NOT IN ('normal', 'personal', 'sensitive')
       OR m.lifecycle IS NULL
       OR m.lifecycle NOT IN ('active', 'stale', 'superseded', 'suppressed')
    THEN
        PERFORM fgentic_memory.refuse('INVALID_SPEC');
    END IF;
    -- A user confirmation is only as good as its source: it must come from the user's own
    -- explicit request, never from a model's summary that claims it.
    IF m.confirmation_status = 'user_confirmed'
       AND (m.source_kind <> 'user_message' OR m.write_reason <> 'explicit_user_request')
    THEN
        PERFORM fgentic_memory.refuse('INVALID_SPEC');
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION fgentic_memory.policy_reason(p_text text) RETURNS text
LANGUAGE plpgsql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v text := fgentic_memory.policy_text(p_text);
BEGIN
    RETURN CASE
        WHEN v ~ '-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY'
          OR v ~ '\m(AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AIPA|ANPA|ANVA|AROA|APKA)[A-Z0-9]{16}\M'
          OR v ~ '\meyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{4,}'
          OR v ~ ('\m(gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{20,}'
                  '|glpat-[A-Za-z0-9_-]{20,}|sk-(proj-|ant-|live-|test-)?[A-Za-z0-9_-]{20,}'
                  '|(sk|rk|pk)_(live|test)_[A-Za-z0-9]{16,}|xox[abposr]-[A-Za-z0-9-]{10,}'
                  '|AIza[0-9A-Za-z_-]{35}|hf_[A-Za-z0-9]{30,}|syt_[A-Za-z0-9_]{10,}'
                  '|mct_[A-Za-z0-9_]{10,})')
          OR v ~* '\mbearer\s+(?=[A-Za-z._~+/=-]*[0-9])[A-Za-z0-9._~+/=-]{12,}'
          OR v ~* ('\m(password|passwd|pwd|passphrase|passcode|api[_-]?key|apikey'
                   '|client[_-]?secret|access[_-]?token|auth[_-]?token|secret[_-]?key'
                   '|private[_-]?key)["'']?\s*(:|=>|=)\s*["'']?[^\s"'']{3,}')
          OR v ~* '\m[a-z][a-z0-9+.-]{1,15}://[^\s/:@]{1,64}:[^\s/@]{1,128}@'
        THEN 'CREDENTIAL_CONTENT'
        WHEN v ~* ('\m(ignore|disregard|forget|override)\s+((all|any|the|your|my)\s+){0,2}'
                   '(previous|prior|above|earlier|preceding|system|safety)\s+'
                   '(instructions?|rules?|prompts?|guidelines?|guardrails?)\M')
          OR v ~* '\m(new|override|replace|reveal|ignore)\s+((the|your)\s+)?system\s+prompt\M'
          OR v ~* ('\m(from\s+now\s+on|henceforth)[\s,:;-]{0,3}(you|the\s+assistant'
                   '|the\s+agent)\s+(must|will|shall|should)\M')
          OR v ~* '\m(always|unconditionally|blindly)\s+(obey|comply|approve|bypass)\M'
        THEN 'HIGH_RISK_INSTRUCTION_CONTENT'
    END;
END
$$;
