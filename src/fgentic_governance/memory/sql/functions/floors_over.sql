-- Every floor over one Agent: the cluster's, its namespace's, its own.
CREATE OR REPLACE FUNCTION fgentic_memory.floors_over(p_agent_namespace text, p_agent_name text)
RETURNS SETOF fgentic_memory.posture_floor
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT f.* FROM fgentic_memory.posture_floor f
     WHERE f.level = 'cluster'
        OR (f.level = 'namespace' AND f.agent_namespace = p_agent_namespace)
        OR (f.level = 'agent' AND f.agent_namespace = p_agent_namespace
            AND f.agent_name = p_agent_name)
$$;

REVOKE ALL ON FUNCTION fgentic_memory.floors_over(text,text)
    FROM PUBLIC, fgentic_memory_runtime, fgentic_memory_delegate;
