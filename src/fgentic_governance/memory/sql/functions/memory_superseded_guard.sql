-- requires: functions/check_capture, functions/lock_scope, functions/refuse, functions/require_claim
CREATE OR REPLACE FUNCTION fgentic_memory.memory_superseded_guard() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    s fgentic_memory.scope;
BEGIN
    IF NEW.superseded_by IS NOT DISTINCT FROM OLD.superseded_by OR NEW.superseded_by IS NULL
    THEN
        RETURN NEW;
    END IF;
    IF octet_length(NEW.superseded_by) <> 36
       OR NEW.superseded_by !~ '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'
       OR NEW.superseded_by = NEW.id
       OR NOT EXISTS (SELECT 1 FROM fgentic_memory.memory
                       WHERE id = NEW.superseded_by AND scope_key = NEW.scope_key)
    THEN
        PERFORM fgentic_memory.refuse('INVALID_SPEC');
    END IF;
    PERFORM fgentic_memory.require_claim(NEW.scope_key, NEW.consent_generation);
    s := fgentic_memory.lock_scope(NEW.scope_key);
    PERFORM fgentic_memory.check_capture(s, NEW.consent_generation);
    RETURN NEW;
END
$$;

REVOKE ALL ON FUNCTION fgentic_memory.memory_superseded_guard()
    FROM PUBLIC, fgentic_memory_runtime, fgentic_memory_delegate;
