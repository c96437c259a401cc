-- fgentic_memory 0001: the durable scope record and the kagent-shaped memory table.
--
-- Every object lives in the dedicated schema `fgentic_memory`. The memory table keeps kagent
-- v0.9.11's columns (id, agent_name, user_id, content, embedding vector(768), metadata,
-- created_at, expires_at, access_count) so an adapted kagent keeps its SQL shape, plus the
-- governed columns: scope key, consent generation and the content-free envelope.
--
-- CHECK constraints here are backstops only. PostgreSQL reports a CHECK or NOT NULL
-- violation with "Failing row contains (...)", i.e. with the fact text, so the BEFORE
-- triggers of 0002 validate every column first and refuse with a bare reason code.

CREATE EXTENSION IF NOT EXISTS vector;

-- One row per MemoryScope: the typed triple (subject, Agent, control room) and its consent
-- state. Consent generation only ever grows; enabling or disabling always advances it (0002).
CREATE TABLE fgentic_memory.scope (
    scope_key text PRIMARY KEY
        CHECK (scope_key ~ '^[a-z0-9]([-a-z0-9]*[a-z0-9])?/[a-z0-9]([-a-z0-9]*[a-z0-9])?$'),
    subject_mxid text NOT NULL
        CHECK (octet_length(subject_mxid) <= 255
               AND subject_mxid ~ '^@[a-z0-9._=/+-]+:[A-Za-z0-9.-]+(:[0-9]{1,5})?$'),
    origin_kind text NOT NULL
        CHECK (origin_kind IN ('native-local', 'remote-federated', 'bridged',
                               'external-appservice', 'oauth-client')),
    agent_namespace text NOT NULL CHECK (agent_namespace ~ '^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'),
    agent_name text NOT NULL CHECK (agent_name ~ '^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'),
    -- The exact agent_name spelling the content store's rows carry for this Agent.
    store_agent_name text NOT NULL CHECK (store_agent_name ~ '^[A-Za-z0-9][A-Za-z0-9._/-]{0,252}$'),
    control_room text NOT NULL
        CHECK (octet_length(control_room) <= 255
               AND control_room ~ '^![A-Za-z0-9._~+/=-]+(:[A-Za-z0-9.-]+(:[0-9]{1,5})?)?$'),
    enabled boolean NOT NULL DEFAULT false,
    posture text NOT NULL DEFAULT 'fully_disabled'
        CHECK (posture IN ('enabled', 'capture_disabled', 'fully_disabled')),
    consent_generation bigint NOT NULL DEFAULT 0 CHECK (consent_generation >= 0),
    entry_cap integer NOT NULL DEFAULT 100 CHECK (entry_cap BETWEEN 1 AND 100),
    max_fact_bytes integer NOT NULL DEFAULT 512 CHECK (max_fact_bytes BETWEEN 1 AND 512),
    max_retention_days integer NOT NULL DEFAULT 7 CHECK (max_retention_days BETWEEN 1 AND 7),
    hourly_operation_ceiling integer NOT NULL DEFAULT 60
        CHECK (hourly_operation_ceiling BETWEEN 1 AND 60),
    explicit_per_minute integer NOT NULL DEFAULT 6 CHECK (explicit_per_minute BETWEEN 1 AND 6),
    explicit_burst integer NOT NULL DEFAULT 3 CHECK (explicit_burst BETWEEN 1 AND 3),
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    -- Touched by every gated write and admission: the row lock that serializes them per scope.
    last_gated_at timestamptz,
    UNIQUE (subject_mxid, agent_namespace, agent_name, control_room)
);

CREATE TABLE fgentic_memory.memory (
    id text PRIMARY KEY DEFAULT gen_random_uuid()::text,
    agent_name text NOT NULL,
    user_id text NOT NULL,
    content text NOT NULL,
    embedding vector(768),
    metadata jsonb NOT NULL DEFAULT '{}'::jsonb,
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL,
    access_count integer NOT NULL DEFAULT 0,
    -- Governed columns. RESTRICT: a scope is erased before it can be dropped.
    scope_key text NOT NULL REFERENCES fgentic_memory.scope (scope_key) ON DELETE RESTRICT,
    consent_generation bigint NOT NULL,
    memory_type text NOT NULL DEFAULT 'fact'
        CHECK (memory_type IN ('preference', 'fact', 'decision', 'instruction',
                               'relationship', 'task_state', 'working_note')),
    source_kind text NOT NULL DEFAULT 'unknown'
        CHECK (source_kind IN ('user_message', 'assistant_response', 'automatic_summary',
                               'save_memory_tool', 'unknown')),
    write_reason text NOT NULL DEFAULT 'unspecified'
        CHECK (write_reason IN ('explicit_user_request', 'user_preference_extracted',
                                'automatic_summary', 'task_checkpoint', 'unspecified')),
    confirmation_status text NOT NULL DEFAULT 'unknown'
        CHECK (confirmation_status IN ('user_confirmed', 'model_inferred', 'unknown')),
    sensitivity text NOT NULL DEFAULT 'normal'
        CHECK (sensitivity IN ('normal', 'personal', 'sensitive')),
    lifecycle text NOT NULL DEFAULT 'active'
        CHECK (lifecycle IN ('active', 'stale', 'superseded', 'suppressed')),
    superseded_by text
);

CREATE INDEX memory_scope_generation_idx ON fgentic_memory.memory (scope_key, consent_generation);
CREATE INDEX memory_agent_user_idx ON fgentic_memory.memory (agent_name, user_id);
CREATE INDEX memory_expires_at_idx ON fgentic_memory.memory (expires_at);

-- Since 0025 the functions, views and triggers of this step are each defined, as they are
-- now, in one file of sql/functions/, sql/views/ or sql/triggers/, with their grants.
