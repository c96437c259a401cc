-- 0022: a recall policy narrows, inside the fenced view, which rows may enter recall (issue 38
-- §7, the peer's "context recall policy").
--
-- Every row carries a content-free envelope (memory_type, source_kind, confirmation_status,
-- sensitivity, created_at), yet every active row of an enabled scope was recallable. A scope
-- may now name the types, sources, confirmation states and sensitivities that may enter
-- recall, and a maximum age. The predicate lives in readable_memory, the only read path for
-- content, so it binds every reader (the memory API's prefetch and load_memory, an adapted
-- runtime's plain SQL, the control API's inspect) and is re-evaluated per statement: a policy
-- narrowed mid-session withholds at the next read. Nothing is filtered after the read.
--
-- One function computes the policy that applies: effective_recall_policy(scope_key). Here it
-- is the scope's own; posture floors (0023) replace it with the meet of the scope's and the
-- floors' (recall_policy_meet: the most restrictive wins, a lower level never loosens).
-- recall_withheld(scope_key) counts, by bounded code, what the policy withholds: counts only.

-- 1. The policy. A NULL field does not narrow its dimension; an empty array admits nothing
-- (a meet of two disjoint sets); max_age_seconds withholds rows created longer ago.
CREATE TYPE fgentic_memory.recall_policy AS (
    memory_types text[],
    source_kinds text[],
    confirmation_statuses text[],
    sensitivities text[],
    max_age_seconds integer
);

ALTER TABLE fgentic_memory.scope
    ADD COLUMN recall_memory_types text[],
    ADD COLUMN recall_source_kinds text[],
    ADD COLUMN recall_confirmation_statuses text[],
    ADD COLUMN recall_sensitivities text[],
    ADD COLUMN recall_max_age_seconds integer;

-- 2. A scope's policy is validated before it is stored (a CHECK would report its violation
-- with the whole row, the subject included): each set NULL, or 1..N distinct known values.
CREATE FUNCTION fgentic_memory.valid_recall_set(p_values text[], p_known text[])
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

CREATE FUNCTION fgentic_memory.scope_recall_guard() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF NOT (fgentic_memory.valid_recall_set(NEW.recall_memory_types,
                ARRAY['preference', 'fact', 'decision', 'instruction', 'relationship',
                      'task_state', 'working_note'])
            AND fgentic_memory.valid_recall_set(NEW.recall_source_kinds,
                ARRAY['user_message', 'assistant_response', 'automatic_summary',
                      'save_memory_tool', 'unknown'])
            AND fgentic_memory.valid_recall_set(NEW.recall_confirmation_statuses,
                ARRAY['user_confirmed', 'model_inferred', 'unknown'])
            AND fgentic_memory.valid_recall_set(NEW.recall_sensitivities,
                ARRAY['normal', 'personal', 'sensitive'])
            AND (NEW.recall_max_age_seconds IS NULL
                 OR NEW.recall_max_age_seconds BETWEEN 1 AND 7 * 86400))
    THEN
        PERFORM fgentic_memory.refuse('INVALID_SPEC');
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER scope_recall_guard BEFORE INSERT OR UPDATE ON fgentic_memory.scope
    FOR EACH ROW EXECUTE FUNCTION fgentic_memory.scope_recall_guard();

-- 3. The most restrictive of two policies: the intersection of each set (NULL: unrestricted),
-- the shorter age. Commutative and associative, so folding floors in any order gives the same
-- policy, and a fold can only narrow.
CREATE FUNCTION fgentic_memory.recall_set_meet(a text[], b text[]) RETURNS text[]
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

CREATE FUNCTION fgentic_memory.recall_policy_meet(
    a fgentic_memory.recall_policy, b fgentic_memory.recall_policy)
RETURNS fgentic_memory.recall_policy
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT ROW(fgentic_memory.recall_set_meet((a).memory_types, (b).memory_types),
               fgentic_memory.recall_set_meet((a).source_kinds, (b).source_kinds),
               fgentic_memory.recall_set_meet((a).confirmation_statuses,
                                              (b).confirmation_statuses),
               fgentic_memory.recall_set_meet((a).sensitivities, (b).sensitivities),
               least((a).max_age_seconds, (b).max_age_seconds)
           )::fgentic_memory.recall_policy
$$;

-- 4. The scope's own policy, and the one that applies. effective_recall_policy is the single
-- place the applying policy is computed (the view and the counts both call it); 0023 replaces
-- its body, keeping the signature, to meet the scope's with the floors'. A scope that does
-- not exist has no rows to read, so its policy is immaterial (all NULL).
-- SQL-standard bodies: parsed when created (their names and operators do not depend on a
-- caller's search_path), and inlined into the statement that calls them. Both are called as
-- the owner (by current_recall_claim() and recall_withheld()); neither is granted.
CREATE FUNCTION fgentic_memory.scope_recall_policy(p_scope_key text)
RETURNS fgentic_memory.recall_policy
LANGUAGE sql STABLE
RETURN (SELECT ROW(s.recall_memory_types, s.recall_source_kinds,
                   s.recall_confirmation_statuses, s.recall_sensitivities,
                   s.recall_max_age_seconds)::fgentic_memory.recall_policy
          FROM fgentic_memory.scope s WHERE s.scope_key = p_scope_key);

CREATE FUNCTION fgentic_memory.effective_recall_policy(p_scope_key text)
RETURNS fgentic_memory.recall_policy
LANGUAGE sql STABLE
RETURN fgentic_memory.scope_recall_policy(p_scope_key);

-- The transaction's verified claim (sql/0007) with its scope's effective policy, in one row;
-- no row without a claim, so a reader that entered nothing reads nothing. The view reads this
-- instead of current_claim(): one claim check per statement, not two. The runtime learns
-- only its own scope's policy.
CREATE FUNCTION fgentic_memory.current_recall_claim()
RETURNS TABLE (scope_key text, generation bigint, mode text, memory_types text[],
               source_kinds text[], confirmation_statuses text[], sensitivities text[],
               max_age_seconds integer)
LANGUAGE sql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT c.scope_key, c.generation, c.mode, (x.p).memory_types, (x.p).source_kinds,
           (x.p).confirmation_statuses, (x.p).sensitivities, (x.p).max_age_seconds
      FROM fgentic_memory.current_claim() c
     CROSS JOIN LATERAL (SELECT fgentic_memory.effective_recall_policy(c.scope_key) AS p) x
$$;

-- 5. Why a row may not enter recall under policy p: NULL when it may, else the first failing
-- dimension's bounded code, in a fixed order (so every withheld row is counted once). A value
-- the set does not hold, or cannot be compared, is withheld (IS NOT TRUE: fail closed). An
-- SQL-standard body is parsed when it is created, so its operators do not depend on the
-- reader's search_path, and it is inlined into the view.
CREATE FUNCTION fgentic_memory.recall_withheld_reason(
    p fgentic_memory.recall_policy, p_memory_type text, p_source_kind text,
    p_confirmation_status text, p_sensitivity text, p_created_at timestamptz)
RETURNS text
LANGUAGE sql STABLE
RETURN CASE
    WHEN (p).memory_types IS NOT NULL
         AND (p_memory_type = ANY ((p).memory_types)) IS NOT TRUE
        THEN 'RECALL_TYPE_WITHHELD'
    WHEN (p).source_kinds IS NOT NULL
         AND (p_source_kind = ANY ((p).source_kinds)) IS NOT TRUE
        THEN 'RECALL_SOURCE_WITHHELD'
    WHEN (p).confirmation_statuses IS NOT NULL
         AND (p_confirmation_status = ANY ((p).confirmation_statuses)) IS NOT TRUE
        THEN 'RECALL_CONFIRMATION_WITHHELD'
    WHEN (p).sensitivities IS NOT NULL
         AND (p_sensitivity = ANY ((p).sensitivities)) IS NOT TRUE
        THEN 'RECALL_SENSITIVITY_WITHHELD'
    WHEN (p).max_age_seconds IS NOT NULL
         AND (p_created_at > statement_timestamp()
                             - make_interval(secs => (p).max_age_seconds)) IS NOT TRUE
        THEN 'RECALL_AGE_WITHHELD'
END;

-- 6. The read view: as in 0007, plus the policy of the claim's scope. Same columns.
CREATE OR REPLACE VIEW fgentic_memory.readable_memory WITH (security_barrier = true) AS
SELECT m.id,
       m.scope_key,
       m.agent_name,
       m.user_id,
       m.content,
       m.embedding,
       m.metadata,
       m.created_at,
       m.expires_at,
       m.consent_generation,
       m.memory_type,
       m.source_kind,
       m.write_reason,
       m.confirmation_status,
       m.sensitivity
  FROM fgentic_memory.current_recall_claim() c
  JOIN fgentic_memory.memory m
    ON m.scope_key = c.scope_key AND m.consent_generation = c.generation
  JOIN fgentic_memory.scope s ON s.scope_key = m.scope_key
 WHERE m.expires_at > statement_timestamp()
   AND m.lifecycle = 'active'
   AND s.enabled
   AND s.posture IN ('enabled', 'capture_disabled')
   AND m.consent_generation = s.consent_generation
   AND NOT EXISTS (SELECT 1 FROM fgentic_memory.scope_hold h WHERE h.scope_key = m.scope_key)
   AND fgentic_memory.recall_withheld_reason(
           ROW(c.memory_types, c.source_kinds, c.confirmation_statuses, c.sensitivities,
               c.max_age_seconds)::fgentic_memory.recall_policy,
           m.memory_type, m.source_kind, m.confirmation_status, m.sensitivity, m.created_at)
       IS NULL;

-- 7. What the policy withholds now, by code: the scope's rows the view would otherwise show
-- (unexpired, active, current generation, the scope enabled for recall and not held). Counts
-- and bounded codes only; the operator's (status), never the runtime's.
CREATE FUNCTION fgentic_memory.recall_withheld(p_scope_key text)
RETURNS TABLE (reason text, n bigint)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT w.reason, count(*)
      FROM fgentic_memory.scope s
     CROSS JOIN fgentic_memory.effective_recall_policy(s.scope_key) p
      JOIN fgentic_memory.memory m
        ON m.scope_key = s.scope_key AND m.consent_generation = s.consent_generation
     CROSS JOIN LATERAL (SELECT fgentic_memory.recall_withheld_reason(
               p, m.memory_type, m.source_kind, m.confirmation_status, m.sensitivity,
               m.created_at) AS reason) w
     WHERE s.scope_key = p_scope_key
       AND s.enabled
       AND s.posture IN ('enabled', 'capture_disabled')
       AND m.expires_at > statement_timestamp()
       AND m.lifecycle = 'active'
       AND NOT EXISTS (SELECT 1 FROM fgentic_memory.scope_hold h
                        WHERE h.scope_key = s.scope_key)
       AND w.reason IS NOT NULL
     GROUP BY w.reason
     ORDER BY w.reason
$$;

-- 8. Privileges. The view calls current_recall_claim() and recall_withheld_reason() with
-- the reader's privileges (as it does current_claim()); everything else is the owner's.
REVOKE EXECUTE ON FUNCTION
    fgentic_memory.valid_recall_set(text[], text[]),
    fgentic_memory.scope_recall_guard(),
    fgentic_memory.recall_set_meet(text[], text[]),
    fgentic_memory.recall_policy_meet(fgentic_memory.recall_policy,
                                      fgentic_memory.recall_policy),
    fgentic_memory.scope_recall_policy(text),
    fgentic_memory.effective_recall_policy(text),
    fgentic_memory.current_recall_claim(),
    fgentic_memory.recall_withheld_reason(fgentic_memory.recall_policy, text, text, text, text,
                                          timestamptz),
    fgentic_memory.recall_withheld(text)
    FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
    fgentic_memory.current_recall_claim(),
    fgentic_memory.recall_withheld_reason(fgentic_memory.recall_policy, text, text, text, text,
                                          timestamptz)
    TO fgentic_memory_runtime;
