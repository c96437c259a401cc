-- The scope's own recall policy. effective_recall_policy is the single place the applying
-- policy is computed (the view and the counts both call it). A scope that does
-- not exist has no rows to read, so its policy is immaterial (all NULL).
-- SQL-standard bodies: parsed when created (their names and operators do not depend on a
-- caller's search_path), and inlined into the statement that calls them. Both are called as
-- the owner (by current_recall_claim() and recall_withheld()); neither is granted.
CREATE OR REPLACE FUNCTION fgentic_memory.scope_recall_policy(p_scope_key text)
RETURNS fgentic_memory.recall_policy
LANGUAGE sql STABLE
RETURN (SELECT ROW(s.recall_memory_types, s.recall_source_kinds,
                   s.recall_confirmation_statuses, s.recall_sensitivities,
                   s.recall_max_age_seconds)::fgentic_memory.recall_policy
          FROM fgentic_memory.scope s WHERE s.scope_key = p_scope_key);

REVOKE ALL ON FUNCTION fgentic_memory.scope_recall_policy(text)
    FROM PUBLIC, fgentic_memory_runtime, fgentic_memory_delegate;
