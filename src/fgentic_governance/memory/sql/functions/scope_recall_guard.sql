-- requires: functions/refuse, functions/valid_recall_set
CREATE OR REPLACE FUNCTION fgentic_memory.scope_recall_guard() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF NOT (fgentic_memory.valid_recall_set(NEW.recall_memory_types,
                ARRAY['preference', 'fact', 'decision', 'instruction', 'relationship',
                      'task_state', 'working_note'])
            AND fgentic_memory.valid_recall_set(NEW.recall_source_kinds,
                ARRAY['user_message', 'assistant_response', 'automatic_summary',
                      'save_memory_tool', 'unknown'])
            AND fgentic_memory.valid_recall_set(NEW.recall_confirmation_statuses,
                ARRAY['user_confirmed', 'model_inferred', 'unknown'])
            AND fgentic_memory.valid_recall_set(NEW.recall_sensitivities,
                ARRAY['normal', 'personal', 'sensitive'])
            AND (NEW.recall_max_age_seconds IS NULL
                 OR NEW.recall_max_age_seconds BETWEEN 1 AND 7 * 86400))
    THEN
        PERFORM fgentic_memory.refuse('INVALID_SPEC');
    END IF;
    RETURN NEW;
END
$$;

REVOKE ALL ON FUNCTION fgentic_memory.scope_recall_guard()
    FROM PUBLIC, fgentic_memory_runtime, fgentic_memory_delegate;
