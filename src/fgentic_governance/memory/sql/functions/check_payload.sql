-- requires: functions/policy_reason, functions/refuse
CREATE OR REPLACE FUNCTION fgentic_memory.check_payload(s fgentic_memory.scope, m fgentic_memory.memory)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_reason text;
BEGIN
    IF m.content IS NULL OR m.content = '' THEN
        PERFORM fgentic_memory.refuse('INVALID_SPEC');
    END IF;
    -- octet_length: the bound is UTF-8 bytes, not characters.
    IF octet_length(m.content) > s.max_fact_bytes THEN
        PERFORM fgentic_memory.refuse('FACT_TOO_LARGE');
    END IF;
    -- Metadata could smuggle a second, unbounded fact; bound it too.
    IF m.metadata IS NULL OR jsonb_typeof(m.metadata) <> 'object' THEN
        PERFORM fgentic_memory.refuse('INVALID_SPEC');
    END IF;
    IF octet_length(m.metadata::text) > 1024 THEN
        PERFORM fgentic_memory.refuse('FACT_TOO_LARGE');
    END IF;
    -- After the size bounds, so the scan only ever sees bounded input.
    -- Empty metadata (every governed writer's) has nothing to scan.
    v_reason := fgentic_memory.policy_reason(m.content);
    IF v_reason IS NULL AND m.metadata <> '{}'::jsonb THEN
        v_reason := fgentic_memory.policy_reason(m.metadata::text);
    END IF;
    IF v_reason IS NOT NULL THEN
        PERFORM fgentic_memory.refuse(v_reason);
    END IF;
    IF m.memory_type IS NULL
       OR m.memory_type NOT IN ('preference', 'fact', 'decision', 'instruction',
                                'relationship', 'task_state', 'working_note')
       OR m.source_kind IS NULL
       OR m.source_kind NOT IN ('user_message', 'assistant_response', 'automatic_summary',
                                'save_memory_tool', 'unknown')
       OR m.write_reason IS NULL
       OR m.write_reason NOT IN ('explicit_user_request', 'user_preference_extracted',
                                 'automatic_summary', 'task_checkpoint', 'unspecified')
       OR m.confirmation_status IS NULL
       OR m.confirmation_status NOT IN ('user_confirmed', 'model_inferred', 'unknown')
       OR m.sensitivity IS NULL OR m.sensitivity NOT IN ('normal', 'personal', 'sensitive')
       OR m.lifecycle IS NULL
       OR m.lifecycle NOT IN ('active', 'stale', 'superseded', 'suppressed')
    THEN
        PERFORM fgentic_memory.refuse('INVALID_SPEC');
    END IF;
    -- A user confirmation is only as good as its source: it must come from the user's own
    -- explicit request, never from a model's summary that claims it.
    IF m.confirmation_status = 'user_confirmed'
       AND (m.source_kind <> 'user_message' OR m.write_reason <> 'explicit_user_request')
    THEN
        PERFORM fgentic_memory.refuse('INVALID_SPEC');
    END IF;
END
$$;

REVOKE ALL ON FUNCTION fgentic_memory.check_payload(fgentic_memory.scope,fgentic_memory.memory)
    FROM PUBLIC, fgentic_memory_runtime, fgentic_memory_delegate;
