-- Bounds, mirrored by fgentic_governance.memory.model (a test holds them equal).
-- An A2A context id as the bridge and the runtime send it (a UUID, or the bridge's own
-- bounded id): no "/" (it is a path segment), nothing to escape.
CREATE OR REPLACE FUNCTION fgentic_memory.context_pattern() RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT '^[A-Za-z0-9._:-]{1,128}$' $$;

REVOKE ALL ON FUNCTION fgentic_memory.context_pattern()
    FROM PUBLIC, fgentic_memory_runtime, fgentic_memory_delegate;
