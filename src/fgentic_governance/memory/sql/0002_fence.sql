-- fgentic_memory 0002: the write fence, enforced by triggers so that every writer (the
-- governed Python store, an adapted kagent issuing plain SQL, a psql session) passes the same
-- gate. A writer that does not name a scope and its consent generation is refused.

-- Since 0025 the functions, views and triggers of this step are each defined, as they are
-- now, in one file of sql/functions/, sql/views/ or sql/triggers/, with their grants.
