-- requires: functions/floors_over, functions/recall_policy_meet
-- The meet of every floor's recall policy over one Agent (all NULL: no floor narrows).
CREATE OR REPLACE FUNCTION fgentic_memory.floor_recall_policy(p_agent_namespace text, p_agent_name text)
RETURNS fgentic_memory.recall_policy
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v fgentic_memory.recall_policy := ROW(NULL, NULL, NULL, NULL, NULL);
    f fgentic_memory.posture_floor;
BEGIN
    FOR f IN SELECT * FROM fgentic_memory.floors_over(p_agent_namespace, p_agent_name) LOOP
        v := fgentic_memory.recall_policy_meet(v, ROW(
            f.recall_memory_types, f.recall_source_kinds, f.recall_confirmation_statuses,
            f.recall_sensitivities, f.recall_max_age_seconds)::fgentic_memory.recall_policy);
    END LOOP;
    RETURN v;
END
$$;

REVOKE ALL ON FUNCTION fgentic_memory.floor_recall_policy(text,text)
    FROM PUBLIC, fgentic_memory_runtime, fgentic_memory_delegate;
