-- Every lease opened counts as one user turn towards the scope's summary cadence.
CREATE OR REPLACE FUNCTION fgentic_memory.count_lease() RETURNS trigger
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    INSERT INTO fgentic_memory.summary_cadence AS c (scope_key, leases)
    VALUES (NEW.scope_key, 1)
    ON CONFLICT (scope_key) DO UPDATE SET leases = c.leases + 1;
    RETURN NEW;
END
$$;

REVOKE ALL ON FUNCTION fgentic_memory.count_lease()
    FROM PUBLIC, fgentic_memory_runtime, fgentic_memory_delegate;
