-- 0022: a recall policy narrows, inside the fenced view, which rows may enter recall (issue 38
-- §7, the peer's "context recall policy").
--
-- Every row carries a content-free envelope (memory_type, source_kind, confirmation_status,
-- sensitivity, created_at), yet every active row of an enabled scope was recallable. A scope
-- may now name the types, sources, confirmation states and sensitivities that may enter
-- recall, and a maximum age. The predicate lives in readable_memory, the only read path for
-- content, so it binds every reader (the memory API's prefetch and load_memory, an adapted
-- runtime's plain SQL, the control API's inspect) and is re-evaluated per statement: a policy
-- narrowed mid-session withholds at the next read. Nothing is filtered after the read.
--
-- One function computes the policy that applies: effective_recall_policy(scope_key). Here it
-- is the scope's own; posture floors (0023) replace it with the meet of the scope's and the
-- floors' (recall_policy_meet: the most restrictive wins, a lower level never loosens).
-- recall_withheld(scope_key) counts, by bounded code, what the policy withholds: counts only.

-- 1. The policy. A NULL field does not narrow its dimension; an empty array admits nothing
-- (a meet of two disjoint sets); max_age_seconds withholds rows created longer ago.
CREATE TYPE fgentic_memory.recall_policy AS (
    memory_types text[],
    source_kinds text[],
    confirmation_statuses text[],
    sensitivities text[],
    max_age_seconds integer
);

ALTER TABLE fgentic_memory.scope
    ADD COLUMN recall_memory_types text[],
    ADD COLUMN recall_source_kinds text[],
    ADD COLUMN recall_confirmation_statuses text[],
    ADD COLUMN recall_sensitivities text[],
    ADD COLUMN recall_max_age_seconds integer;

-- Since 0025 the functions, views and triggers of this step are each defined, as they are
-- now, in one file of sql/functions/, sql/views/ or sql/triggers/, with their grants.
