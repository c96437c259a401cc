-- requires: functions/contexts_in_progress, functions/live_leases, functions/refuse
-- Bind a memory call of (subject, Agent) to its lease's context, in the admission's
-- transaction: CONTEXT_CONFLICT unless the contexts in progress are exactly the one context
-- every live lease of the pair names. Returns whether that context has an outstanding
-- load_memory call (a search is then the tool's, §42's explicit bucket; otherwise prefetch's).
-- Every lease names its context (open_lease refuses one without); a live lease naming none (a
-- row older than this migration, or written around open_lease) binds nothing: refused.
CREATE OR REPLACE FUNCTION fgentic_memory.bind_context(
    p_subject text, p_agent_namespace text, p_agent_name text)
RETURNS boolean
LANGUAGE plpgsql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_leased text[];
    v_active fgentic_memory.agent_context[];
BEGIN
    SELECT array_agg(DISTINCT coalesce(l.context_id, '')) INTO v_leased
      FROM fgentic_memory.live_leases(p_agent_namespace, p_agent_name) l
     WHERE l.subject_mxid = p_subject;
    IF v_leased IS NULL THEN
        RETURN false;  -- no live lease: enter_delegation has refused the call already
    END IF;
    SELECT array_agg(a) INTO v_active
      FROM fgentic_memory.contexts_in_progress(p_agent_namespace, p_agent_name, p_subject) a;
    IF cardinality(v_leased) <> 1 OR v_leased[1] = '' OR v_active IS NULL
       OR cardinality(v_active) <> 1
       OR v_active[1].context_id <> v_leased[1]
    THEN
        PERFORM fgentic_memory.refuse('CONTEXT_CONFLICT');
    END IF;
    RETURN cardinality(v_active[1].tool_calls) > 0;
END
$$;

REVOKE ALL ON FUNCTION fgentic_memory.bind_context(text,text,text)
    FROM PUBLIC, fgentic_memory_runtime, fgentic_memory_delegate;
GRANT EXECUTE ON FUNCTION fgentic_memory.bind_context(text,text,text) TO fgentic_memory_delegate;
