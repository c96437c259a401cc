-- 0024: the read view's claim is one row to the planner (issue 40 §2: a scope's operations
-- must not grow with other people's data).
--
-- readable_memory (sql/0022) joins fgentic_memory.current_recall_claim() with the scope table
-- and the scope's rows. The claim functions return at most one row, but they are SECURITY
-- DEFINER with a SET clause, so PostgreSQL cannot inline them and plans them with the default
-- estimate of 1,000 rows; for 1,000 claims a hash join over a sequential scan of every scope
-- is cheaper than 1,000 index probes, so every read through the view (the memory API's search,
-- an adapted runtime's, !memory inspect) read the whole scope table: 1,970 shared buffers per
-- search beside 10,000 scopes, 1,171 beside 100 (benchmarks/bench_memory_size.py). Said to be
-- one row, the claim drives a nested loop: the scope's row by its key, its rows by
-- (scope_key, consent_generation); 1,440 buffers beside 10,000 scopes.
--
-- Only the estimate changes: the functions' bodies, privileges and results are as they were,
-- and every fence check still runs per statement. A later CREATE OR REPLACE of either function
-- must say ROWS 1 again (it resets the estimate to 1,000); tests/integration/
-- test_memory_at_size.py fails if the view's plan scans the scope table again.

ALTER FUNCTION fgentic_memory.current_claim() ROWS 1;
ALTER FUNCTION fgentic_memory.current_recall_claim() ROWS 1;
