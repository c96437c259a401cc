-- 0019: whose turn an Agent serves, shared by every memory API replica.
--
-- kagent's embeddings and summarisation requests name no user: the memory API attributes
-- each to the one user the Agent's Pods named within its activity window
-- (memoryapi/activity.py). Each replica knew only the calls it served, so a Pod that moved
-- to another replica (its replica restarted, or the Service rebalanced) was LEASE_MISSING
-- until its next session call, and two Pods of one Agent served by two replicas saw one user
-- each where together they saw two. Now every replica notes the (Agent, user) pairs it sees
-- here (at most once per pair per tenth of the window) and the attribution counts the users
-- every replica saw, plus the calling replica's own exact view.
--
-- A replica notes a pair at its first call and then at most every p_slack seconds, so a
-- stored time can be up to p_slack older than that user's last call. Rows are therefore
-- counted for the window plus that slack: a user whose last call is inside the window is
-- always counted (more refusals for at most the slack, never a missed user).

CREATE TABLE fgentic_memory.agent_activity (
    agent_namespace text NOT NULL,
    agent_name text NOT NULL,
    user_id text NOT NULL CHECK (octet_length(user_id) BETWEEN 1 AND 255),
    seen_at timestamptz NOT NULL,
    PRIMARY KEY (agent_namespace, agent_name, user_id)
);
REVOKE ALL ON fgentic_memory.agent_activity FROM PUBLIC;

-- Since 0025 the functions, views and triggers of this step are each defined, as they are
-- now, in one file of sql/functions/, sql/views/ or sql/triggers/, with their grants.
