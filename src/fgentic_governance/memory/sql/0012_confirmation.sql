-- 0012: pending confirmations of the control API in the store (issue 26).
--
-- `!memory forget all` and `!memory off` take two calls: the first issues a single-use token,
-- the second presents it. Kept in one process's memory, the two calls had to reach the same
-- replica, so the control API ran as one. Here any replica can issue and any can redeem: only
-- the token's SHA-256 is stored, with everything it is bound to and its expiry (the issuing
-- replica's wall clock, epoch seconds). Owner only: the control API uses the operator's role;
-- no runtime or delegating role can read or write a row.

CREATE TABLE fgentic_memory.confirmation (
    digest bytea PRIMARY KEY CHECK (octet_length(digest) = 32),
    scope_key text NOT NULL REFERENCES fgentic_memory.scope (scope_key) ON DELETE CASCADE,
    action text NOT NULL CHECK (action IN ('forget_all', 'off')),
    subject text NOT NULL,
    agent text NOT NULL,
    room text NOT NULL,
    consent_generation bigint NOT NULL,
    expires_at double precision NOT NULL
);
CREATE INDEX confirmation_binding ON fgentic_memory.confirmation
    (scope_key, action, subject, agent, room, consent_generation);

REVOKE ALL ON fgentic_memory.confirmation FROM PUBLIC;
