-- Longer than a lease can live (540 s): a turn in progress is never aged out while its lease
-- could still admit it.
CREATE OR REPLACE FUNCTION fgentic_memory.max_context_seconds() RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT 600 $$;

REVOKE ALL ON FUNCTION fgentic_memory.max_context_seconds()
    FROM PUBLIC, fgentic_memory_runtime, fgentic_memory_delegate;
