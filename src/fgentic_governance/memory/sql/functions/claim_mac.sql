-- requires: functions/claim_sign
-- The MAC of one claim in one transaction: H(k || H(k || message)), the nested form, so a
-- known token cannot be extended. The message fields cannot contain '|' (mode and generation
-- are checked; scope keys match the scope_guard pattern). Owner only: it is the signing
-- oracle.
CREATE OR REPLACE FUNCTION fgentic_memory.claim_mac(
    p_xact xid8, p_mode text, p_generation bigint, p_scope_key text)
RETURNS text
LANGUAGE sql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT fgentic_memory.claim_sign(k.secret, p_xact, p_mode, p_generation, p_scope_key)
      FROM fgentic_memory.claim_key k
$$;

REVOKE ALL ON FUNCTION fgentic_memory.claim_mac(xid8,text,bigint,text)
    FROM PUBLIC, fgentic_memory_runtime, fgentic_memory_delegate;
