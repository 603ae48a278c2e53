-- queue_core on PostgreSQL, migration 5: a random token with each lease.
-- The generation alone names a claim only while the database never forgets
-- one; after a failover to a standby that lagged (asynchronous replication)
-- the new primary hands the same generation out again. Every fenced
-- statement checks the token with the generation. 0: claimed before this
-- migration.

ALTER TABLE messages ADD COLUMN lease_token BIGINT NOT NULL DEFAULT 0
    CONSTRAINT messages_lease_token_nonnegative CHECK (lease_token >= 0);

-- Migration 2 labelled queue_core_json_type PARALLEL SAFE, but its EXCEPTION
-- block starts a subtransaction, which no parallel operation may: a query
-- that the planner ran in parallel over many rows (a re-check of the CHECKs
-- over 118,800 messages) failed with "cannot start subtransactions during a
-- parallel operation". Such a query now runs in one process.
ALTER FUNCTION queue_core_json_type(text) PARALLEL UNSAFE;
