-- 0017: the two helpers every gated write runs twice or once call their functions as plain
-- expressions. PL/pgSQL runs each PERFORM as a query through SPI (a plan, an executor start
-- and end); an assignment of the same call is evaluated directly. Same calls, same order,
-- same effects: transaction-local timeouts (bound_transaction) and the shared or exclusive
-- entry lock (entry_lock). The result (void, as text: '') is discarded.

-- 1. bound_transaction: as in 0006. The values mirror fgentic_governance.memory.bounds.RUNTIME
-- (a test holds them equal).
CREATE OR REPLACE FUNCTION fgentic_memory.bound_transaction() RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_set text;
BEGIN
    v_set := pg_catalog.set_config('lock_timeout', '2s', true);
    v_set := pg_catalog.set_config('statement_timeout', '5s', true);
    v_set := pg_catalog.set_config('idle_in_transaction_session_timeout', '5s', true);
END
$$;

-- 2. entry_lock: as in 0010.
CREATE OR REPLACE FUNCTION fgentic_memory.entry_lock(p_scope_key text, p_exclusive boolean)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_locked text;
BEGIN
    IF p_exclusive THEN
        v_locked := pg_advisory_xact_lock(1179079493, hashtext(p_scope_key));
    ELSE
        v_locked := pg_advisory_xact_lock_shared(1179079493, hashtext(p_scope_key));
    END IF;
END
$$;
