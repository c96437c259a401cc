-- 0019: whose turn an Agent serves, shared by every memory API replica.
--
-- kagent's embeddings and summarisation requests name no user: the memory API attributes
-- each to the one user the Agent's Pods named within its activity window
-- (memoryapi/activity.py). Each replica knew only the calls it served, so a Pod that moved
-- to another replica (its replica restarted, or the Service rebalanced) was LEASE_MISSING
-- until its next session call, and two Pods of one Agent served by two replicas saw one user
-- each where together they saw two. Now every replica notes the (Agent, user) pairs it sees
-- here (at most once per pair per tenth of the window) and the attribution counts the users
-- every replica saw, plus the calling replica's own exact view.
--
-- A replica notes a pair at its first call and then at most every p_slack seconds, so a
-- stored time can be up to p_slack older than that user's last call. Rows are therefore
-- counted for the window plus that slack: a user whose last call is inside the window is
-- always counted (more refusals for at most the slack, never a missed user).

CREATE TABLE fgentic_memory.agent_activity (
    agent_namespace text NOT NULL,
    agent_name text NOT NULL,
    user_id text NOT NULL CHECK (octet_length(user_id) BETWEEN 1 AND 255),
    seen_at timestamptz NOT NULL,
    PRIMARY KEY (agent_namespace, agent_name, user_id)
);
REVOKE ALL ON fgentic_memory.agent_activity FROM PUBLIC;

-- At most this many users per call (a request names at most a few; memoryapi.activity
-- records at most 16 per Agent).
CREATE FUNCTION fgentic_memory.max_noted_users() RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT 16 $$;

CREATE FUNCTION fgentic_memory.note_activity(
    p_agent_namespace text, p_agent_name text, p_users text[])
RETURNS void
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_agent_namespace IS NULL OR p_agent_name IS NULL OR p_users IS NULL
       OR cardinality(p_users) NOT BETWEEN 1 AND fgentic_memory.max_noted_users()
       OR array_position(p_users, NULL) IS NOT NULL
       OR EXISTS (SELECT 1 FROM unnest(p_users) u WHERE octet_length(u) NOT BETWEEN 1 AND 255)
    THEN
        PERFORM fgentic_memory.refuse('INVALID_SPEC');
    END IF;
    -- Sorted, so two replicas noting the same users take the row locks in one order.
    INSERT INTO fgentic_memory.agent_activity AS a
           (agent_namespace, agent_name, user_id, seen_at)
    SELECT p_agent_namespace, p_agent_name, u, statement_timestamp()
      FROM (SELECT DISTINCT u FROM unnest(p_users) u ORDER BY u) d
    ON CONFLICT (agent_namespace, agent_name, user_id)
    DO UPDATE SET seen_at = greatest(a.seen_at, excluded.seen_at);
END
$$;

-- The one user an Agent served within p_window seconds (plus the notes' p_slack), counting
-- p_local (the calling replica's own users within the window) and every replica's notes:
-- LEASE_MISSING with none, SCOPE_AMBIGUOUS with several. Refused, never guessed.
CREATE FUNCTION fgentic_memory.recent_user(
    p_agent_namespace text, p_agent_name text, p_local text[],
    p_window double precision, p_slack double precision)
RETURNS text
LANGUAGE plpgsql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_users text[];
BEGIN
    IF p_local IS NULL OR cardinality(p_local) > fgentic_memory.max_noted_users()
       OR p_window IS NULL OR p_slack IS NULL
       OR NOT (p_window > 0 AND p_window <= 3600 AND p_slack >= 0 AND p_slack <= p_window)
    THEN
        PERFORM fgentic_memory.refuse('INVALID_SPEC');
    END IF;
    SELECT array_agg(u) INTO v_users FROM (
        SELECT u FROM unnest(p_local) u WHERE u <> ''
        UNION
        SELECT a.user_id FROM fgentic_memory.agent_activity a
         WHERE a.agent_namespace = p_agent_namespace AND a.agent_name = p_agent_name
           AND a.seen_at > statement_timestamp() - make_interval(secs => p_window + p_slack)
        LIMIT 2) recent;
    IF v_users IS NULL THEN
        PERFORM fgentic_memory.refuse('LEASE_MISSING');
    ELSIF cardinality(v_users) > 1 THEN
        PERFORM fgentic_memory.refuse('SCOPE_AMBIGUOUS');
    END IF;
    RETURN v_users[1];
END
$$;

-- Notes older than the longest window serve nothing (the operator's periodic cleanup). Like
-- prune_leases(), the runtime role may run it too: it deletes only notes no window counts.
CREATE FUNCTION fgentic_memory.prune_activity() RETURNS bigint
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    n bigint;
BEGIN
    DELETE FROM fgentic_memory.agent_activity
     WHERE seen_at <= statement_timestamp() - interval '2 hours';
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$$;

REVOKE EXECUTE ON FUNCTION fgentic_memory.max_noted_users(),
    fgentic_memory.note_activity(text, text, text[]),
    fgentic_memory.recent_user(text, text, text[], double precision, double precision),
    fgentic_memory.prune_activity()
    FROM PUBLIC;
GRANT EXECUTE ON FUNCTION fgentic_memory.note_activity(text, text, text[]),
    fgentic_memory.recent_user(text, text, text[], double precision, double precision)
    TO fgentic_memory_delegate;
GRANT EXECUTE ON FUNCTION fgentic_memory.prune_activity() TO fgentic_memory_runtime;
