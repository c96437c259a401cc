-- fgentic_memory 0009: embeddings admitted against an Agent's live lease (issue 17 §1, cost).
--
-- Why: kagent's runtime embeds a fact or a query *before* it calls the memory API, with no
-- user attached to the embeddings request. When its embeddings route is the memory API's
-- /v1/embeddings, the API knows the Agent (from the calling Pod) and asks here: with no live
-- delegation lease on any scope of that Agent, nothing is embedded (LEASE_MISSING): no user of
-- the Agent has a consented delegation open. With exactly one, the embedding is charged to
-- that scope's hourly ceiling, under its signed claim, before the provider is called. With
-- more than one the request cannot be attributed to a user; it is let through uncharged (each
-- of those users consented and is leased; their saves and searches are admitted one by one)
-- and the caller counts it.

CREATE FUNCTION fgentic_memory.admit_agent_embedding(
    p_agent_namespace text, p_agent_name text)
RETURNS integer
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_found integer;
    v_key text;
    s fgentic_memory.scope;
BEGIN
    SELECT count(DISTINCT sc.scope_key), min(sc.scope_key)
      INTO v_found, v_key
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
    END IF;
    IF v_found = 1 THEN
        SELECT * INTO s FROM fgentic_memory.scope WHERE scope_key = v_key;
        PERFORM fgentic_memory.enter_scope(
            s.scope_key, s.consent_generation, s.subject_mxid, s.agent_namespace, s.agent_name,
            s.control_room, 'recall');
        PERFORM fgentic_memory.admit('embedding', 1, false);
    END IF;
    RETURN v_found;
END
$$;

REVOKE EXECUTE ON FUNCTION fgentic_memory.admit_agent_embedding(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION fgentic_memory.admit_agent_embedding(text, text)
    TO fgentic_memory_runtime;
