-- fgentic_memory 0003: the read fence.
--
-- Expiry is an authorization boundary, not a pruning hint (ADR 0023 §27): the only read path
-- is the security_barrier view below. It returns a row only while it is unexpired, active,
-- in an enabled scope whose posture allows recall, stamped with the scope's current
-- generation, AND inside the fenced context the reader entered with enter_scope(): the scope
-- key and the generation the reader carries (transaction-local settings). A reader that
-- carries a stale generation, or none, sees nothing.

CREATE VIEW fgentic_memory.readable_memory WITH (security_barrier = true) AS
SELECT m.id,
       m.scope_key,
       m.agent_name,
       m.user_id,
       m.content,
       m.embedding,
       m.metadata,
       m.created_at,
       m.expires_at,
       m.consent_generation,
       m.memory_type,
       m.source_kind,
       m.write_reason,
       m.confirmation_status,
       m.sensitivity
  FROM fgentic_memory.memory m
  JOIN fgentic_memory.scope s ON s.scope_key = m.scope_key
 -- statement_timestamp(), not now(): a long transaction must not keep reading a row past the
 -- instant it expired.
 WHERE m.expires_at > statement_timestamp()
   AND m.lifecycle = 'active'
   AND s.enabled
   AND s.posture IN ('enabled', 'capture_disabled')
   AND m.consent_generation = s.consent_generation
   AND m.scope_key = current_setting('fgentic_memory.scope_key', true)
   -- Compared as text: a malformed setting matches nothing instead of raising a cast error.
   AND m.consent_generation::text = current_setting('fgentic_memory.generation', true);

-- Validate a request context against the scope record. p_mode:
--   'capture' - a write: enabled, posture enabled, current generation;
--   'recall'  - a read: enabled, posture enabled or capture_disabled, current generation;
--   'erase'   - a per-entry forget: current generation only (erasure never needs consent).
-- Returns what a writer needs and may know: the agent_name spelling rows of this scope carry
-- and the latest expiry a new entry may have.
CREATE TYPE fgentic_memory.scope_context AS (store_agent_name text, max_expiry timestamptz);

CREATE FUNCTION fgentic_memory.check_scope(
    p_scope_key text, p_generation bigint, p_subject text,
    p_agent_namespace text, p_agent_name text, p_room text, p_mode text)
RETURNS fgentic_memory.scope_context
LANGUAGE plpgsql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    s fgentic_memory.scope;
BEGIN
    IF p_mode IS NULL OR p_mode NOT IN ('capture', 'recall', 'erase') THEN
        PERFORM fgentic_memory.refuse('INVALID_SPEC');
    END IF;
    SELECT * INTO s FROM fgentic_memory.scope WHERE scope_key = p_scope_key;
    IF NOT FOUND THEN
        PERFORM fgentic_memory.refuse('SCOPE_MISSING');
    END IF;
    -- ADR 0023 §6: fail closed unless principal, Agent and room match the scope exactly.
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
        PERFORM fgentic_memory.check_capture(s, p_generation);
    ELSIF p_mode = 'recall' THEN
        IF NOT s.enabled OR s.posture = 'fully_disabled' THEN
            PERFORM fgentic_memory.refuse('SCOPE_DISABLED');
        END IF;
    END IF;
    IF p_generation IS DISTINCT FROM s.consent_generation THEN
        PERFORM fgentic_memory.refuse('STALE_GENERATION');
    END IF;
    RETURN ROW(s.store_agent_name, now() + make_interval(days => s.max_retention_days))::
        fgentic_memory.scope_context;
END
$$;

-- Enter the fenced context for the rest of the transaction. Deliberately SECURITY INVOKER and
-- without a SET clause: a function-level SET would scope the set_config() calls below to the
-- function and the context would vanish on return.
CREATE FUNCTION fgentic_memory.enter_scope(
    p_scope_key text, p_generation bigint, p_subject text,
    p_agent_namespace text, p_agent_name text, p_room text, p_mode text)
RETURNS fgentic_memory.scope_context
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_context fgentic_memory.scope_context;
BEGIN
    v_context := fgentic_memory.check_scope(
        p_scope_key, p_generation, p_subject, p_agent_namespace, p_agent_name, p_room, p_mode);
    PERFORM pg_catalog.set_config('fgentic_memory.scope_key', p_scope_key, true);
    PERFORM pg_catalog.set_config('fgentic_memory.generation', p_generation::text, true);
    RETURN v_context;
END
$$;

-- Physical deletion of expired rows (ADR 0023 §27: within 24 hours). It only deletes; it never
-- moves an expiry.
CREATE FUNCTION fgentic_memory.cleanup_expired() RETURNS bigint
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    n bigint;
BEGIN
    DELETE FROM fgentic_memory.memory WHERE expires_at <= statement_timestamp();
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$$;
