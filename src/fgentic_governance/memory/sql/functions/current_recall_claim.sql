-- requires: functions/current_claim, functions/effective_recall_policy
-- The transaction's verified claim (current_claim()) with its scope's effective policy, in one row;
-- no row without a claim, so a reader that entered nothing reads nothing. The view reads this
-- instead of current_claim(): one claim check per statement, not two. The runtime learns
-- only its own scope's policy.
CREATE OR REPLACE FUNCTION fgentic_memory.current_recall_claim()
RETURNS TABLE (scope_key text, generation bigint, mode text, memory_types text[],
               source_kinds text[], confirmation_statuses text[], sensitivities text[],
               max_age_seconds integer)
LANGUAGE sql STABLE
ROWS 1
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT c.scope_key, c.generation, c.mode, (x.p).memory_types, (x.p).source_kinds,
           (x.p).confirmation_statuses, (x.p).sensitivities, (x.p).max_age_seconds
      FROM fgentic_memory.current_claim() c
     CROSS JOIN LATERAL (SELECT fgentic_memory.effective_recall_policy(c.scope_key) AS p) x
$$;

REVOKE ALL ON FUNCTION fgentic_memory.current_recall_claim()
    FROM PUBLIC, fgentic_memory_runtime, fgentic_memory_delegate;
GRANT EXECUTE ON FUNCTION fgentic_memory.current_recall_claim() TO fgentic_memory_runtime;
