-- fgentic_memory 0007: an unforgeable scope claim (issue 17 §4).
--
-- Why: enter_scope recorded its claim in two custom settings (fgentic_memory.scope_key and
-- fgentic_memory.generation), and the view and admit() trusted them. Any role can set a custom
-- setting with set_config(), and generations are small integers, so the runtime role could
-- read another subject's facts, spend another scope's budget, and (the write gate read no
-- claim at all) write into any enabled scope without entering it.
--
-- Now enter_scope, a SECURITY DEFINER function, is the only way to obtain a claim. After its
-- checks it stores a claim token in the transaction-local setting fgentic_memory.claim:
--     <mode>|<generation>|<scope_key>|<mac>
-- where <mac> is a keyed SHA-256 over the claim and the transaction's id (xid8, unique for the
-- life of the cluster), with a per-database secret in claim_key that only the schema owner can
-- read. current_claim() recomputes the MAC: a token set by hand, altered, or copied from an
-- earlier transaction verifies as nothing. The view, the write gates and admit() read only
-- current_claim(); the old settings are still set, for anything that displays them, but
-- nothing trusts them.
--
-- A setting, not a table: MemoryStore reads in READ ONLY transactions, where no role may write
-- a table (a temporary table could be pre-created and forged by the runtime itself), but a
-- transaction id can be assigned and a setting set. The token dies with the transaction
-- (set_config(..., true)), and a later transaction of the same backend has another id.

-- 1. The secret: 48 bytes from three random UUIDs (366 random bits; gen_random_uuid() uses the
-- server's strong random source). Never granted to the runtime role.
CREATE TABLE fgentic_memory.claim_key (
    singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    secret bytea NOT NULL CHECK (octet_length(secret) >= 32)
);
INSERT INTO fgentic_memory.claim_key (secret)
SELECT uuid_send(gen_random_uuid()) || uuid_send(gen_random_uuid())
       || uuid_send(gen_random_uuid());

-- 2. The MAC of one claim in one transaction: H(k || H(k || message)), the nested form, so a
-- known token cannot be extended. The message fields cannot contain '|' (mode and generation
-- are checked; scope keys match the scope_guard pattern). Owner only: it is the signing
-- oracle.
CREATE FUNCTION fgentic_memory.claim_mac(
    p_xact xid8, p_mode text, p_generation bigint, p_scope_key text)
RETURNS text
LANGUAGE sql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT encode(sha256(k.secret || sha256(k.secret || convert_to(
               format('fgentic-claim|%s|%s|%s|%s', p_xact, p_mode, p_generation, p_scope_key),
               'UTF8'))), 'hex')
      FROM fgentic_memory.claim_key k
$$;

-- 3. The claim of the current transaction, or no row. Only a token issued by enter_scope in
-- this very transaction verifies. Without an assigned transaction id there is no claim (and
-- none is assigned here: a read that never entered a scope costs nothing).
CREATE FUNCTION fgentic_memory.current_claim()
RETURNS TABLE (scope_key text, generation bigint, mode text)
LANGUAGE plpgsql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_token text := current_setting('fgentic_memory.claim', true);
    v_xact xid8 := pg_current_xact_id_if_assigned();
    v_part text[];
BEGIN
    IF v_token IS NULL OR v_xact IS NULL OR octet_length(v_token) > 1024
       OR v_token !~ '^(capture|recall|erase)\|[0-9]{1,18}\|[a-z0-9/-]+\|[0-9a-f]{64}$'
    THEN
        RETURN;
    END IF;
    v_part := string_to_array(v_token, '|');
    IF fgentic_memory.claim_mac(v_xact, v_part[1], v_part[2]::bigint, v_part[3])
       IS DISTINCT FROM v_part[4]
    THEN
        RETURN;
    END IF;
    scope_key := v_part[3];
    generation := v_part[2]::bigint;
    mode := v_part[1];
    RETURN NEXT;
END
$$;

-- The claim a write of p_scope_key at p_generation needs: one entered in this transaction for
-- that scope and generation (any mode: the write gate's own capture check still applies).
CREATE FUNCTION fgentic_memory.require_claim(p_scope_key text, p_generation bigint)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_key text;
    v_gen bigint;
BEGIN
    SELECT c.scope_key, c.generation INTO v_key, v_gen FROM fgentic_memory.current_claim() c;
    IF v_key IS NULL OR v_key IS DISTINCT FROM p_scope_key THEN
        PERFORM fgentic_memory.refuse('SCOPE_MISSING');
    END IF;
    IF v_gen IS DISTINCT FROM p_generation THEN
        PERFORM fgentic_memory.refuse('STALE_GENERATION');
    END IF;
END
$$;

-- 4. enter_scope: the checks of 0006 (bounds, scope record, hold), then the signed claim. As
-- the owner, with a pinned search_path. The function's SET clause restores only search_path
-- on return; the set_config(..., true) calls below (and bound_transaction's) last until the
-- end of the transaction.
CREATE OR REPLACE FUNCTION fgentic_memory.enter_scope(
    p_scope_key text, p_generation bigint, p_subject text,
    p_agent_namespace text, p_agent_name text, p_room text, p_mode text)
RETURNS fgentic_memory.scope_context
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_context fgentic_memory.scope_context;
BEGIN
    PERFORM fgentic_memory.bound_transaction();
    v_context := fgentic_memory.check_scope(
        p_scope_key, p_generation, p_subject, p_agent_namespace, p_agent_name, p_room, p_mode);
    -- A per-entry forget ('erase') is never blocked: erasure needs no consent.
    IF p_mode <> 'erase' THEN
        PERFORM fgentic_memory.refuse_if_held(p_scope_key);
    END IF;
    PERFORM set_config('fgentic_memory.claim',
        format('%s|%s|%s|%s', p_mode, p_generation, p_scope_key,
               fgentic_memory.claim_mac(pg_current_xact_id(), p_mode, p_generation,
                                        p_scope_key)),
        true);
    -- Informational only: nothing trusts these any more.
    PERFORM set_config('fgentic_memory.scope_key', p_scope_key, true);
    PERFORM set_config('fgentic_memory.generation', p_generation::text, true);
    RETURN v_context;
END
$$;

-- 5. The read view: as in 0006, but the context is the verified claim.
CREATE OR REPLACE VIEW fgentic_memory.readable_memory WITH (security_barrier = true) AS
SELECT m.id,
       m.scope_key,
       m.agent_name,
       m.user_id,
       m.content,
       m.embedding,
       m.metadata,
       m.created_at,
       m.expires_at,
       m.consent_generation,
       m.memory_type,
       m.source_kind,
       m.write_reason,
       m.confirmation_status,
       m.sensitivity
  FROM fgentic_memory.current_claim() c
  JOIN fgentic_memory.memory m
    ON m.scope_key = c.scope_key AND m.consent_generation = c.generation
  JOIN fgentic_memory.scope s ON s.scope_key = m.scope_key
 WHERE m.expires_at > statement_timestamp()
   AND m.lifecycle = 'active'
   AND s.enabled
   AND s.posture IN ('enabled', 'capture_disabled')
   AND m.consent_generation = s.consent_generation
   AND NOT EXISTS (SELECT 1 FROM fgentic_memory.scope_hold h WHERE h.scope_key = m.scope_key);

-- 6. The write gates: as in 0002/0006, plus the claim, checked first (before the scope row is
-- locked or any state of another scope is revealed).
CREATE OR REPLACE FUNCTION fgentic_memory.memory_before_insert() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    s fgentic_memory.scope;
    n bigint;
BEGIN
    PERFORM fgentic_memory.require_claim(NEW.scope_key, NEW.consent_generation);
    NEW.id := gen_random_uuid()::text;
    NEW.created_at := now();
    NEW.access_count := 0;
    NEW.metadata := coalesce(NEW.metadata, '{}'::jsonb);
    NEW.memory_type := coalesce(NEW.memory_type, 'fact');
    NEW.source_kind := coalesce(NEW.source_kind, 'unknown');
    NEW.write_reason := coalesce(NEW.write_reason, 'unspecified');
    NEW.confirmation_status := coalesce(NEW.confirmation_status, 'unknown');
    NEW.sensitivity := coalesce(NEW.sensitivity, 'normal');
    NEW.lifecycle := coalesce(NEW.lifecycle, 'active');

    s := fgentic_memory.lock_scope(NEW.scope_key);
    IF NEW.user_id IS DISTINCT FROM s.subject_mxid THEN
        PERFORM fgentic_memory.refuse('CONSENT_SUBJECT_MISMATCH');
    END IF;
    IF NEW.agent_name IS DISTINCT FROM s.store_agent_name THEN
        PERFORM fgentic_memory.refuse('SCOPE_MISSING');
    END IF;
    PERFORM fgentic_memory.check_capture(s, NEW.consent_generation);
    PERFORM fgentic_memory.check_payload(s, NEW);
    IF NEW.lifecycle <> 'active' OR NEW.superseded_by IS NOT NULL THEN
        PERFORM fgentic_memory.refuse('INVALID_SPEC');
    END IF;
    IF NEW.expires_at IS NULL
       OR NEW.expires_at > now() + make_interval(days => s.max_retention_days)
    THEN
        PERFORM fgentic_memory.refuse('RETENTION_EXCEEDED');
    END IF;
    DELETE FROM fgentic_memory.memory
     WHERE scope_key = s.scope_key AND expires_at <= statement_timestamp();
    SELECT count(*) INTO n FROM fgentic_memory.memory WHERE scope_key = s.scope_key;
    IF n >= s.entry_cap THEN
        PERFORM fgentic_memory.refuse('ENTRY_CAP_REACHED');
    END IF;
    RETURN NEW;
END
$$;

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

-- 7. admit(): as in 0004, in the scope of the verified claim.
CREATE OR REPLACE FUNCTION fgentic_memory.admit(
    p_operation text, p_units integer, p_explicit boolean)
RETURNS integer
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_key text;
    v_gen bigint;
    v_now timestamptz := clock_timestamp();
    s fgentic_memory.scope;
    v_used bigint;
    v_tokens double precision;
    v_at timestamptz;
BEGIN
    IF p_operation IS NULL
       OR p_operation NOT IN ('save', 'load', 'prefetch', 'summarize', 'embedding')
       OR p_units IS NULL OR p_units NOT BETWEEN 1 AND 60 OR p_explicit IS NULL
    THEN
        PERFORM fgentic_memory.refuse('INVALID_SPEC');
    END IF;
    SELECT c.scope_key, c.generation INTO v_key, v_gen FROM fgentic_memory.current_claim() c;
    IF v_key IS NULL THEN
        PERFORM fgentic_memory.refuse('SCOPE_MISSING');
    END IF;
    s := fgentic_memory.lock_scope(v_key);
    IF NOT s.enabled OR s.posture = 'fully_disabled' THEN
        PERFORM fgentic_memory.refuse('SCOPE_DISABLED');
    END IF;
    IF p_operation IN ('save', 'summarize') AND s.posture <> 'enabled' THEN
        PERFORM fgentic_memory.refuse('CAPTURE_DISABLED');
    END IF;
    IF s.consent_generation IS DISTINCT FROM v_gen THEN
        PERFORM fgentic_memory.refuse('STALE_GENERATION');
    END IF;

    IF p_explicit THEN
        INSERT INTO fgentic_memory.rate_bucket AS b
               (subject_mxid, agent_namespace, agent_name, tokens, refreshed_at)
        VALUES (s.subject_mxid, s.agent_namespace, s.agent_name, s.explicit_burst, v_now)
        ON CONFLICT (subject_mxid, agent_namespace, agent_name)
        DO UPDATE SET tokens = b.tokens
        RETURNING b.tokens, b.refreshed_at INTO v_tokens, v_at;
        v_tokens := least(s.explicit_burst::double precision,
                          v_tokens + greatest(0, extract(epoch FROM v_now - v_at))
                                     * s.explicit_per_minute / 60.0);
        IF v_tokens < 1 THEN
            PERFORM fgentic_memory.refuse('RATE_LIMITED');
        END IF;
        UPDATE fgentic_memory.rate_bucket
           SET tokens = v_tokens - 1, refreshed_at = v_now
         WHERE subject_mxid = s.subject_mxid
           AND agent_namespace = s.agent_namespace
           AND agent_name = s.agent_name;
    END IF;

    DELETE FROM fgentic_memory.op_ledger
     WHERE scope_key = s.scope_key AND at <= v_now - interval '1 hour';
    SELECT coalesce(sum(units), 0) INTO v_used
      FROM fgentic_memory.op_ledger WHERE scope_key = s.scope_key;
    IF v_used + p_units > s.hourly_operation_ceiling THEN
        PERFORM fgentic_memory.refuse('COST_CEILING_REACHED');
    END IF;
    INSERT INTO fgentic_memory.op_ledger (scope_key, operation, units, at)
    VALUES (s.scope_key, p_operation, p_units, v_now);
    RETURN s.hourly_operation_ceiling - v_used - p_units;
END
$$;

-- 8. Privileges. The secret and the signer are the owner's alone; the runtime may verify its
-- own claim (the view calls current_claim() with the reader's privileges) and enter a scope.
REVOKE ALL ON fgentic_memory.claim_key FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION
    fgentic_memory.claim_mac(xid8, text, bigint, text),
    fgentic_memory.current_claim(),
    fgentic_memory.require_claim(text, bigint),
    fgentic_memory.enter_scope(text, bigint, text, text, text, text, text),
    fgentic_memory.admit(text, integer, boolean)
    FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
    fgentic_memory.current_claim(),
    fgentic_memory.enter_scope(text, bigint, text, text, text, text, text),
    fgentic_memory.admit(text, integer, boolean)
    TO fgentic_memory_runtime;
-- enter_scope now runs as the owner: the runtime no longer needs its helpers itself.
REVOKE EXECUTE ON FUNCTION fgentic_memory.refuse_if_held(text),
    fgentic_memory.bound_transaction() FROM fgentic_memory_runtime;
