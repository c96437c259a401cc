-- 0025: functions, views and triggers each have one source file, re-applied at every version
-- step (sql/functions/, sql/views/, sql/triggers/; docs/memory.md §4).
--
-- Until 0024 a numbered file restated a function's whole body whenever one line of it
-- changed, so the fence in force was whichever file restated it last. From here the numbered
-- files hold only what cannot be re-applied (tables, types, indexes, roles, grants on tables,
-- settings and data changes); the restatements they held were moved, as they stood after
-- 0024, into the one file of each object, and the migrator records here what it applied: the
-- SHA-256 of every such file. A database at this code's version whose record differs (a file
-- edited without a version step, or a build that is not this one) is refused with
-- STORE_SCHEMA_MISMATCH, as an edited numbered file is.
--
-- This step changes no object; it only makes the migrator re-apply every file once, which on a
-- database migrated file by file to 0024 gives back exactly what it had (a test compares the
-- catalogs of such a database and of a fresh one).

CREATE TABLE fgentic_memory.schema_repeatable (
    name text PRIMARY KEY,
    sha256 text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);

REVOKE ALL ON fgentic_memory.schema_repeatable FROM PUBLIC;
