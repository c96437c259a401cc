-- The summariser's input bound (ADR 0023 §43). Mirrored by
-- fgentic_governance.memory.bounds.MAX_SUMMARY_INPUT_BYTES (a test holds them equal).
CREATE OR REPLACE FUNCTION fgentic_memory.max_summary_input_bytes() RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT 16384 $$;

REVOKE ALL ON FUNCTION fgentic_memory.max_summary_input_bytes()
    FROM PUBLIC, fgentic_memory_runtime, fgentic_memory_delegate;
