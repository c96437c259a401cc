-- 0016: an embedding or a summarisation is charged to the one user whose turn it serves.
--
-- kagent's embeddings and summarisation requests name no user (sql/0009, sql/0013), so they
-- were charged to the Agent's one leased scope, whoever's turn they served: with one user
-- leased, another user's attempt was charged to them. The memory API now names the user: the
-- one user whose session or memory calls it saw from that Agent's Pod within its activity
-- window (kagent's runtime fetches a turn's session, with its user_id, before it embeds a
-- prefetch query, and appends the turn's events before it summarises); several users, or
-- none, are refused there. Here that user's own live lease of the Agent is charged, or the
-- request is refused: LEASE_MISSING without one, SCOPE_AMBIGUOUS with two (two rooms). The
-- two-argument functions, which charged whoever was leased, are dropped.

CREATE FUNCTION fgentic_memory.leased_scope(
    p_agent_namespace text, p_agent_name text, p_subject text)
RETURNS fgentic_memory.scope
LANGUAGE plpgsql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_found integer;
    v_key text;
    s fgentic_memory.scope;
BEGIN
    IF p_subject IS NULL THEN
        PERFORM fgentic_memory.refuse('LEASE_MISSING');
    END IF;
    SELECT count(DISTINCT sc.scope_key), min(sc.scope_key)
      INTO v_found, v_key
      FROM fgentic_memory.scope sc
      JOIN fgentic_memory.delegation_lease l ON l.scope_key = sc.scope_key
     WHERE sc.agent_namespace = p_agent_namespace
       AND sc.agent_name = p_agent_name
       AND sc.subject_mxid = p_subject
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
    RETURN s;
END
$$;

CREATE FUNCTION fgentic_memory.admit_agent_embedding(
    p_agent_namespace text, p_agent_name text, p_subject text)
RETURNS integer
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    s fgentic_memory.scope :=
        fgentic_memory.leased_scope(p_agent_namespace, p_agent_name, p_subject);
BEGIN
    PERFORM fgentic_memory.enter_scope(
        s.scope_key, s.consent_generation, s.subject_mxid, s.agent_namespace, s.agent_name,
        s.control_room, 'recall');
    PERFORM fgentic_memory.admit('embedding', 1, false);
    RETURN 1;
END
$$;

CREATE FUNCTION fgentic_memory.admit_agent_summary(
    p_agent_namespace text, p_agent_name text, p_input_bytes integer, p_subject text)
RETURNS void
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    s fgentic_memory.scope :=
        fgentic_memory.leased_scope(p_agent_namespace, p_agent_name, p_subject);
BEGIN
    IF p_input_bytes IS NULL OR p_input_bytes < 0 THEN
        PERFORM fgentic_memory.refuse('INVALID_SPEC');
    END IF;
    IF p_input_bytes > fgentic_memory.max_summary_input_bytes() THEN
        PERFORM fgentic_memory.refuse('SUMMARY_INPUT_TOO_LARGE');
    END IF;
    IF s.max_summary_facts = 0 THEN
        PERFORM fgentic_memory.refuse('SUMMARY_TOO_LARGE');
    END IF;
    PERFORM fgentic_memory.enter_scope(
        s.scope_key, s.consent_generation, s.subject_mxid, s.agent_namespace, s.agent_name,
        s.control_room, 'capture');
    UPDATE fgentic_memory.summary_cadence c SET reserved = c.reserved + 1
     WHERE c.scope_key = s.scope_key
       AND (c.summaries + c.reserved + 1) * s.min_user_turns <= c.leases;
    IF NOT FOUND THEN
        PERFORM fgentic_memory.refuse('SUMMARY_CADENCE_REACHED');
    END IF;
    PERFORM fgentic_memory.admit('summarize', 1, false);
END
$$;

-- No path charges whoever happens to be leased any more.
DROP FUNCTION fgentic_memory.admit_agent_embedding(text, text);
DROP FUNCTION fgentic_memory.admit_agent_summary(text, text, integer);
DROP FUNCTION fgentic_memory.leased_scope(text, text);

REVOKE EXECUTE ON FUNCTION fgentic_memory.leased_scope(text, text, text),
    fgentic_memory.admit_agent_embedding(text, text, text),
    fgentic_memory.admit_agent_summary(text, text, integer, text)
    FROM PUBLIC;
GRANT EXECUTE ON FUNCTION fgentic_memory.admit_agent_embedding(text, text, text),
    fgentic_memory.admit_agent_summary(text, text, integer, text)
    TO fgentic_memory_delegate;
