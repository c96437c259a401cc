-- How long after its final task state a context's automatic save may still arrive: the
-- summarisation's model call (the runtime's OpenAI client waits up to 600 s, but the memory
-- API's model route answers or fails well within this) plus one embedding.
CREATE OR REPLACE FUNCTION fgentic_memory.max_save_seconds() RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT 120 $$;

REVOKE ALL ON FUNCTION fgentic_memory.max_save_seconds()
    FROM PUBLIC, fgentic_memory_runtime, fgentic_memory_delegate;
