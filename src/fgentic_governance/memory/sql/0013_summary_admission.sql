-- 0013: a summary is admitted before the model summarises (ADR 0023 §42-43, issue 26).
--
-- kagent-adk 0.9.11 summarises a session on the Agent's own model before it calls the memory
-- API, and that request names no user (it carries the provider's key). When the Agent's model
-- route is the memory API's (its /v1/chat/completions), the memory API recognises the
-- summarisation request and admits it here first, like an embedding (sql/0009, sql/0011):
-- charged to the one leased scope of the Agent (LEASE_MISSING with none, SCOPE_AMBIGUOUS with
-- several), its input at most 16 KiB (SUMMARY_INPUT_TOO_LARGE), its turn in the cadence
-- reserved (at most one automatic save per min_user_turns leases: SUMMARY_CADENCE_REACHED),
-- and one summarisation consumed from the hourly ceiling. The automatic save that follows
-- takes the reservation instead of being charged a second summarisation; one that comes
-- without a reservation (a summary made elsewhere, or kagent's fallback to the raw text after
-- a refused summary) is checked and charged as before.


-- 2. Summaries admitted at the model route whose automatic save has not arrived yet. A
-- reservation counts in the cadence like a summary (the model work was done).
ALTER TABLE fgentic_memory.summary_cadence
    ADD COLUMN reserved bigint NOT NULL DEFAULT 0 CHECK (reserved >= 0);

-- Since 0025 the functions, views and triggers of this step are each defined, as they are
-- now, in one file of sql/functions/, sql/views/ or sql/triggers/, with their grants.
