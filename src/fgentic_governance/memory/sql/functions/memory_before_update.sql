-- requires: functions/check_capture, functions/check_payload, functions/lock_scope, functions/refuse, functions/require_claim
CREATE OR REPLACE FUNCTION fgentic_memory.memory_before_update() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    s fgentic_memory.scope;
BEGIN
    IF NEW.id IS DISTINCT FROM OLD.id
       OR NEW.scope_key IS DISTINCT FROM OLD.scope_key
       OR NEW.agent_name IS DISTINCT FROM OLD.agent_name
       OR NEW.user_id IS DISTINCT FROM OLD.user_id
    THEN
        PERFORM fgentic_memory.refuse('BINDING_CONFLICT');
    END IF;
    IF NEW.consent_generation IS DISTINCT FROM OLD.consent_generation THEN
        PERFORM fgentic_memory.refuse('STALE_GENERATION');
    END IF;
    IF NEW.expires_at IS NULL OR NEW.expires_at > OLD.expires_at
       OR NEW.created_at IS DISTINCT FROM OLD.created_at
    THEN
        PERFORM fgentic_memory.refuse('EXPIRY_EXTENSION_DENIED');
    END IF;
    IF NEW.access_count IS NULL OR NEW.lifecycle IS NULL
       OR NEW.lifecycle NOT IN ('active', 'stale', 'superseded', 'suppressed')
    THEN
        PERFORM fgentic_memory.refuse('INVALID_SPEC');
    END IF;
    -- Content-free bookkeeping, earlier expiry and demotions pass without a claim (they only
    -- reduce what is readable). A content change or re-activation is a write: claim + gate.
    IF NEW.content IS DISTINCT FROM OLD.content
       OR NEW.embedding::text IS DISTINCT FROM OLD.embedding::text
       OR NEW.metadata IS DISTINCT FROM OLD.metadata
       OR NEW.memory_type IS DISTINCT FROM OLD.memory_type
       OR NEW.source_kind IS DISTINCT FROM OLD.source_kind
       OR NEW.write_reason IS DISTINCT FROM OLD.write_reason
       OR NEW.confirmation_status IS DISTINCT FROM OLD.confirmation_status
       OR NEW.sensitivity IS DISTINCT FROM OLD.sensitivity
       OR (NEW.lifecycle = 'active' AND OLD.lifecycle <> 'active')
    THEN
        PERFORM fgentic_memory.require_claim(NEW.scope_key, NEW.consent_generation);
        s := fgentic_memory.lock_scope(NEW.scope_key);
        PERFORM fgentic_memory.check_capture(s, NEW.consent_generation);
        PERFORM fgentic_memory.check_payload(s, NEW);
    END IF;
    RETURN NEW;
END
$$;

REVOKE ALL ON FUNCTION fgentic_memory.memory_before_update()
    FROM PUBLIC, fgentic_memory_runtime, fgentic_memory_delegate;
