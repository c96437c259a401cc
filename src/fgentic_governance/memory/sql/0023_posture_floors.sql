-- 0023: posture floors (issue 38 §7): an administrator disables memory once, per Agent, per
-- namespace or cluster-wide, without patching every scope.
--
-- A floor is a row of posture_floor, written only by the operator (the schema owner) from a
-- MemoryPostureFloor object. The effective posture of a scope is the most restrictive of its
-- own posture and every floor that covers its Agent (cluster, its namespace, the Agent
-- itself): floor_posture() takes the maximum restriction, so a lower level, or the scope, can
-- never loosen what a higher one set (an 'enabled' floor is no floor).
--
-- Enforced where every other gate is, inside the fence:
--   * enter_scope()  (capture and recall; the delegate path enter_delegation() and the
--     embedding and summary admissions enter through it): POSTURE_FLOOR_DISABLED, or
--     POSTURE_FLOOR_CAPTURE_DISABLED for a capture under a capture_disabled floor;
--   * check_capture() (the insert and update triggers and save_fact()): the same, so a
--     runtime's own claim + INSERT meets the floor too;
--   * current_claim() (the view readable_memory and admit()): a capture or recall claim of a
--     scope under a fully_disabled floor is no claim, so a transaction that entered before the
--     floor was committed reads nothing more after it (READ COMMITTED: every statement sees
--     the floor as soon as it is committed).
-- Erasure ('erase' claims, the operator's fence, delete and verify) is never blocked by a
-- floor. The floor is read per statement; nothing caches it.
--
-- A floor may also carry a recall policy (sql/0022's, in the same columns as a scope's): the
-- effective recall policy of a scope becomes the meet of its own and of every floor over its
-- Agent (effective_recall_policy(), the one place it is computed), so a floor can only narrow
-- what the read view admits and what recall_withheld() counts.

CREATE TABLE fgentic_memory.posture_floor (
    floor_key text PRIMARY KEY CHECK (octet_length(floor_key) BETWEEN 1 AND 253),
    level text NOT NULL CHECK (level IN ('cluster', 'namespace', 'agent')),
    agent_namespace text NOT NULL DEFAULT '' CHECK (octet_length(agent_namespace) <= 63),
    agent_name text NOT NULL DEFAULT '' CHECK (octet_length(agent_name) <= 63),
    posture text NOT NULL CHECK (posture IN ('enabled', 'capture_disabled', 'fully_disabled')),
    -- The floor's recall policy (sql/0022): NULL does not narrow that dimension.
    recall_memory_types text[],
    recall_source_kinds text[],
    recall_confirmation_statuses text[],
    recall_sensitivities text[],
    recall_max_age_seconds integer,
    updated_at timestamptz NOT NULL DEFAULT now(),
    CHECK ((level = 'cluster' AND agent_namespace = '' AND agent_name = '')
        OR (level = 'namespace' AND agent_namespace <> '' AND agent_name = '')
        OR (level = 'agent' AND agent_namespace <> '' AND agent_name <> ''))
);
CREATE INDEX posture_floor_target ON fgentic_memory.posture_floor (agent_namespace, agent_name);
REVOKE ALL ON fgentic_memory.posture_floor FROM PUBLIC;

-- Since 0025 the functions, views and triggers of this step are each defined, as they are
-- now, in one file of sql/functions/, sql/views/ or sql/triggers/, with their grants.
