-- Outstanding load_memory calls kept per context (a turn makes a few; beyond, the oldest go:
-- a forgotten id only makes a search count as prefetch's, which the hourly ceiling bounds).
CREATE OR REPLACE FUNCTION fgentic_memory.max_tool_calls() RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT 16 $$;

REVOKE ALL ON FUNCTION fgentic_memory.max_tool_calls()
    FROM PUBLIC, fgentic_memory_runtime, fgentic_memory_delegate;
