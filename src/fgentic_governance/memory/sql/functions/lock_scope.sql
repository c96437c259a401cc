-- requires: functions/bound_transaction, functions/held, functions/refuse
CREATE OR REPLACE FUNCTION fgentic_memory.lock_scope(p_scope_key text)
RETURNS fgentic_memory.scope
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    s fgentic_memory.scope;
BEGIN
    PERFORM fgentic_memory.bound_transaction();
    IF p_scope_key IS NULL THEN
        PERFORM fgentic_memory.refuse('SCOPE_MISSING');
    END IF;
    -- Writes and cost admissions of a held scope are refused before they queue for the row
    -- (reads: enter_scope and the view). A hold placed after this check is covered by the
    -- fence that follows it, which waits for this transaction and then deletes its rows.
    IF fgentic_memory.held(p_scope_key) THEN
        PERFORM fgentic_memory.refuse('SCOPE_DISABLED');
    END IF;
    -- A row lock, not an update: it conflicts with the fence's UPDATE of the row exactly as
    -- an update did, and after a wait returns the row as the fence left it (READ
    -- COMMITTED), without writing a new row version per insert.
    SELECT * INTO s FROM fgentic_memory.scope
     WHERE scope_key = p_scope_key
       FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        PERFORM fgentic_memory.refuse('SCOPE_MISSING');
    END IF;
    RETURN s;
END
$$;

REVOKE ALL ON FUNCTION fgentic_memory.lock_scope(text)
    FROM PUBLIC, fgentic_memory_runtime, fgentic_memory_delegate;
