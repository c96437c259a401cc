-- requires: functions/bound_transaction, functions/check_scope, functions/context_pattern, functions/live_leases, functions/max_live_leases, functions/refuse, functions/refuse_if_held
CREATE OR REPLACE FUNCTION fgentic_memory.open_lease(
    p_scope_key text, p_generation bigint, p_subject text,
    p_agent_namespace text, p_agent_name text, p_room text, p_seconds integer,
    p_delegation_id uuid, p_context_id text)
RETURNS TABLE (lease_id uuid, expires_at timestamptz)
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_lease fgentic_memory.delegation_lease;
    v_live bigint;
BEGIN
    -- A lease names its context: without one it could bind no memory call (fail closed).
    IF p_seconds IS NULL OR p_seconds < 1 OR p_seconds > 540
       OR p_context_id IS NULL OR p_context_id !~ fgentic_memory.context_pattern()
    THEN
        PERFORM fgentic_memory.refuse('INVALID_SPEC');
    END IF;
    PERFORM fgentic_memory.bound_transaction();
    PERFORM fgentic_memory.check_scope(
        p_scope_key, p_generation, p_subject, p_agent_namespace, p_agent_name, p_room, 'recall');
    PERFORM fgentic_memory.refuse_if_held(p_scope_key);
    PERFORM pg_advisory_xact_lock(1179077715, hashtext(
        format('%s|%s|%s', p_subject, p_agent_namespace, p_agent_name)));
    IF p_delegation_id IS NOT NULL THEN
        SELECT * INTO v_lease FROM fgentic_memory.delegation_lease l
         WHERE l.scope_key = p_scope_key AND l.delegation_id = p_delegation_id;
        IF FOUND THEN
            IF v_lease.closed_at IS NOT NULL OR v_lease.expires_at <= statement_timestamp()
               OR v_lease.consent_generation <> p_generation
            THEN
                PERFORM fgentic_memory.refuse('LEASE_MISSING');
            END IF;
            IF v_lease.context_id IS DISTINCT FROM p_context_id THEN
                PERFORM fgentic_memory.refuse('CONTEXT_CONFLICT');
            END IF;
            RETURN QUERY SELECT v_lease.lease_id, v_lease.expires_at;
            RETURN;
        END IF;
    END IF;
    SELECT count(*) INTO v_live
      FROM fgentic_memory.live_leases(p_agent_namespace, p_agent_name) l
     WHERE l.subject_mxid = p_subject;
    IF v_live >= fgentic_memory.max_live_leases() THEN
        PERFORM fgentic_memory.refuse('LEASE_LIMIT_REACHED');
    END IF;
    RETURN QUERY
        INSERT INTO fgentic_memory.delegation_lease AS l
               (scope_key, consent_generation, expires_at, delegation_id, context_id)
        VALUES (p_scope_key, p_generation, now() + make_interval(secs => p_seconds),
                p_delegation_id, p_context_id)
        RETURNING l.lease_id, l.expires_at;
END
$$;

REVOKE ALL ON FUNCTION fgentic_memory.open_lease(text,bigint,text,text,text,text,integer,uuid,text)
    FROM PUBLIC, fgentic_memory_runtime, fgentic_memory_delegate;
