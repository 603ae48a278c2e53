-- queue_core on SQLite, migration 5: a random token with each lease.
-- The generation alone names a claim only while the database never forgets
-- one; a store that lost a claim (a restored backup, a failover to a copy
-- that lagged) hands the same generation out again. Every fenced statement
-- checks the token with the generation. 0: claimed before this migration.

ALTER TABLE messages ADD COLUMN lease_token INTEGER NOT NULL DEFAULT 0
    CHECK (lease_token >= 0);
