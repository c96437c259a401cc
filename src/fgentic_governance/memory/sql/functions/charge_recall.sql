-- requires: functions/current_claim, functions/max_recalls_per_lease, functions/refuse
-- Charge one search to a live lease of the scope this transaction entered for recall. Only
-- the claim names the scope (a caller cannot pick another), and only the delegating role may
-- call it. FOR UPDATE serialises the parallel searches of one prefetch: a second charge waits
-- for the first and then re-reads the row, so two can never take the last recall; one that
-- finds the lease used up after the wait is refused rather than moved to another lease (fail
-- closed; the bridge's next turn opens a fresh lease).
CREATE OR REPLACE FUNCTION fgentic_memory.charge_recall() RETURNS uuid
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_scope text;
    v_generation bigint;
    v_lease uuid;
BEGIN
    SELECT c.scope_key, c.generation INTO v_scope, v_generation
      FROM fgentic_memory.current_claim() c
     WHERE c.mode = 'recall';
    IF v_scope IS NULL THEN
        PERFORM fgentic_memory.refuse('LEASE_MISSING');
    END IF;
    SELECT l.lease_id INTO v_lease
      FROM fgentic_memory.delegation_lease l
      JOIN fgentic_memory.scope s ON s.scope_key = l.scope_key
     WHERE l.scope_key = v_scope
       AND l.consent_generation = v_generation
       AND l.closed_at IS NULL
       AND l.expires_at > statement_timestamp()
       AND l.recalls < least(fgentic_memory.max_recalls_per_lease(), s.max_recalls)
     ORDER BY l.opened_at, l.lease_id
     LIMIT 1
       FOR UPDATE OF l;
    IF v_lease IS NULL THEN
        PERFORM fgentic_memory.refuse('RECALL_LIMIT_REACHED');
    END IF;
    UPDATE fgentic_memory.delegation_lease SET recalls = recalls + 1 WHERE lease_id = v_lease;
    RETURN v_lease;
END
$$;

REVOKE ALL ON FUNCTION fgentic_memory.charge_recall()
    FROM PUBLIC, fgentic_memory_runtime, fgentic_memory_delegate;
GRANT EXECUTE ON FUNCTION fgentic_memory.charge_recall() TO fgentic_memory_delegate;
