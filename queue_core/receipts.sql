-- Idempotency receipts: (tenant, operation) -> canonical payload, and the
-- effect it produced. Written in the same transaction as that effect.
CREATE TABLE IF NOT EXISTS receipts (
    tenant    TEXT NOT NULL CHECK (length(tenant) BETWEEN 1 AND 200),
    operation TEXT NOT NULL CHECK (length(operation) BETWEEN 1 AND 200),
    payload   TEXT NOT NULL CHECK (json_valid(payload)),
    effect    TEXT NOT NULL CHECK (length(effect) > 0),
    PRIMARY KEY (tenant, operation)
) STRICT;
