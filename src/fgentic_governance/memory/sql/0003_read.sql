-- fgentic_memory 0003: the read fence.
--
-- Expiry is an authorization boundary, not a pruning hint (ADR 0023 §27): the only read path
-- is the security_barrier view below. It returns a row only while it is unexpired, active,
-- in an enabled scope whose posture allows recall, stamped with the scope's current
-- generation, AND inside the fenced context the reader entered with enter_scope(): the scope
-- key and the generation the reader carries (transaction-local settings). A reader that
-- carries a stale generation, or none, sees nothing.


-- What check_scope() and enter_scope() return to a writer: the agent_name spelling rows of
-- the scope carry and the latest expiry a new entry may have.
CREATE TYPE fgentic_memory.scope_context AS (store_agent_name text, max_expiry timestamptz);

-- Since 0025 the functions, views and triggers of this step are each defined, as they are
-- now, in one file of sql/functions/, sql/views/ or sql/triggers/, with their grants.
