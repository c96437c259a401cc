-- bound_transaction: pins the runtime's transaction bounds. The values mirror fgentic_governance.memory.bounds.RUNTIME
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

REVOKE ALL ON FUNCTION fgentic_memory.bound_transaction()
    FROM PUBLIC, fgentic_memory_runtime, fgentic_memory_delegate;
