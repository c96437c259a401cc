-- 0018: an embedding or a summarisation is charged only while its user is the Agent's one
-- leased user.
--
-- sql/0016 charged the user the memory API attributed the request to (the one user the
-- Agent's Pod served within its activity window) if that user held a live lease. With two
-- users' turns leased at once, an embedding made more than the window after its own user's
-- last call, while the other user's turn was the only recent one, was charged to that other
-- user (memory.md §14). A live lease is a turn in progress: while another user of the same
-- Agent holds one, the request may be theirs, so it is refused (SCOPE_AMBIGUOUS), never
-- charged to a guess. The order of refusals is kept: no lease of the attributed user is
-- LEASE_MISSING first, two of their rooms leased at once SCOPE_AMBIGUOUS.

CREATE OR REPLACE FUNCTION fgentic_memory.leased_scope(
    p_agent_namespace text, p_agent_name text, p_subject text)
RETURNS fgentic_memory.scope
LANGUAGE plpgsql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_found integer;
    v_subjects integer;
    v_key text;
    s fgentic_memory.scope;
BEGIN
    IF p_subject IS NULL THEN
        PERFORM fgentic_memory.refuse('LEASE_MISSING');
    END IF;
    -- Every live lease of the Agent, whoever's: the attributed user's scopes, and how many
    -- users hold one.
    SELECT count(DISTINCT sc.scope_key) FILTER (WHERE sc.subject_mxid = p_subject),
           min(sc.scope_key) FILTER (WHERE sc.subject_mxid = p_subject),
           count(DISTINCT sc.subject_mxid)
      INTO v_found, v_key, v_subjects
      FROM fgentic_memory.scope sc
      JOIN fgentic_memory.delegation_lease l ON l.scope_key = sc.scope_key
     WHERE sc.agent_namespace = p_agent_namespace
       AND sc.agent_name = p_agent_name
       AND l.closed_at IS NULL
       AND l.expires_at > statement_timestamp()
       AND l.consent_generation = sc.consent_generation
       AND sc.enabled;
    IF v_found = 0 THEN
        PERFORM fgentic_memory.refuse('LEASE_MISSING');
    ELSIF v_found > 1 OR v_subjects > 1 THEN
        PERFORM fgentic_memory.refuse('SCOPE_AMBIGUOUS');
    END IF;
    SELECT * INTO s FROM fgentic_memory.scope WHERE scope_key = v_key;
    RETURN s;
END
$$;
