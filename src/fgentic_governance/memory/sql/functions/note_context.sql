-- requires: functions/context_pattern, functions/max_save_seconds, functions/max_tool_calls, functions/refuse
-- One pass-through call of the Agent's Pod for p_user naming p_context: p_created (it creates
-- the session), p_user_events (user events it appends), p_final (its task reached a final
-- state), p_called / p_answered (load_memory function_call / function_response ids it
-- appends). Any call but a final one puts the context in progress again.
CREATE OR REPLACE FUNCTION fgentic_memory.note_context(
    p_agent_namespace text, p_agent_name text, p_user text, p_context text,
    p_created boolean, p_user_events integer, p_final boolean,
    p_called text[], p_answered text[])
RETURNS void
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    c fgentic_memory.agent_context;
BEGIN
    IF p_agent_namespace IS NULL OR p_agent_name IS NULL OR p_user IS NULL
       OR octet_length(p_user) NOT BETWEEN 1 AND 255
       OR p_context IS NULL OR p_context !~ fgentic_memory.context_pattern()
       OR p_created IS NULL OR p_final IS NULL OR p_called IS NULL OR p_answered IS NULL
       OR p_user_events IS NULL OR p_user_events NOT BETWEEN 0 AND 1000
       OR cardinality(p_called) > fgentic_memory.max_tool_calls()
       OR cardinality(p_answered) > fgentic_memory.max_tool_calls()
       OR EXISTS (SELECT 1 FROM unnest(p_called || p_answered) i
                   WHERE i IS NULL OR octet_length(i) NOT BETWEEN 1 AND 128)
    THEN
        PERFORM fgentic_memory.refuse('INVALID_SPEC');
    END IF;
    INSERT INTO fgentic_memory.agent_context AS a
           (agent_namespace, agent_name, user_id, context_id, seen_at, counted)
    VALUES (p_agent_namespace, p_agent_name, p_user, p_context, statement_timestamp(),
            p_created)
    ON CONFLICT (agent_namespace, agent_name, user_id, context_id) DO UPDATE
       SET seen_at = statement_timestamp()
    RETURNING * INTO c;
    IF p_created THEN  -- a new session: its count starts here
        c.counted := true;
        c.user_events := 0;
        c.saved_events := NULL;
    END IF;
    c.user_events := c.user_events + p_user_events;
    c.tool_calls := (SELECT coalesce(array_agg(i ORDER BY n), '{}') FROM (
        SELECT i, n FROM unnest(c.tool_calls || p_called) WITH ORDINALITY AS t(i, n)
         WHERE i <> ALL (p_answered)
         ORDER BY n DESC LIMIT fgentic_memory.max_tool_calls()) kept);
    IF p_final THEN
        c.closed_at := statement_timestamp();
        c.tool_calls := '{}';
        IF c.saved_events IS DISTINCT FROM c.user_events
           AND (NOT c.counted OR c.user_events % 5 = 0)
        THEN
            c.save_until := statement_timestamp()
                + make_interval(secs => fgentic_memory.max_save_seconds());
        END IF;
    ELSE
        c.closed_at := NULL;
    END IF;
    UPDATE fgentic_memory.agent_context a
       SET counted = c.counted, user_events = c.user_events, tool_calls = c.tool_calls,
           closed_at = c.closed_at, save_until = c.save_until, saved_events = c.saved_events
     WHERE a.agent_namespace = p_agent_namespace AND a.agent_name = p_agent_name
       AND a.user_id = p_user AND a.context_id = p_context;
END
$$;

REVOKE ALL ON FUNCTION fgentic_memory.note_context(text,text,text,text,boolean,integer,boolean,text[],text[])
    FROM PUBLIC, fgentic_memory_runtime, fgentic_memory_delegate;
GRANT EXECUTE ON FUNCTION fgentic_memory.note_context(text,text,text,text,boolean,integer,boolean,text[],text[]) TO fgentic_memory_delegate;
