-- The write policy's high-confidence subset, so that a plain-SQL writer (an adapted kagent's
-- background save) cannot store what the Python write policy refuses. Fixed-shape secrets and
-- blatant instruction overrides only: the full, prose-aware policy runs in Python
-- (write_policy.py) before the store inserts. Input is NFKC-folded and stripped of invisible
-- characters first, like the Python side.
CREATE OR REPLACE FUNCTION fgentic_memory.policy_text(p_text text) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT translate(
        CASE WHEN current_setting('server_encoding') = 'UTF8'
             THEN normalize(p_text, NFKC) ELSE p_text END,
        U&'\00AD\200B\200C\200D\200E\200F\2060\FEFF', '')
$$;

REVOKE ALL ON FUNCTION fgentic_memory.policy_text(text)
    FROM PUBLIC, fgentic_memory_runtime, fgentic_memory_delegate;
