-- claim_sign: the claim MAC's one formula, H(k || H(k || message)) (claim_mac() explains it),
-- for a key the caller has read: claim_mac(), enter_scope and the insert trigger call it.
-- Not SECURITY DEFINER and no SET clause so that the planner inlines it into each caller's
-- expression (an inlined body costs what the restated formula cost); every name in it is
-- pg_catalog's, and only the owner may call it.
CREATE OR REPLACE FUNCTION fgentic_memory.claim_sign(
    p_secret bytea, p_xact xid8, p_mode text, p_generation bigint, p_scope_key text)
RETURNS text
LANGUAGE sql STABLE
AS $$
    SELECT pg_catalog.encode(pg_catalog.sha256(p_secret OPERATOR(pg_catalog.||)
               pg_catalog.sha256(p_secret OPERATOR(pg_catalog.||) pg_catalog.convert_to(
                   pg_catalog.format('fgentic-claim|%s|%s|%s|%s', p_xact, p_mode,
                                     p_generation, p_scope_key),
                   'UTF8'))), 'hex')
$$;

REVOKE ALL ON FUNCTION fgentic_memory.claim_sign(bytea,xid8,text,bigint,text)
    FROM PUBLIC, fgentic_memory_runtime, fgentic_memory_delegate;
