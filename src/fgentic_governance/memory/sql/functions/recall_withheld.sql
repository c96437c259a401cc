-- requires: functions/effective_recall_policy, functions/recall_withheld_reason
-- What the policy withholds now, by code: the scope's rows the view would otherwise show
-- (unexpired, active, current generation, the scope enabled for recall and not held). Counts
-- and bounded codes only; the operator's (status), never the runtime's.
CREATE OR REPLACE FUNCTION fgentic_memory.recall_withheld(p_scope_key text)
RETURNS TABLE (reason text, n bigint)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT w.reason, count(*)
      FROM fgentic_memory.scope s
     CROSS JOIN fgentic_memory.effective_recall_policy(s.scope_key) p
      JOIN fgentic_memory.memory m
        ON m.scope_key = s.scope_key AND m.consent_generation = s.consent_generation
     CROSS JOIN LATERAL (SELECT fgentic_memory.recall_withheld_reason(
               p, m.memory_type, m.source_kind, m.confirmation_status, m.sensitivity,
               m.created_at) AS reason) w
     WHERE s.scope_key = p_scope_key
       AND s.enabled
       AND s.posture IN ('enabled', 'capture_disabled')
       AND m.expires_at > statement_timestamp()
       AND m.lifecycle = 'active'
       AND NOT EXISTS (SELECT 1 FROM fgentic_memory.scope_hold h
                        WHERE h.scope_key = s.scope_key)
       AND w.reason IS NOT NULL
     GROUP BY w.reason
     ORDER BY w.reason
$$;

REVOKE ALL ON FUNCTION fgentic_memory.recall_withheld(text)
    FROM PUBLIC, fgentic_memory_runtime, fgentic_memory_delegate;
