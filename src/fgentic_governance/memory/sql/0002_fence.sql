-- fgentic_memory 0002: the write fence, enforced by triggers so that every writer (the
-- governed Python store, an adapted kagent issuing plain SQL, a psql session) passes the same
-- gate. A writer that does not name a scope and its consent generation is refused.

-- Scope record guard: bounds, immutable binding, monotonic generation, no silent re-enable.
CREATE FUNCTION fgentic_memory.scope_guard() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Validate before the CHECK constraints fire: their errors would echo the row.
    IF NEW.scope_key IS NULL
       OR NEW.scope_key !~ '^[a-z0-9]([-a-z0-9]*[a-z0-9])?/[a-z0-9]([-a-z0-9]*[a-z0-9])?$'
       OR NEW.subject_mxid IS NULL OR octet_length(NEW.subject_mxid) > 255
       OR NEW.subject_mxid !~ '^@[a-z0-9._=/+-]+:[A-Za-z0-9.-]+(:[0-9]{1,5})?$'
       OR NEW.origin_kind IS NULL
       OR NEW.origin_kind NOT IN ('native-local', 'remote-federated', 'bridged',
                                  'external-appservice', 'oauth-client')
       OR NEW.agent_namespace IS NULL OR NEW.agent_namespace !~ '^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'
       OR NEW.agent_name IS NULL OR NEW.agent_name !~ '^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'
       OR NEW.store_agent_name IS NULL
       OR NEW.store_agent_name !~ '^[A-Za-z0-9][A-Za-z0-9._/-]{0,252}$'
       OR NEW.control_room IS NULL OR octet_length(NEW.control_room) > 255
       OR NEW.control_room !~ '^![A-Za-z0-9._~+/=-]+(:[A-Za-z0-9.-]+(:[0-9]{1,5})?)?$'
       OR NEW.enabled IS NULL
       OR NEW.posture IS NULL
       OR NEW.posture NOT IN ('enabled', 'capture_disabled', 'fully_disabled')
       OR NEW.consent_generation IS NULL OR NEW.consent_generation < 0
       OR NEW.entry_cap IS NULL OR NEW.entry_cap NOT BETWEEN 1 AND 100
       OR NEW.max_fact_bytes IS NULL OR NEW.max_fact_bytes NOT BETWEEN 1 AND 512
       OR NEW.max_retention_days IS NULL OR NEW.max_retention_days NOT BETWEEN 1 AND 7
       OR NEW.hourly_operation_ceiling IS NULL
       OR NEW.hourly_operation_ceiling NOT BETWEEN 1 AND 60
       OR NEW.explicit_per_minute IS NULL OR NEW.explicit_per_minute NOT BETWEEN 1 AND 6
       OR NEW.explicit_burst IS NULL OR NEW.explicit_burst NOT BETWEEN 1 AND 3
    THEN
        PERFORM fgentic_memory.refuse('INVALID_SPEC');
    END IF;

    IF TG_OP = 'INSERT' THEN
        -- A scope is born disabled at generation 0: consent is always a later, explicit step.
        IF NEW.enabled OR NEW.consent_generation <> 0 THEN
            PERFORM fgentic_memory.refuse('INVALID_SPEC');
        END IF;
        RETURN NEW;
    END IF;

    -- The typed triple and the store spelling are the binding of every stored row.
    IF NEW.scope_key <> OLD.scope_key
       OR NEW.subject_mxid <> OLD.subject_mxid
       OR NEW.origin_kind <> OLD.origin_kind
       OR NEW.agent_namespace <> OLD.agent_namespace
       OR NEW.agent_name <> OLD.agent_name
       OR NEW.store_agent_name <> OLD.store_agent_name
       OR NEW.control_room <> OLD.control_room
       OR NEW.created_at <> OLD.created_at
    THEN
        PERFORM fgentic_memory.refuse('BINDING_CONFLICT');
    END IF;
    -- The maximum retention is immutable once set (ADR 0023 §25: an immutable maximum expiry).
    IF NEW.max_retention_days <> OLD.max_retention_days THEN
        PERFORM fgentic_memory.refuse('INVALID_SPEC');
    END IF;
    -- Generations only grow, and any consent transition advances one, so a re-enabled scope can
    -- never again accept or show anything stamped before the transition.
    IF NEW.consent_generation < OLD.consent_generation
       OR (NEW.enabled <> OLD.enabled AND NEW.consent_generation <= OLD.consent_generation)
    THEN
        PERFORM fgentic_memory.refuse('STALE_GENERATION');
    END IF;
    IF NEW.enabled AND NEW.origin_kind <> 'native-local' THEN
        -- ADR 0023 §30: v1 admits only a native local principal.
        PERFORM fgentic_memory.refuse('FEDERATION_DENIED');
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER scope_guard BEFORE INSERT OR UPDATE ON fgentic_memory.scope
    FOR EACH ROW EXECUTE FUNCTION fgentic_memory.scope_guard();

-- The write policy's high-confidence subset, so that a plain-SQL writer (an adapted kagent's
-- background save) cannot store what the Python write policy refuses. Fixed-shape secrets and
-- blatant instruction overrides only: the full, prose-aware policy runs in Python
-- (write_policy.py) before the store inserts. Input is NFKC-folded and stripped of invisible
-- characters first, like the Python side.
CREATE FUNCTION fgentic_memory.policy_text(p_text text) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT translate(
        CASE WHEN current_setting('server_encoding') = 'UTF8'
             THEN normalize(p_text, NFKC) ELSE p_text END,
        U&'\00AD\200B\200C\200D\200E\200F\2060\FEFF', '')
$$;

CREATE FUNCTION fgentic_memory.policy_reason(p_text text) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT CASE
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
    END
    FROM (SELECT fgentic_memory.policy_text(p_text) AS v) AS t
$$;

-- The envelope and size checks shared by inserts and content updates. Content is never
-- echoed: every refusal is a bare code.
CREATE FUNCTION fgentic_memory.check_payload(s fgentic_memory.scope, m fgentic_memory.memory)
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
    v_reason := coalesce(fgentic_memory.policy_reason(m.content),
                         fgentic_memory.policy_reason(m.metadata::text));
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

-- Capture gate: the scope is enabled for capture and the writer carries its generation.
CREATE FUNCTION fgentic_memory.check_capture(s fgentic_memory.scope, p_generation bigint)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF NOT s.enabled OR s.posture = 'fully_disabled' THEN
        PERFORM fgentic_memory.refuse('SCOPE_DISABLED');
    END IF;
    IF s.posture <> 'enabled' THEN
        PERFORM fgentic_memory.refuse('CAPTURE_DISABLED');
    END IF;
    IF p_generation IS DISTINCT FROM s.consent_generation THEN
        PERFORM fgentic_memory.refuse('STALE_GENERATION');
    END IF;
END
$$;

-- Lock the scope row for a gated write. UPDATE (not SELECT ... FOR UPDATE) so that the row
-- version changes: writers of one scope serialize on it, a withdrawal waits for an in-flight
-- write or the write waits for the withdrawal and then sees the new generation, and under
-- REPEATABLE READ/SERIALIZABLE a concurrent writer fails to serialize instead of counting the
-- cap from a stale snapshot.
CREATE FUNCTION fgentic_memory.lock_scope(p_scope_key text) RETURNS fgentic_memory.scope
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    s fgentic_memory.scope;
BEGIN
    IF p_scope_key IS NULL THEN
        PERFORM fgentic_memory.refuse('SCOPE_MISSING');
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

CREATE FUNCTION fgentic_memory.memory_before_insert() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    s fgentic_memory.scope;
    n bigint;
BEGIN
    -- Ids are opaque and chosen here: a caller-chosen id could carry content into receipts.
    NEW.id := gen_random_uuid()::text;
    -- The retention window is anchored at the database clock, never at a caller's timestamp.
    NEW.created_at := now();
    NEW.access_count := 0;
    NEW.metadata := coalesce(NEW.metadata, '{}'::jsonb);
    NEW.memory_type := coalesce(NEW.memory_type, 'fact');
    NEW.source_kind := coalesce(NEW.source_kind, 'unknown');
    NEW.write_reason := coalesce(NEW.write_reason, 'unspecified');
    NEW.confirmation_status := coalesce(NEW.confirmation_status, 'unknown');
    NEW.sensitivity := coalesce(NEW.sensitivity, 'normal');
    NEW.lifecycle := coalesce(NEW.lifecycle, 'active');

    s := fgentic_memory.lock_scope(NEW.scope_key);
    -- The row's attribution must be exactly the scope's subject and Agent: no cross-user or
    -- cross-Agent reuse of a scope. Checked before state so a stranger learns nothing of it.
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
    -- Expiry is mandatory and bounded by the scope's immutable maximum retention.
    IF NEW.expires_at IS NULL
       OR NEW.expires_at > now() + make_interval(days => s.max_retention_days)
    THEN
        PERFORM fgentic_memory.refuse('RETENTION_EXCEEDED');
    END IF;
    -- Expired rows are unreadable already; deleting them here keeps the physical row count,
    -- which the cap bounds, honest without waiting for the cleanup job.
    DELETE FROM fgentic_memory.memory
     WHERE scope_key = s.scope_key AND expires_at <= statement_timestamp();
    -- Counted under the scope lock taken above (a fresh snapshot per statement in READ
    -- COMMITTED), so concurrent writers cannot both see room for the last entry.
    SELECT count(*) INTO n FROM fgentic_memory.memory WHERE scope_key = s.scope_key;
    IF n >= s.entry_cap THEN
        PERFORM fgentic_memory.refuse('ENTRY_CAP_REACHED');
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER memory_before_insert BEFORE INSERT ON fgentic_memory.memory
    FOR EACH ROW EXECUTE FUNCTION fgentic_memory.memory_before_insert();

CREATE FUNCTION fgentic_memory.memory_before_update() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    s fgentic_memory.scope;
BEGIN
    IF NEW.id IS DISTINCT FROM OLD.id
       OR NEW.scope_key IS DISTINCT FROM OLD.scope_key
       OR NEW.agent_name IS DISTINCT FROM OLD.agent_name
       OR NEW.user_id IS DISTINCT FROM OLD.user_id
    THEN
        PERFORM fgentic_memory.refuse('BINDING_CONFLICT');
    END IF;
    -- Re-stamping a row with a newer generation would resurrect memory from before a
    -- withdrawal.
    IF NEW.consent_generation IS DISTINCT FROM OLD.consent_generation THEN
        PERFORM fgentic_memory.refuse('STALE_GENERATION');
    END IF;
    -- Expiry may only move earlier. This rejects kagent's prune-time TTL extension
    -- (expires_at = NOW() + INTERVAL '15 days' for often-read rows) and any other extension;
    -- created_at is the retention anchor and is fixed too.
    IF NEW.expires_at IS NULL OR NEW.expires_at > OLD.expires_at
       OR NEW.created_at IS DISTINCT FROM OLD.created_at
    THEN
        PERFORM fgentic_memory.refuse('EXPIRY_EXTENSION_DENIED');
    END IF;
    IF NEW.access_count IS NULL OR NEW.lifecycle IS NULL
       OR NEW.lifecycle NOT IN ('active', 'stale', 'superseded', 'suppressed')
    THEN
        PERFORM fgentic_memory.refuse('INVALID_SPEC');
    END IF;
    -- Access counts, earlier expiry and demotions (active -> stale/superseded/suppressed) only
    -- ever reduce what is readable and pass freely. Anything that adds or changes content, or
    -- makes a row readable again, is a write and passes the full gate under the scope lock.
    IF NEW.content IS DISTINCT FROM OLD.content
       OR NEW.embedding::text IS DISTINCT FROM OLD.embedding::text
       OR NEW.metadata IS DISTINCT FROM OLD.metadata
       OR NEW.memory_type IS DISTINCT FROM OLD.memory_type
       OR NEW.source_kind IS DISTINCT FROM OLD.source_kind
       OR NEW.write_reason IS DISTINCT FROM OLD.write_reason
       OR NEW.confirmation_status IS DISTINCT FROM OLD.confirmation_status
       OR NEW.sensitivity IS DISTINCT FROM OLD.sensitivity
       OR (NEW.lifecycle = 'active' AND OLD.lifecycle <> 'active')
    THEN
        s := fgentic_memory.lock_scope(NEW.scope_key);
        PERFORM fgentic_memory.check_capture(s, NEW.consent_generation);
        PERFORM fgentic_memory.check_payload(s, NEW);
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER memory_before_update BEFORE UPDATE ON fgentic_memory.memory
    FOR EACH ROW EXECUTE FUNCTION fgentic_memory.memory_before_update();
