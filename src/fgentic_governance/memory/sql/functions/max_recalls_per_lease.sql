-- Searches one lease admits at most, mirrored by
-- fgentic_governance.memory.model.MAX_RECALLS_PER_LEASE (a test holds them equal).
CREATE OR REPLACE FUNCTION fgentic_memory.max_recalls_per_lease() RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT 8 $$;

REVOKE ALL ON FUNCTION fgentic_memory.max_recalls_per_lease()
    FROM PUBLIC, fgentic_memory_runtime, fgentic_memory_delegate;
