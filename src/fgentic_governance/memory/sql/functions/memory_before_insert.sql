-- requires: functions/bound_transaction, functions/check_capture, functions/check_entry_cap, functions/check_payload, functions/claim_sign, functions/refuse
-- The insert gate of every writer but save_fact() (see triggers/memory_before_insert.sql).
CREATE OR REPLACE FUNCTION fgentic_memory.memory_before_insert() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    s fgentic_memory.scope;
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
    -- claim_mac() of this transaction with the key read above; then the claim's scope must
    -- be the row's.
    IF fgentic_memory.claim_sign(v_secret, v_xact, v_part[1], v_part[2]::bigint, v_part[3])
           IS DISTINCT FROM v_part[4]
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
    -- The cap, under the scope lock, as save_fact() counts it.
    PERFORM fgentic_memory.check_entry_cap(s);
    RETURN NEW;
END
$$;

REVOKE ALL ON FUNCTION fgentic_memory.memory_before_insert()
    FROM PUBLIC, fgentic_memory_runtime, fgentic_memory_delegate;
