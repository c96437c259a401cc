-- requires: functions/floor_recall_policy, functions/recall_policy_meet, functions/scope_recall_policy
-- effective_recall_policy: the scope's own recall policy met with its Agent's floors'.
CREATE OR REPLACE FUNCTION fgentic_memory.effective_recall_policy(p_scope_key text)
RETURNS fgentic_memory.recall_policy
LANGUAGE sql STABLE
RETURN (SELECT fgentic_memory.recall_policy_meet(
                   fgentic_memory.scope_recall_policy(s.scope_key),
                   fgentic_memory.floor_recall_policy(s.agent_namespace, s.agent_name))
          FROM fgentic_memory.scope s WHERE s.scope_key = p_scope_key);

REVOKE ALL ON FUNCTION fgentic_memory.effective_recall_policy(text)
    FROM PUBLIC, fgentic_memory_runtime, fgentic_memory_delegate;
