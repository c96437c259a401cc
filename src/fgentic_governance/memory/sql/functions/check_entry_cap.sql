-- requires: functions/refuse
-- check_entry_cap: the entry cap of save_fact() and the insert trigger, under the scope lock
-- they hold, in statements after it (each a fresh snapshot): expired rows are deleted first,
-- but only looked for in the same scan as the count.
CREATE OR REPLACE FUNCTION fgentic_memory.check_entry_cap(s fgentic_memory.scope)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    n bigint;
    v_expired bigint;
BEGIN
    SELECT count(*), count(*) FILTER (WHERE m.expires_at <= statement_timestamp())
      INTO n, v_expired
      FROM fgentic_memory.memory m WHERE m.scope_key = s.scope_key;
    IF v_expired > 0 THEN
        DELETE FROM fgentic_memory.memory
         WHERE scope_key = s.scope_key AND expires_at <= statement_timestamp();
        SELECT count(*) INTO n FROM fgentic_memory.memory WHERE scope_key = s.scope_key;
    END IF;
    IF n >= s.entry_cap THEN
        PERFORM fgentic_memory.refuse('ENTRY_CAP_REACHED');
    END IF;
END
$$;

REVOKE ALL ON FUNCTION fgentic_memory.check_entry_cap(fgentic_memory.scope)
    FROM PUBLIC, fgentic_memory_runtime, fgentic_memory_delegate;
