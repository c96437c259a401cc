-- requires: functions/claim_mac, functions/floor_posture
-- current_claim: the transaction's claim, verified against its MAC; a capture or recall claim of a scope under a fully_disabled
-- floor is no claim (the view shows nothing, admit() refuses), from the first statement
-- after the floor is committed, even inside a transaction that entered before it.
CREATE OR REPLACE FUNCTION fgentic_memory.current_claim()
RETURNS TABLE (scope_key text, generation bigint, mode text)
LANGUAGE plpgsql STABLE
ROWS 1
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_token text := current_setting('fgentic_memory.claim', true);
    v_xact xid8 := pg_current_xact_id_if_assigned();
    v_part text[];
BEGIN
    IF v_token IS NULL OR v_xact IS NULL OR octet_length(v_token) > 1024
       OR v_token !~ '^(capture|recall|erase)\|[0-9]+\|[a-z0-9/-]+\|[0-9a-f]+$'
       OR current_setting('transaction_isolation') <> 'read committed'
    THEN
        RETURN;
    END IF;
    v_part := string_to_array(v_token, '|');
    IF octet_length(v_part[2]) > 18 OR octet_length(v_part[4]) <> 64
       OR fgentic_memory.claim_mac(v_xact, v_part[1], v_part[2]::bigint, v_part[3])
          IS DISTINCT FROM v_part[4]
    THEN
        RETURN;
    END IF;
    IF v_part[1] <> 'erase' AND EXISTS (
        SELECT 1 FROM fgentic_memory.scope sc
         WHERE sc.scope_key = v_part[3]
           AND fgentic_memory.floor_posture(sc.agent_namespace, sc.agent_name)
               = 'fully_disabled')
    THEN
        RETURN;
    END IF;
    scope_key := v_part[3];
    generation := v_part[2]::bigint;
    mode := v_part[1];
    RETURN NEXT;
END
$$;

REVOKE ALL ON FUNCTION fgentic_memory.current_claim()
    FROM PUBLIC, fgentic_memory_runtime, fgentic_memory_delegate;
GRANT EXECUTE ON FUNCTION fgentic_memory.current_claim() TO fgentic_memory_runtime;
