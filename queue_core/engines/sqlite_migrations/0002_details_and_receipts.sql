-- queue_core on SQLite, migration 2.

-- The human-readable reason beside last_error's code.
ALTER TABLE messages ADD COLUMN last_detail TEXT
    CHECK (last_detail IS NULL OR last_error IS NOT NULL);

-- Idempotency receipts: (tenant, operation) -> canonical payload, and the
-- effect it produced. Written in the same transaction as that effect.
-- (Version 1 created this table lazily, identically: IF NOT EXISTS keeps it.)
CREATE TABLE IF NOT EXISTS receipts (
    tenant    TEXT NOT NULL CHECK (length(tenant) BETWEEN 1 AND 200),
    operation TEXT NOT NULL CHECK (length(operation) BETWEEN 1 AND 200),
    payload   TEXT NOT NULL CHECK (json_valid(payload)),
    effect    TEXT NOT NULL CHECK (length(effect) > 0),
    PRIMARY KEY (tenant, operation)
) STRICT;
