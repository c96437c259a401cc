-- 0021: a lease bound to its room's A2A context (issue 38 §1), load_memory told from prefetch
-- (issue 38 §6).
--
-- kagent-adk 0.9.11's memory calls name an Agent and a user, never the A2A context (the ADK
-- session) they serve; only its session and task calls do (/api/sessions/<context>, a
-- session's create body "id", a task's "contextId"). So while Alice's control-room turn held
-- a lease, her concurrent turn with the same Agent in a team room was served her memory. Now
-- the bridge names the control room's context when it opens a lease, the memory API notes
-- here, before it relays them, the contexts those pass-through calls name (every replica sees
-- every other's notes), and a memory call of (Agent, user) is admitted only while the
-- contexts of that pair in progress are exactly the one its live lease names: which context a
-- memory call serves cannot be read from it, but causality bounds it (every memory call of a
-- context follows an answered session call naming it), so two contexts in progress refuse
-- each other (CONTEXT_CONFLICT) and the runtime answers both turns without memory.
--
-- A context is in progress from the first call naming it until its task reaches a final
-- state, then for max_save_seconds() more when an automatic save may follow (the runtime
-- starts it in the background after its every fifth user event, and it can arrive after the
-- final task state), and never longer than max_context_seconds() after the last call naming
-- it (a runtime that died mid-turn). Only ids, counts and times are kept, never an event.


-- 3. The lease names its context.
ALTER TABLE fgentic_memory.delegation_lease ADD COLUMN context_id text
    CHECK (context_id ~ '^[A-Za-z0-9._:-]{1,128}$');

-- 4. The contexts the runtime's pass-through calls named, per (Agent, user).
CREATE TABLE fgentic_memory.agent_context (
    agent_namespace text NOT NULL,
    agent_name text NOT NULL,
    user_id text NOT NULL CHECK (octet_length(user_id) BETWEEN 1 AND 255),
    context_id text NOT NULL CHECK (context_id ~ '^[A-Za-z0-9._:-]{1,128}$'),
    seen_at timestamptz NOT NULL,
    closed_at timestamptz,
    -- user_events counts the session's user events from its creation on (counted); a session
    -- first seen later has an unknown count, so its every final state may be followed by a
    -- save.
    counted boolean NOT NULL,
    user_events bigint NOT NULL DEFAULT 0,
    -- The user-event count at which its automatic save last arrived: a turn that ends after
    -- its save came waits for none.
    saved_events bigint,
    save_until timestamptz,
    tool_calls text[] NOT NULL DEFAULT '{}',
    PRIMARY KEY (agent_namespace, agent_name, user_id, context_id)
);
REVOKE ALL ON fgentic_memory.agent_context FROM PUBLIC;

-- Since 0025 the functions, views and triggers of this step are each defined, as they are
-- now, in one file of sql/functions/, sql/views/ or sql/triggers/, with their grants.
