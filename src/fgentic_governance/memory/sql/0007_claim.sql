-- fgentic_memory 0007: an unforgeable scope claim (issue 17 §4).
--
-- Why: enter_scope recorded its claim in two custom settings (fgentic_memory.scope_key and
-- fgentic_memory.generation), and the view and admit() trusted them. Any role can set a custom
-- setting with set_config(), and generations are small integers, so the runtime role could
-- read another subject's facts, spend another scope's budget, and (the write gate read no
-- claim at all) write into any enabled scope without entering it.
--
-- Now enter_scope, a SECURITY DEFINER function, is the only way to obtain a claim. After its
-- checks it stores a claim token in the transaction-local setting fgentic_memory.claim:
--     <mode>|<generation>|<scope_key>|<mac>
-- where <mac> is a keyed SHA-256 over the claim and the transaction's id (xid8, unique for the
-- life of the cluster), with a per-database secret in claim_key that only the schema owner can
-- read. current_claim() recomputes the MAC: a token set by hand, altered, or copied from an
-- earlier transaction verifies as nothing. The view, the write gates and admit() read only
-- current_claim(); the old settings are still set, for anything that displays them, but
-- nothing trusts them.
--
-- A setting, not a table: MemoryStore reads in READ ONLY transactions, where no role may write
-- a table (a temporary table could be pre-created and forged by the runtime itself), but a
-- transaction id can be assigned and a setting set. The token dies with the transaction
-- (set_config(..., true)), and a later transaction of the same backend has another id.

-- 1. The secret: 48 bytes from three random UUIDs (366 random bits; gen_random_uuid() uses the
-- server's strong random source). Never granted to the runtime role.
CREATE TABLE fgentic_memory.claim_key (
    singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    secret bytea NOT NULL CHECK (octet_length(secret) >= 32)
);
INSERT INTO fgentic_memory.claim_key (secret)
SELECT uuid_send(gen_random_uuid()) || uuid_send(gen_random_uuid())
       || uuid_send(gen_random_uuid());

-- 8. Privileges. The secret and the signer are the owner's alone; the runtime may verify its
-- own claim (the view calls current_claim() with the reader's privileges) and enter a scope.
REVOKE ALL ON fgentic_memory.claim_key FROM PUBLIC;

-- Since 0025 the functions, views and triggers of this step are each defined, as they are
-- now, in one file of sql/functions/, sql/views/ or sql/triggers/, with their grants.
