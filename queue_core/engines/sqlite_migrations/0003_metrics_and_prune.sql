-- queue_core on SQLite, migration 3: times and counts for the metrics, and
-- the hash prune keeps. A row from before has NULL times (unknown, never
-- guessed) and no expired lease counted.

ALTER TABLE messages ADD COLUMN enqueued_at INTEGER
    CHECK (enqueued_at IS NULL OR enqueued_at >= 0);
ALTER TABLE messages ADD COLUMN done_at INTEGER
    CHECK (done_at IS NULL OR state = 'done');
-- Leases of this message that ran out and a later claim took over (or that
-- ended in dead).
ALTER TABLE messages ADD COLUMN expired_leases INTEGER NOT NULL DEFAULT 0
    CHECK (expired_leases >= 0);
-- Set by prune: the payload is gone ('{}'), its SHA-256 keeps deduplication exact.
ALTER TABLE messages ADD COLUMN payload_sha256 TEXT
    CHECK (payload_sha256 IS NULL
           OR (state = 'done' AND payload = '{}' AND length(payload_sha256) = 64));
