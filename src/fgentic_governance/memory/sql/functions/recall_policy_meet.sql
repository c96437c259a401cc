-- requires: functions/recall_set_meet
CREATE OR REPLACE FUNCTION fgentic_memory.recall_policy_meet(
    a fgentic_memory.recall_policy, b fgentic_memory.recall_policy)
RETURNS fgentic_memory.recall_policy
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT ROW(fgentic_memory.recall_set_meet((a).memory_types, (b).memory_types),
               fgentic_memory.recall_set_meet((a).source_kinds, (b).source_kinds),
               fgentic_memory.recall_set_meet((a).confirmation_statuses,
                                              (b).confirmation_statuses),
               fgentic_memory.recall_set_meet((a).sensitivities, (b).sensitivities),
               least((a).max_age_seconds, (b).max_age_seconds)
           )::fgentic_memory.recall_policy
$$;

REVOKE ALL ON FUNCTION fgentic_memory.recall_policy_meet(fgentic_memory.recall_policy,fgentic_memory.recall_policy)
    FROM PUBLIC, fgentic_memory_runtime, fgentic_memory_delegate;
