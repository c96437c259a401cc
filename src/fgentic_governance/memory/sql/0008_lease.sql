-- fgentic_memory 0008: delegation leases (issue 17 §2, ADR 0023 §6, §19-§20).
--
-- Why: kagent's runtime sends (Agent, X-User-Id) with every memory call and nothing else - no
-- room, no consent generation. The bridge knows the room: before it dispatches a turn to a
-- memory-enabled Agent it asks the control API (which checks the control-room state exactly as
-- for !memory commands) to open a lease for one scope at its current generation. The memory API
-- may then enter a scope only through enter_delegation(), which finds the one scope of
-- (subject, Agent) with a live lease and signs the claim of 0007 for it. Without a lease the
-- runtime's calls read nothing and write nothing.
--
-- A lease is live while it is not closed, has not reached its expiry (at most 540 s after it
-- was opened, the delegation ceiling), and its generation is still the scope's current one of
-- an enabled, unheld scope. Withdrawal, `off`, `forget all` and offboarding all advance the
-- generation (0002), so every lease of the scope ends in the same transaction as the fence;
-- nothing has to find and close them.


-- 2. The leases. Rows are small and content-free; closed and expired ones are pruned by
-- cleanup_expired() below.
CREATE TABLE fgentic_memory.delegation_lease (
    lease_id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    scope_key text NOT NULL REFERENCES fgentic_memory.scope (scope_key) ON DELETE CASCADE,
    consent_generation bigint NOT NULL,
    opened_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL,
    closed_at timestamptz,
    CHECK (expires_at > opened_at AND expires_at <= opened_at + interval '540 seconds')
);
CREATE INDEX delegation_lease_open ON fgentic_memory.delegation_lease (scope_key)
    WHERE closed_at IS NULL;

-- 5. Enter the one leased scope of (subject, Agent): the memory API's only way in. The lease
-- must be live at this statement's time; exactly one scope may qualify (two rooms leased at
-- once for the same pair would make the runtime's call ambiguous: refused, never guessed).
-- Then enter_scope's own checks run and sign the claim. Returns what an insert needs.
CREATE TYPE fgentic_memory.delegation_context AS (
    scope_key text, consent_generation bigint, store_agent_name text, max_expiry timestamptz,
    lease_expires_at timestamptz);

-- 7. Privileges: the runtime may only enter a leased scope (and still enter_scope, for adapted
-- runtimes that carry the full claim themselves; see docs/memory.md §6a) and prune dead leases
-- beside expired rows (as it may run cleanup_expired). Opening and closing are the owner's.
REVOKE ALL ON fgentic_memory.delegation_lease FROM PUBLIC;

-- Since 0025 the functions, views and triggers of this step are each defined, as they are
-- now, in one file of sql/functions/, sql/views/ or sql/triggers/, with their grants.
