-- requires: functions/floors_over
-- The most restrictive floor over one Agent: 'fully_disabled', 'capture_disabled' or
-- 'enabled' (no floor, or only 'enabled' ones).
CREATE OR REPLACE FUNCTION fgentic_memory.floor_posture(p_agent_namespace text, p_agent_name text)
RETURNS text
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT CASE coalesce(max(CASE f.posture WHEN 'fully_disabled' THEN 2
                                            WHEN 'capture_disabled' THEN 1 ELSE 0 END), 0)
               WHEN 2 THEN 'fully_disabled' WHEN 1 THEN 'capture_disabled' ELSE 'enabled' END
      FROM fgentic_memory.floors_over(p_agent_namespace, p_agent_name) f
$$;

REVOKE ALL ON FUNCTION fgentic_memory.floor_posture(text,text)
    FROM PUBLIC, fgentic_memory_runtime, fgentic_memory_delegate;
