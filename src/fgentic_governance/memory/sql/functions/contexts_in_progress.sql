-- requires: functions/max_context_seconds
-- The contexts of (Agent, user) in progress now, with their outstanding load_memory calls.
CREATE OR REPLACE FUNCTION fgentic_memory.contexts_in_progress(
    p_agent_namespace text, p_agent_name text, p_user text)
RETURNS SETOF fgentic_memory.agent_context
LANGUAGE sql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT * FROM fgentic_memory.agent_context a
     WHERE a.agent_namespace = p_agent_namespace AND a.agent_name = p_agent_name
       AND a.user_id = p_user
       AND ((a.closed_at IS NULL AND a.seen_at > statement_timestamp()
                 - make_interval(secs => fgentic_memory.max_context_seconds()))
            OR a.save_until > statement_timestamp())
$$;

REVOKE ALL ON FUNCTION fgentic_memory.contexts_in_progress(text,text,text)
    FROM PUBLIC, fgentic_memory_runtime, fgentic_memory_delegate;
