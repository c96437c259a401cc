-- How many leases of one (subject, Agent) may live at once. A lease is opened per turn and
-- closed when the turn ends; more than this at once is a replay or a runaway bridge.
-- Mirrored by fgentic_governance.memory.model.MAX_LIVE_LEASES (a test holds them equal).
CREATE OR REPLACE FUNCTION fgentic_memory.max_live_leases() RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT 8 $$;

REVOKE ALL ON FUNCTION fgentic_memory.max_live_leases()
    FROM PUBLIC, fgentic_memory_runtime, fgentic_memory_delegate;
