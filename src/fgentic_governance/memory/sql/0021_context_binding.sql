-- 0021: a lease bound to its room's A2A context (issue 38 §1), load_memory told from prefetch
-- (issue 38 §6).
--
-- kagent-adk 0.9.11's memory calls name an Agent and a user, never the A2A context (the ADK
-- session) they serve; only its session and task calls do (/api/sessions/<context>, a
-- session's create body "id", a task's "contextId"). So while Alice's control-room turn held
-- a lease, her concurrent turn with the same Agent in a team room was served her memory. Now
-- the bridge names the control room's context when it opens a lease, the memory API notes
-- here, before it relays them, the contexts those pass-through calls name (every replica sees
-- every other's notes), and a memory call of (Agent, user) is admitted only while the
-- contexts of that pair in progress are exactly the one its live lease names: which context a
-- memory call serves cannot be read from it, but causality bounds it (every memory call of a
-- context follows an answered session call naming it), so two contexts in progress refuse
-- each other (CONTEXT_CONFLICT) and the runtime answers both turns without memory.
--
-- A context is in progress from the first call naming it until its task reaches a final
-- state, then for max_save_seconds() more when an automatic save may follow (the runtime
-- starts it in the background after its every fifth user event, and it can arrive after the
-- final task state), and never longer than max_context_seconds() after the last call naming
-- it (a runtime that died mid-turn). Only ids, counts and times are kept, never an event.

-- 1. One more refusal code.
CREATE OR REPLACE FUNCTION fgentic_memory.refuse(p_reason text) RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_state text := CASE p_reason
        WHEN 'SCOPE_MISSING' THEN 'FG001'
        WHEN 'SCOPE_DISABLED' THEN 'FG002'
        WHEN 'CAPTURE_DISABLED' THEN 'FG003'
        WHEN 'STALE_GENERATION' THEN 'FG004'
        WHEN 'ENTRY_CAP_REACHED' THEN 'FG005'
        WHEN 'FACT_TOO_LARGE' THEN 'FG006'
        WHEN 'RETENTION_EXCEEDED' THEN 'FG007'
        WHEN 'EXPIRY_EXTENSION_DENIED' THEN 'FG008'
        WHEN 'CONSENT_SUBJECT_MISMATCH' THEN 'FG009'
        WHEN 'FEDERATION_DENIED' THEN 'FG010'
        WHEN 'BINDING_CONFLICT' THEN 'FG011'
        WHEN 'INVALID_SPEC' THEN 'FG012'
        WHEN 'COST_CEILING_REACHED' THEN 'FG013'
        WHEN 'RATE_LIMITED' THEN 'FG014'
        WHEN 'CREDENTIAL_CONTENT' THEN 'FG015'
        WHEN 'HIGH_RISK_INSTRUCTION_CONTENT' THEN 'FG016'
        WHEN 'LEASE_MISSING' THEN 'FG017'
        WHEN 'SCOPE_AMBIGUOUS' THEN 'FG018'
        WHEN 'ISOLATION_REFUSED' THEN 'FG019'
        WHEN 'LEASE_LIMIT_REACHED' THEN 'FG020'
        WHEN 'RECALL_LIMIT_REACHED' THEN 'FG021'
        WHEN 'SUMMARY_TOO_LARGE' THEN 'FG022'
        WHEN 'SUMMARY_CADENCE_REACHED' THEN 'FG023'
        WHEN 'SUMMARY_INPUT_TOO_LARGE' THEN 'FG024'
        WHEN 'CONTEXT_CONFLICT' THEN 'FG025'
        ELSE 'FG999'
    END;
BEGIN
    IF v_state = 'FG999' THEN
        RAISE EXCEPTION USING ERRCODE = 'FG999', MESSAGE = 'INTERNAL_ERROR';
    END IF;
    RAISE EXCEPTION USING ERRCODE = v_state, MESSAGE = p_reason;
END
$$;

-- 2. Bounds, mirrored by fgentic_governance.memory.model (a test holds them equal).
-- An A2A context id as the bridge and the runtime send it (a UUID, or the bridge's own
-- bounded id): no "/" (it is a path segment), nothing to escape.
CREATE FUNCTION fgentic_memory.context_pattern() RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT '^[A-Za-z0-9._:-]{1,128}$' $$;

-- Longer than a lease can live (540 s): a turn in progress is never aged out while its lease
-- could still admit it.
CREATE FUNCTION fgentic_memory.max_context_seconds() RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT 600 $$;

-- How long after its final task state a context's automatic save may still arrive: the
-- summarisation's model call (the runtime's OpenAI client waits up to 600 s, but the memory
-- API's model route answers or fails well within this) plus one embedding.
CREATE FUNCTION fgentic_memory.max_save_seconds() RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT 120 $$;

-- Outstanding load_memory calls kept per context (a turn makes a few; beyond, the oldest go:
-- a forgotten id only makes a search count as prefetch's, which the hourly ceiling bounds).
CREATE FUNCTION fgentic_memory.max_tool_calls() RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT 16 $$;

-- 3. The lease names its context.
ALTER TABLE fgentic_memory.delegation_lease ADD COLUMN context_id text
    CHECK (context_id ~ '^[A-Za-z0-9._:-]{1,128}$');

-- 4. The contexts the runtime's pass-through calls named, per (Agent, user).
CREATE TABLE fgentic_memory.agent_context (
    agent_namespace text NOT NULL,
    agent_name text NOT NULL,
    user_id text NOT NULL CHECK (octet_length(user_id) BETWEEN 1 AND 255),
    context_id text NOT NULL CHECK (context_id ~ '^[A-Za-z0-9._:-]{1,128}$'),
    seen_at timestamptz NOT NULL,
    closed_at timestamptz,
    -- user_events counts the session's user events from its creation on (counted); a session
    -- first seen later has an unknown count, so its every final state may be followed by a
    -- save.
    counted boolean NOT NULL,
    user_events bigint NOT NULL DEFAULT 0,
    -- The user-event count at which its automatic save last arrived: a turn that ends after
    -- its save came waits for none.
    saved_events bigint,
    save_until timestamptz,
    tool_calls text[] NOT NULL DEFAULT '{}',
    PRIMARY KEY (agent_namespace, agent_name, user_id, context_id)
);
REVOKE ALL ON fgentic_memory.agent_context FROM PUBLIC;

-- One pass-through call of the Agent's Pod for p_user naming p_context: p_created (it creates
-- the session), p_user_events (user events it appends), p_final (its task reached a final
-- state), p_called / p_answered (load_memory function_call / function_response ids it
-- appends). Any call but a final one puts the context in progress again.
CREATE FUNCTION fgentic_memory.note_context(
    p_agent_namespace text, p_agent_name text, p_user text, p_context text,
    p_created boolean, p_user_events integer, p_final boolean,
    p_called text[], p_answered text[])
RETURNS void
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    c fgentic_memory.agent_context;
BEGIN
    IF p_agent_namespace IS NULL OR p_agent_name IS NULL OR p_user IS NULL
       OR octet_length(p_user) NOT BETWEEN 1 AND 255
       OR p_context IS NULL OR p_context !~ fgentic_memory.context_pattern()
       OR p_created IS NULL OR p_final IS NULL OR p_called IS NULL OR p_answered IS NULL
       OR p_user_events IS NULL OR p_user_events NOT BETWEEN 0 AND 1000
       OR cardinality(p_called) > fgentic_memory.max_tool_calls()
       OR cardinality(p_answered) > fgentic_memory.max_tool_calls()
       OR EXISTS (SELECT 1 FROM unnest(p_called || p_answered) i
                   WHERE i IS NULL OR octet_length(i) NOT BETWEEN 1 AND 128)
    THEN
        PERFORM fgentic_memory.refuse('INVALID_SPEC');
    END IF;
    INSERT INTO fgentic_memory.agent_context AS a
           (agent_namespace, agent_name, user_id, context_id, seen_at, counted)
    VALUES (p_agent_namespace, p_agent_name, p_user, p_context, statement_timestamp(),
            p_created)
    ON CONFLICT (agent_namespace, agent_name, user_id, context_id) DO UPDATE
       SET seen_at = statement_timestamp()
    RETURNING * INTO c;
    IF p_created THEN  -- a new session: its count starts here
        c.counted := true;
        c.user_events := 0;
        c.saved_events := NULL;
    END IF;
    c.user_events := c.user_events + p_user_events;
    c.tool_calls := (SELECT coalesce(array_agg(i ORDER BY n), '{}') FROM (
        SELECT i, n FROM unnest(c.tool_calls || p_called) WITH ORDINALITY AS t(i, n)
         WHERE i <> ALL (p_answered)
         ORDER BY n DESC LIMIT fgentic_memory.max_tool_calls()) kept);
    IF p_final THEN
        c.closed_at := statement_timestamp();
        c.tool_calls := '{}';
        IF c.saved_events IS DISTINCT FROM c.user_events
           AND (NOT c.counted OR c.user_events % 5 = 0)
        THEN
            c.save_until := statement_timestamp()
                + make_interval(secs => fgentic_memory.max_save_seconds());
        END IF;
    ELSE
        c.closed_at := NULL;
    END IF;
    UPDATE fgentic_memory.agent_context a
       SET counted = c.counted, user_events = c.user_events, tool_calls = c.tool_calls,
           closed_at = c.closed_at, save_until = c.save_until, saved_events = c.saved_events
     WHERE a.agent_namespace = p_agent_namespace AND a.agent_name = p_agent_name
       AND a.user_id = p_user AND a.context_id = p_context;
END
$$;

-- The contexts of (Agent, user) in progress now, with their outstanding load_memory calls.
CREATE FUNCTION fgentic_memory.contexts_in_progress(
    p_agent_namespace text, p_agent_name text, p_user text)
RETURNS SETOF fgentic_memory.agent_context
LANGUAGE sql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT * FROM fgentic_memory.agent_context a
     WHERE a.agent_namespace = p_agent_namespace AND a.agent_name = p_agent_name
       AND a.user_id = p_user
       AND ((a.closed_at IS NULL AND a.seen_at > statement_timestamp()
                 - make_interval(secs => fgentic_memory.max_context_seconds()))
            OR a.save_until > statement_timestamp())
$$;

-- An automatic save arrived for (Agent, user), admitted or not: if it can only be one
-- context's (the one context of the pair that may save now: closed and waiting for it, or in
-- progress at a multiple of five user events or uncounted, and not saved at that count yet),
-- that context waits for it no more, and a turn of it ending at this count waits for none.
-- Run after the admission, in a statement of its own: a refused save ends the wait too.
CREATE FUNCTION fgentic_memory.end_save_wait(
    p_subject text, p_agent_namespace text, p_agent_name text)
RETURNS void
LANGUAGE sql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    WITH may_save AS (
        SELECT a.context_id
          FROM fgentic_memory.contexts_in_progress(p_agent_namespace, p_agent_name, p_subject) a
         WHERE (a.closed_at IS NOT NULL AND a.save_until > statement_timestamp())
            OR (a.closed_at IS NULL AND a.saved_events IS DISTINCT FROM a.user_events
                AND (NOT a.counted OR (a.user_events > 0 AND a.user_events % 5 = 0))))
    UPDATE fgentic_memory.agent_context a SET save_until = NULL, saved_events = a.user_events
      FROM may_save m
     WHERE (SELECT count(*) FROM may_save) = 1
       AND a.agent_namespace = p_agent_namespace AND a.agent_name = p_agent_name
       AND a.user_id = p_subject AND a.context_id = m.context_id
$$;

-- 5. Bind a memory call of (subject, Agent) to its lease's context, in the admission's
-- transaction: CONTEXT_CONFLICT unless the contexts in progress are exactly the one context
-- every live lease of the pair names. Returns whether that context has an outstanding
-- load_memory call (a search is then the tool's, §42's explicit bucket; otherwise prefetch's).
-- Every lease names its context (open_lease refuses one without); a live lease naming none (a
-- row older than this migration, or written around open_lease) binds nothing: refused.
CREATE FUNCTION fgentic_memory.bind_context(
    p_subject text, p_agent_namespace text, p_agent_name text)
RETURNS boolean
LANGUAGE plpgsql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_leased text[];
    v_active fgentic_memory.agent_context[];
BEGIN
    SELECT array_agg(DISTINCT coalesce(l.context_id, '')) INTO v_leased
      FROM fgentic_memory.scope sc
      JOIN fgentic_memory.delegation_lease l ON l.scope_key = sc.scope_key
     WHERE sc.subject_mxid = p_subject
       AND sc.agent_namespace = p_agent_namespace
       AND sc.agent_name = p_agent_name
       AND l.closed_at IS NULL
       AND l.expires_at > statement_timestamp()
       AND l.consent_generation = sc.consent_generation
       AND sc.enabled;
    IF v_leased IS NULL THEN
        RETURN false;  -- no live lease: enter_delegation has refused the call already
    END IF;
    SELECT array_agg(a) INTO v_active
      FROM fgentic_memory.contexts_in_progress(p_agent_namespace, p_agent_name, p_subject) a;
    IF cardinality(v_leased) <> 1 OR v_leased[1] = '' OR v_active IS NULL
       OR cardinality(v_active) <> 1
       OR v_active[1].context_id <> v_leased[1]
    THEN
        PERFORM fgentic_memory.refuse('CONTEXT_CONFLICT');
    END IF;
    RETURN cardinality(v_active[1].tool_calls) > 0;
END
$$;

-- 6. The lease open of sql/0010, naming its context: a replay must name the same one.
DROP FUNCTION fgentic_memory.open_lease(text, bigint, text, text, text, text, integer, uuid);
CREATE FUNCTION fgentic_memory.open_lease(
    p_scope_key text, p_generation bigint, p_subject text,
    p_agent_namespace text, p_agent_name text, p_room text, p_seconds integer,
    p_delegation_id uuid, p_context_id text)
RETURNS TABLE (lease_id uuid, expires_at timestamptz)
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_lease fgentic_memory.delegation_lease;
    v_live bigint;
BEGIN
    -- A lease names its context: without one it could bind no memory call (fail closed).
    IF p_seconds IS NULL OR p_seconds < 1 OR p_seconds > 540
       OR p_context_id IS NULL OR p_context_id !~ fgentic_memory.context_pattern()
    THEN
        PERFORM fgentic_memory.refuse('INVALID_SPEC');
    END IF;
    PERFORM fgentic_memory.bound_transaction();
    PERFORM fgentic_memory.check_scope(
        p_scope_key, p_generation, p_subject, p_agent_namespace, p_agent_name, p_room, 'recall');
    PERFORM fgentic_memory.refuse_if_held(p_scope_key);
    PERFORM pg_advisory_xact_lock(1179077715, hashtext(
        format('%s|%s|%s', p_subject, p_agent_namespace, p_agent_name)));
    IF p_delegation_id IS NOT NULL THEN
        SELECT * INTO v_lease FROM fgentic_memory.delegation_lease l
         WHERE l.scope_key = p_scope_key AND l.delegation_id = p_delegation_id;
        IF FOUND THEN
            IF v_lease.closed_at IS NOT NULL OR v_lease.expires_at <= statement_timestamp()
               OR v_lease.consent_generation <> p_generation
            THEN
                PERFORM fgentic_memory.refuse('LEASE_MISSING');
            END IF;
            IF v_lease.context_id IS DISTINCT FROM p_context_id THEN
                PERFORM fgentic_memory.refuse('CONTEXT_CONFLICT');
            END IF;
            RETURN QUERY SELECT v_lease.lease_id, v_lease.expires_at;
            RETURN;
        END IF;
    END IF;
    SELECT count(*) INTO v_live
      FROM fgentic_memory.scope sc
      JOIN fgentic_memory.delegation_lease l ON l.scope_key = sc.scope_key
     WHERE sc.subject_mxid = p_subject
       AND sc.agent_namespace = p_agent_namespace
       AND sc.agent_name = p_agent_name
       AND l.closed_at IS NULL
       AND l.expires_at > statement_timestamp()
       AND l.consent_generation = sc.consent_generation
       AND sc.enabled;
    IF v_live >= fgentic_memory.max_live_leases() THEN
        PERFORM fgentic_memory.refuse('LEASE_LIMIT_REACHED');
    END IF;
    RETURN QUERY
        INSERT INTO fgentic_memory.delegation_lease AS l
               (scope_key, consent_generation, expires_at, delegation_id, context_id)
        VALUES (p_scope_key, p_generation, now() + make_interval(secs => p_seconds),
                p_delegation_id, p_context_id)
        RETURNING l.lease_id, l.expires_at;
END
$$;

-- Notes no window counts any more (the operator's periodic cleanup, like prune_activity()).
-- A pruned session's count restarts unknown: its every final state is then followed by the
-- save wait (more refusals, never a missed save).
CREATE FUNCTION fgentic_memory.prune_contexts() RETURNS bigint
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    n bigint;
BEGIN
    DELETE FROM fgentic_memory.agent_context
     WHERE seen_at <= statement_timestamp() - interval '7 days';
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$$;

-- 7. Privileges: the memory API's delegate role notes and binds; the operator prunes.
REVOKE EXECUTE ON FUNCTION fgentic_memory.context_pattern(),
    fgentic_memory.max_context_seconds(), fgentic_memory.max_save_seconds(),
    fgentic_memory.max_tool_calls(),
    fgentic_memory.note_context(text, text, text, text, boolean, integer, boolean, text[],
                                text[]),
    fgentic_memory.contexts_in_progress(text, text, text),
    fgentic_memory.bind_context(text, text, text),
    fgentic_memory.end_save_wait(text, text, text),
    fgentic_memory.open_lease(text, bigint, text, text, text, text, integer, uuid, text),
    fgentic_memory.prune_contexts()
    FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
    fgentic_memory.note_context(text, text, text, text, boolean, integer, boolean, text[],
                                text[]),
    fgentic_memory.bind_context(text, text, text),
    fgentic_memory.end_save_wait(text, text, text)
    TO fgentic_memory_delegate;
GRANT EXECUTE ON FUNCTION fgentic_memory.prune_contexts() TO fgentic_memory_runtime;
