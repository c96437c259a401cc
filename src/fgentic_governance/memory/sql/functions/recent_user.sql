-- requires: functions/max_noted_users, functions/refuse
-- The one user an Agent served within p_window seconds (plus the notes' p_slack), counting
-- p_local (the calling replica's own users within the window) and every replica's notes:
-- LEASE_MISSING with none, SCOPE_AMBIGUOUS with several. Refused, never guessed.
CREATE OR REPLACE FUNCTION fgentic_memory.recent_user(
    p_agent_namespace text, p_agent_name text, p_local text[],
    p_window double precision, p_slack double precision)
RETURNS text
LANGUAGE plpgsql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_users text[];
BEGIN
    IF p_local IS NULL OR cardinality(p_local) > fgentic_memory.max_noted_users()
       OR p_window IS NULL OR p_slack IS NULL
       OR NOT (p_window > 0 AND p_window <= 3600 AND p_slack >= 0 AND p_slack <= p_window)
    THEN
        PERFORM fgentic_memory.refuse('INVALID_SPEC');
    END IF;
    SELECT array_agg(u) INTO v_users FROM (
        SELECT u FROM unnest(p_local) u WHERE u <> ''
        UNION
        SELECT a.user_id FROM fgentic_memory.agent_activity a
         WHERE a.agent_namespace = p_agent_namespace AND a.agent_name = p_agent_name
           AND a.seen_at > statement_timestamp() - make_interval(secs => p_window + p_slack)
        LIMIT 2) recent;
    IF v_users IS NULL THEN
        PERFORM fgentic_memory.refuse('LEASE_MISSING');
    ELSIF cardinality(v_users) > 1 THEN
        PERFORM fgentic_memory.refuse('SCOPE_AMBIGUOUS');
    END IF;
    RETURN v_users[1];
END
$$;

REVOKE ALL ON FUNCTION fgentic_memory.recent_user(text,text,text[],double precision,double precision)
    FROM PUBLIC, fgentic_memory_runtime, fgentic_memory_delegate;
GRANT EXECUTE ON FUNCTION fgentic_memory.recent_user(text,text,text[],double precision,double precision) TO fgentic_memory_delegate;
