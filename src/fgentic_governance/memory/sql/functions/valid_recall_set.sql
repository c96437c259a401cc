-- A scope's policy is validated before it is stored (a CHECK would report its violation
-- with the whole row, the subject included): each set NULL, or 1..N distinct known values.
CREATE OR REPLACE FUNCTION fgentic_memory.valid_recall_set(p_values text[], p_known text[])
RETURNS boolean
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT p_values IS NULL
        OR (cardinality(p_values) BETWEEN 1 AND cardinality(p_known)
            AND array_position(p_values, NULL) IS NULL
            AND p_values <@ p_known
            AND (SELECT count(DISTINCT v) FROM unnest(p_values) AS v) = cardinality(p_values))
$$;

REVOKE ALL ON FUNCTION fgentic_memory.valid_recall_set(text[],text[])
    FROM PUBLIC, fgentic_memory_runtime, fgentic_memory_delegate;
