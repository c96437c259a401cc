-- live_leases: the live delegation leases of an Agent, whoever's (open, unexpired, at the
-- scope's current generation, the scope enabled): one row a lease. open_lease, leased_scope,
-- enter_delegation and bind_context count or pick from it. Not SECURITY DEFINER and no SET
-- clause so that the planner inlines it into each caller's query (the plan the restated join
-- had); every name in it is qualified, and only the owner may call it.
CREATE OR REPLACE FUNCTION fgentic_memory.live_leases(p_agent_namespace text, p_agent_name text)
RETURNS TABLE (scope_key text, subject_mxid text, context_id text)
LANGUAGE sql STABLE
AS $$
    SELECT sc.scope_key, sc.subject_mxid, l.context_id
      FROM fgentic_memory.scope sc
      JOIN fgentic_memory.delegation_lease l ON l.scope_key OPERATOR(pg_catalog.=) sc.scope_key
     WHERE sc.agent_namespace OPERATOR(pg_catalog.=) p_agent_namespace
       AND sc.agent_name OPERATOR(pg_catalog.=) p_agent_name
       AND l.closed_at IS NULL
       AND l.expires_at OPERATOR(pg_catalog.>) pg_catalog.statement_timestamp()
       AND l.consent_generation OPERATOR(pg_catalog.=) sc.consent_generation
       AND sc.enabled
$$;

REVOKE ALL ON FUNCTION fgentic_memory.live_leases(text,text)
    FROM PUBLIC, fgentic_memory_runtime, fgentic_memory_delegate;
