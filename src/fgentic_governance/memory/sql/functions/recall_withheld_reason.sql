-- Why a row may not enter recall under policy p: NULL when it may, else the first failing
-- dimension's bounded code, in a fixed order (so every withheld row is counted once). A value
-- the set does not hold, or cannot be compared, is withheld (IS NOT TRUE: fail closed). An
-- SQL-standard body is parsed when it is created, so its operators do not depend on the
-- reader's search_path, and it is inlined into the view.
CREATE OR REPLACE FUNCTION fgentic_memory.recall_withheld_reason(
    p fgentic_memory.recall_policy, p_memory_type text, p_source_kind text,
    p_confirmation_status text, p_sensitivity text, p_created_at timestamptz)
RETURNS text
LANGUAGE sql STABLE
RETURN CASE
    WHEN (p).memory_types IS NOT NULL
         AND (p_memory_type = ANY ((p).memory_types)) IS NOT TRUE
        THEN 'RECALL_TYPE_WITHHELD'
    WHEN (p).source_kinds IS NOT NULL
         AND (p_source_kind = ANY ((p).source_kinds)) IS NOT TRUE
        THEN 'RECALL_SOURCE_WITHHELD'
    WHEN (p).confirmation_statuses IS NOT NULL
         AND (p_confirmation_status = ANY ((p).confirmation_statuses)) IS NOT TRUE
        THEN 'RECALL_CONFIRMATION_WITHHELD'
    WHEN (p).sensitivities IS NOT NULL
         AND (p_sensitivity = ANY ((p).sensitivities)) IS NOT TRUE
        THEN 'RECALL_SENSITIVITY_WITHHELD'
    WHEN (p).max_age_seconds IS NOT NULL
         AND (p_created_at > statement_timestamp()
                             - make_interval(secs => (p).max_age_seconds)) IS NOT TRUE
        THEN 'RECALL_AGE_WITHHELD'
END;

REVOKE ALL ON FUNCTION fgentic_memory.recall_withheld_reason(fgentic_memory.recall_policy,text,text,text,text,timestamp with time zone)
    FROM PUBLIC, fgentic_memory_runtime, fgentic_memory_delegate;
GRANT EXECUTE ON FUNCTION fgentic_memory.recall_withheld_reason(fgentic_memory.recall_policy,text,text,text,text,timestamp with time zone) TO fgentic_memory_runtime;
