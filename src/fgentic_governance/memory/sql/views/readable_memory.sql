-- requires: functions/current_recall_claim, functions/recall_withheld_reason
-- The read view, the only read path for content: the rows of the scope and generation of the
-- transaction's verified recall claim that are live, readable and admitted by its policy.
CREATE OR REPLACE VIEW fgentic_memory.readable_memory WITH (security_barrier = true) AS
SELECT m.id,
       m.scope_key,
       m.agent_name,
       m.user_id,
       m.content,
       m.embedding,
       m.metadata,
       m.created_at,
       m.expires_at,
       m.consent_generation,
       m.memory_type,
       m.source_kind,
       m.write_reason,
       m.confirmation_status,
       m.sensitivity
  FROM fgentic_memory.current_recall_claim() c
  JOIN fgentic_memory.memory m
    ON m.scope_key = c.scope_key AND m.consent_generation = c.generation
  JOIN fgentic_memory.scope s ON s.scope_key = m.scope_key
 WHERE m.expires_at > statement_timestamp()
   AND m.lifecycle = 'active'
   AND s.enabled
   AND s.posture IN ('enabled', 'capture_disabled')
   AND m.consent_generation = s.consent_generation
   AND NOT EXISTS (SELECT 1 FROM fgentic_memory.scope_hold h WHERE h.scope_key = m.scope_key)
   AND fgentic_memory.recall_withheld_reason(
           ROW(c.memory_types, c.source_kinds, c.confirmation_statuses, c.sensitivities,
               c.max_age_seconds)::fgentic_memory.recall_policy,
           m.memory_type, m.source_kind, m.confirmation_status, m.sensitivity, m.created_at)
       IS NULL;

REVOKE ALL ON TABLE fgentic_memory.readable_memory
    FROM PUBLIC, fgentic_memory_runtime, fgentic_memory_delegate;
GRANT SELECT ON TABLE fgentic_memory.readable_memory TO fgentic_memory_runtime;
