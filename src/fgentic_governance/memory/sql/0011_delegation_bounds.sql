-- 0011: per-delegation bounds (ADR 0023 §43, issue 26).
--
-- A delegation lease is one turn of one (subject, Agent): the bridge opens one before it hands a
-- turn to a memory-enabled Agent. kagent-adk 0.9.11 prefetches on a session's first turn with
-- one search per sentence of at least 30 characters, all in parallel and without a cap, and its
-- load_memory tool searches the same way; the two requests look alike. So the bound is on what
-- a lease admits: at most max_recalls_per_lease() = 8 searches are charged to one lease, which
-- makes eight the most a new session can issue, and an explicit load in the same turn takes one
-- of the eight. A search is charged to the oldest live lease of the scope with a recall left;
-- with none left it is refused (RECALL_LIMIT_REACHED), before any cost is admitted (the charge
-- and the admission are one transaction, so a refused search charges nothing). A scope may
-- lower the bound (its policy's prefetch.maxSubqueries, 0-8; 0 leaves kagent no recall at
-- all, since its prefetch and load_memory are the same request).
--
-- The runtime's automatic save is one summary of the session: at most ten facts (ADR 0023 §43),
-- or fewer by the scope's automaticSave.maxFacts (0-10). check_summary() refuses a larger one
-- (SUMMARY_TOO_LARGE) before its summarisation, saves and embeddings are admitted. And there is
-- at most one automatic save per five user turns (ADR 0023 §43), or per the scope's
-- automaticSave.minUserTurns (5-1000): the scope's leases are counted as they are opened, and a
-- summary is admitted only while the summaries so far stay within leases / minUserTurns
-- (SUMMARY_CADENCE_REACHED).
--
-- An embedding is charged to exactly one live delegation or refused: with several scopes of
-- the Agent leased at once (two users), admit_agent_embedding (sql/0009) let it through
-- uncharged; it is now SCOPE_AMBIGUOUS, as enter_delegation answers the same ambiguity.


-- 2. The scope's own bounds (the operator copies them from the MemoryScope's policy).
ALTER TABLE fgentic_memory.scope
    ADD COLUMN max_recalls integer NOT NULL DEFAULT 8 CHECK (max_recalls BETWEEN 0 AND 8),
    ADD COLUMN max_summary_facts integer NOT NULL DEFAULT 10
        CHECK (max_summary_facts BETWEEN 0 AND 10),
    ADD COLUMN min_user_turns integer NOT NULL DEFAULT 5
        CHECK (min_user_turns BETWEEN 5 AND 1000);

-- The cadence of automatic saves: leases opened (a replayed delegation opens none) and
-- summaries admitted, per scope, never reset. Owner only.
CREATE TABLE fgentic_memory.summary_cadence (
    scope_key text PRIMARY KEY REFERENCES fgentic_memory.scope (scope_key) ON DELETE CASCADE,
    leases bigint NOT NULL DEFAULT 0 CHECK (leases >= 0),
    summaries bigint NOT NULL DEFAULT 0 CHECK (summaries >= 0)
);
REVOKE ALL ON fgentic_memory.summary_cadence FROM PUBLIC;

-- The recalls a lease has admitted. Mirrored by
-- fgentic_governance.memory.model.MAX_RECALLS_PER_LEASE (a test holds them equal).
ALTER TABLE fgentic_memory.delegation_lease
    ADD COLUMN recalls integer NOT NULL DEFAULT 0 CHECK (recalls >= 0);

-- Since 0025 the functions, views and triggers of this step are each defined, as they are
-- now, in one file of sql/functions/, sql/views/ or sql/triggers/, with their grants.
