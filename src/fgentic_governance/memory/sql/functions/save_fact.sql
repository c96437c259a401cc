-- requires: functions/bound_transaction, functions/check_binding, functions/check_capture, functions/check_entry_cap, functions/check_payload, functions/entry_lock, functions/refuse
CREATE OR REPLACE FUNCTION fgentic_memory.save_fact(
    p_scope_key text, p_generation bigint, p_subject text,
    p_agent_namespace text, p_agent_name text, p_room text,
    p_content text, p_embedding vector, p_metadata jsonb, p_ttl interval,
    p_memory_type text, p_source_kind text, p_write_reason text,
    p_confirmation_status text, p_sensitivity text)
RETURNS text
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    s fgentic_memory.scope;
    m fgentic_memory.memory;
    r record;
    v_void text;
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        PERFORM fgentic_memory.refuse('ISOLATION_REFUSED');
    END IF;
    v_void := fgentic_memory.bound_transaction();
    -- Before the scope is read, as in enter_scope: an entrant queued behind an erasure then
    -- reads the scope as the fence left it.
    v_void := fgentic_memory.entry_lock(p_scope_key, false);
    -- The row lock serialises with the fence's UPDATE of the scope row and with other writers
    -- of the scope (the cap). The hold is read in the same statement, so from a snapshot
    -- taken before any wait for the lock, as the trigger reads it before its lock: a hold
    -- placed after that is followed by the fence, which this save then waits for (and is
    -- refused by its new generation) or which waits for this save and deletes its row.
    SELECT sc AS s,
           EXISTS (SELECT 1 FROM fgentic_memory.scope_hold h
                    WHERE h.scope_key = p_scope_key) AS held
      INTO r
      FROM fgentic_memory.scope sc WHERE sc.scope_key = p_scope_key
       FOR NO KEY UPDATE OF sc;
    IF NOT FOUND THEN
        PERFORM fgentic_memory.refuse('SCOPE_MISSING');
    END IF;
    s := r.s;
    -- enter_scope's checks, in its order (check_capture() is the trigger's, the same three).
    v_void := fgentic_memory.check_binding(s, p_subject, p_agent_namespace, p_agent_name,
                                           p_room);
    v_void := fgentic_memory.check_capture(s, p_generation);
    IF r.held THEN
        PERFORM fgentic_memory.refuse('SCOPE_DISABLED');
    END IF;
    IF p_ttl IS NOT NULL AND p_ttl <= interval '0' THEN
        PERFORM fgentic_memory.refuse('INVALID_SPEC');
    END IF;
    -- The row the trigger would have completed, then its payload checks.
    m.id := gen_random_uuid()::text;
    m.agent_name := s.store_agent_name;
    m.user_id := s.subject_mxid;
    m.content := p_content;
    m.embedding := p_embedding;
    m.metadata := p_metadata;
    m.created_at := now();
    m.expires_at := least(now() + make_interval(days => s.max_retention_days),
                          now() + p_ttl);
    m.access_count := 0;
    m.scope_key := s.scope_key;
    m.consent_generation := s.consent_generation;
    m.memory_type := p_memory_type;
    m.source_kind := p_source_kind;
    m.write_reason := p_write_reason;
    m.confirmation_status := p_confirmation_status;
    m.sensitivity := p_sensitivity;
    m.lifecycle := 'active';
    v_void := fgentic_memory.check_payload(s, m);
    -- The cap, under the scope lock, as the trigger counts it.
    v_void := fgentic_memory.check_entry_cap(s);
    v_void := set_config('fgentic_memory.gate', 'on', true);
    INSERT INTO fgentic_memory.memory SELECT m.*;  -- the row checked above, as it is
    v_void := set_config('fgentic_memory.gate', '', true);
    RETURN m.id;
END
$$;

REVOKE ALL ON FUNCTION fgentic_memory.save_fact(text,bigint,text,text,text,text,text,vector,jsonb,interval,text,text,text,text,text)
    FROM PUBLIC, fgentic_memory_runtime, fgentic_memory_delegate;
GRANT EXECUTE ON FUNCTION fgentic_memory.save_fact(text,bigint,text,text,text,text,text,vector,jsonb,interval,text,text,text,text,text) TO fgentic_memory_runtime;
