-- requires: functions/max_noted_users, functions/refuse
CREATE OR REPLACE FUNCTION fgentic_memory.note_activity(
    p_agent_namespace text, p_agent_name text, p_users text[])
RETURNS void
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_agent_namespace IS NULL OR p_agent_name IS NULL OR p_users IS NULL
       OR cardinality(p_users) NOT BETWEEN 1 AND fgentic_memory.max_noted_users()
       OR array_position(p_users, NULL) IS NOT NULL
       OR EXISTS (SELECT 1 FROM unnest(p_users) u WHERE octet_length(u) NOT BETWEEN 1 AND 255)
    THEN
        PERFORM fgentic_memory.refuse('INVALID_SPEC');
    END IF;
    -- Sorted, so two replicas noting the same users take the row locks in one order.
    INSERT INTO fgentic_memory.agent_activity AS a
           (agent_namespace, agent_name, user_id, seen_at)
    SELECT p_agent_namespace, p_agent_name, u, statement_timestamp()
      FROM (SELECT DISTINCT u FROM unnest(p_users) u ORDER BY u) d
    ON CONFLICT (agent_namespace, agent_name, user_id)
    DO UPDATE SET seen_at = greatest(a.seen_at, excluded.seen_at);
END
$$;

REVOKE ALL ON FUNCTION fgentic_memory.note_activity(text,text,text[])
    FROM PUBLIC, fgentic_memory_runtime, fgentic_memory_delegate;
GRANT EXECUTE ON FUNCTION fgentic_memory.note_activity(text,text,text[]) TO fgentic_memory_delegate;
