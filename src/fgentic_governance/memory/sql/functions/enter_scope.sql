-- requires: functions/bound_transaction, functions/check_binding, functions/check_capture, functions/check_floor, functions/claim_sign, functions/entry_lock, functions/refuse
-- enter_scope: the gate of a capture, recall or erase: the transaction bounds, the claim, the
-- scope's binding, posture and generation, then the floor after the scope's own posture.
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
    -- check_scope()'s checks; the scope read here with the hold and the key.
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
    PERFORM fgentic_memory.check_binding(s, p_subject, p_agent_namespace, p_agent_name, p_room);
    -- A capture's gate is the triggers' and save_fact()'s: posture, floor, generation.
    IF p_mode = 'capture' THEN
        PERFORM fgentic_memory.check_capture(s, p_generation);
    ELSE
        IF p_mode = 'recall' AND (NOT s.enabled OR s.posture = 'fully_disabled') THEN
            PERFORM fgentic_memory.refuse('SCOPE_DISABLED');
        END IF;
        PERFORM fgentic_memory.check_floor(s.agent_namespace, s.agent_name, p_mode);
        IF p_generation IS DISTINCT FROM s.consent_generation THEN
            PERFORM fgentic_memory.refuse('STALE_GENERATION');
        END IF;
    END IF;
    -- A per-entry forget ('erase') is never blocked: erasure needs no consent.
    IF p_mode <> 'erase' AND v_held THEN
        PERFORM fgentic_memory.refuse('SCOPE_DISABLED');
    END IF;
    -- claim_mac()'s formula with the key read above (a NULL key signs nothing that verifies).
    PERFORM set_config('fgentic_memory.claim',
        format('%s|%s|%s|%s', p_mode, p_generation, p_scope_key,
               fgentic_memory.claim_sign(v_secret, pg_current_xact_id(), p_mode, p_generation,
                                         p_scope_key)),
        true);
    -- Informational only: nothing trusts these.
    PERFORM set_config('fgentic_memory.scope_key', p_scope_key, true);
    PERFORM set_config('fgentic_memory.generation', p_generation::text, true);
    RETURN ROW(s.store_agent_name, now() + make_interval(days => s.max_retention_days))::
        fgentic_memory.scope_context;
END
$$;

REVOKE ALL ON FUNCTION fgentic_memory.enter_scope(text,bigint,text,text,text,text,text)
    FROM PUBLIC, fgentic_memory_runtime, fgentic_memory_delegate;
GRANT EXECUTE ON FUNCTION fgentic_memory.enter_scope(text,bigint,text,text,text,text,text) TO fgentic_memory_runtime;
