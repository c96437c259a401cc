-- requires: functions/contexts_in_progress
-- An automatic save arrived for (Agent, user), admitted or not: if it can only be one
-- context's (the one context of the pair that may save now: closed and waiting for it, or in
-- progress at a multiple of five user events or uncounted, and not saved at that count yet),
-- that context waits for it no more, and a turn of it ending at this count waits for none.
-- Run after the admission, in a statement of its own: a refused save ends the wait too.
CREATE OR REPLACE FUNCTION fgentic_memory.end_save_wait(
    p_subject text, p_agent_namespace text, p_agent_name text)
RETURNS void
LANGUAGE sql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    WITH may_save AS (
        SELECT a.context_id
          FROM fgentic_memory.contexts_in_progress(p_agent_namespace, p_agent_name, p_subject) a
         WHERE (a.closed_at IS NOT NULL AND a.save_until > statement_timestamp())
            OR (a.closed_at IS NULL AND a.saved_events IS DISTINCT FROM a.user_events
                AND (NOT a.counted OR (a.user_events > 0 AND a.user_events % 5 = 0))))
    UPDATE fgentic_memory.agent_context a SET save_until = NULL, saved_events = a.user_events
      FROM may_save m
     WHERE (SELECT count(*) FROM may_save) = 1
       AND a.agent_namespace = p_agent_namespace AND a.agent_name = p_agent_name
       AND a.user_id = p_subject AND a.context_id = m.context_id
$$;

REVOKE ALL ON FUNCTION fgentic_memory.end_save_wait(text,text,text)
    FROM PUBLIC, fgentic_memory_runtime, fgentic_memory_delegate;
GRANT EXECUTE ON FUNCTION fgentic_memory.end_save_wait(text,text,text) TO fgentic_memory_delegate;
