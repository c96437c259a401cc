-- requires: functions/refuse
-- Scope record guard: bounds, immutable binding, monotonic generation, no silent re-enable.
CREATE OR REPLACE FUNCTION fgentic_memory.scope_guard() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Validate before the CHECK constraints fire: their errors would echo the row.
    IF NEW.scope_key IS NULL
       OR NEW.scope_key !~ '^[a-z0-9]([-a-z0-9]*[a-z0-9])?/[a-z0-9]([-a-z0-9]*[a-z0-9])?$'
       OR NEW.subject_mxid IS NULL OR octet_length(NEW.subject_mxid) > 255
       OR NEW.subject_mxid !~ '^@[a-z0-9._=/+-]+:[A-Za-z0-9.-]+(:[0-9]{1,5})?$'
       OR NEW.origin_kind IS NULL
       OR NEW.origin_kind NOT IN ('native-local', 'remote-federated', 'bridged',
                                  'external-appservice', 'oauth-client')
       OR NEW.agent_namespace IS NULL OR NEW.agent_namespace !~ '^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'
       OR NEW.agent_name IS NULL OR NEW.agent_name !~ '^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'
       OR NEW.store_agent_name IS NULL
       OR NEW.store_agent_name !~ '^[A-Za-z0-9][A-Za-z0-9._/-]{0,252}$'
       OR NEW.control_room IS NULL OR octet_length(NEW.control_room) > 255
       OR NEW.control_room !~ '^![A-Za-z0-9._~+/=-]+(:[A-Za-z0-9.-]+(:[0-9]{1,5})?)?$'
       OR NEW.enabled IS NULL
       OR NEW.posture IS NULL
       OR NEW.posture NOT IN ('enabled', 'capture_disabled', 'fully_disabled')
       OR NEW.consent_generation IS NULL OR NEW.consent_generation < 0
       OR NEW.entry_cap IS NULL OR NEW.entry_cap NOT BETWEEN 1 AND 100
       OR NEW.max_fact_bytes IS NULL OR NEW.max_fact_bytes NOT BETWEEN 1 AND 512
       OR NEW.max_retention_days IS NULL OR NEW.max_retention_days NOT BETWEEN 1 AND 7
       OR NEW.hourly_operation_ceiling IS NULL
       OR NEW.hourly_operation_ceiling NOT BETWEEN 1 AND 60
       OR NEW.explicit_per_minute IS NULL OR NEW.explicit_per_minute NOT BETWEEN 1 AND 6
       OR NEW.explicit_burst IS NULL OR NEW.explicit_burst NOT BETWEEN 1 AND 3
    THEN
        PERFORM fgentic_memory.refuse('INVALID_SPEC');
    END IF;

    IF TG_OP = 'INSERT' THEN
        -- A scope is born disabled at generation 0: consent is always a later, explicit step.
        IF NEW.enabled OR NEW.consent_generation <> 0 THEN
            PERFORM fgentic_memory.refuse('INVALID_SPEC');
        END IF;
        RETURN NEW;
    END IF;

    -- The typed triple and the store spelling are the binding of every stored row.
    IF NEW.scope_key <> OLD.scope_key
       OR NEW.subject_mxid <> OLD.subject_mxid
       OR NEW.origin_kind <> OLD.origin_kind
       OR NEW.agent_namespace <> OLD.agent_namespace
       OR NEW.agent_name <> OLD.agent_name
       OR NEW.store_agent_name <> OLD.store_agent_name
       OR NEW.control_room <> OLD.control_room
       OR NEW.created_at <> OLD.created_at
    THEN
        PERFORM fgentic_memory.refuse('BINDING_CONFLICT');
    END IF;
    -- The maximum retention is immutable once set (ADR 0023 §25: an immutable maximum expiry).
    IF NEW.max_retention_days <> OLD.max_retention_days THEN
        PERFORM fgentic_memory.refuse('INVALID_SPEC');
    END IF;
    -- Generations only grow, and any consent transition advances one, so a re-enabled scope can
    -- never again accept or show anything stamped before the transition.
    IF NEW.consent_generation < OLD.consent_generation
       OR (NEW.enabled <> OLD.enabled AND NEW.consent_generation <= OLD.consent_generation)
    THEN
        PERFORM fgentic_memory.refuse('STALE_GENERATION');
    END IF;
    IF NEW.enabled AND NEW.origin_kind <> 'native-local' THEN
        -- ADR 0023 §30: v1 admits only a native local principal.
        PERFORM fgentic_memory.refuse('FEDERATION_DENIED');
    END IF;
    RETURN NEW;
END
$$;

REVOKE ALL ON FUNCTION fgentic_memory.scope_guard()
    FROM PUBLIC, fgentic_memory_runtime, fgentic_memory_delegate;
