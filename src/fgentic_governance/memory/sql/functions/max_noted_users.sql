-- At most this many users per call (a request names at most a few; memoryapi.activity
-- records at most 16 per Agent).
CREATE OR REPLACE FUNCTION fgentic_memory.max_noted_users() RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT 16 $$;

REVOKE ALL ON FUNCTION fgentic_memory.max_noted_users()
    FROM PUBLIC, fgentic_memory_runtime, fgentic_memory_delegate;
