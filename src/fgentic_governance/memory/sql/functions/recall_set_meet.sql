-- The most restrictive of two policies: the intersection of each set (NULL: unrestricted),
-- the shorter age. Commutative and associative, so folding floors in any order gives the same
-- policy, and a fold can only narrow.
CREATE OR REPLACE FUNCTION fgentic_memory.recall_set_meet(a text[], b text[]) RETURNS text[]
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT CASE
        WHEN a IS NULL THEN b
        WHEN b IS NULL THEN a
        ELSE ARRAY(SELECT x FROM unnest(a) AS x INTERSECT SELECT y FROM unnest(b) AS y
                   ORDER BY 1)
    END
$$;

REVOKE ALL ON FUNCTION fgentic_memory.recall_set_meet(text[],text[])
    FROM PUBLIC, fgentic_memory_runtime, fgentic_memory_delegate;
