-- queue_core on PostgreSQL, migration 3: times and counts for the metrics
-- (NULL: a row from before), and the hash prune keeps.

ALTER TABLE messages ADD COLUMN enqueued_at BIGINT
    CONSTRAINT messages_enqueued_at_nonnegative
    CHECK (enqueued_at IS NULL OR enqueued_at >= 0);
ALTER TABLE messages ADD COLUMN done_at BIGINT
    CONSTRAINT messages_done_at_when_done CHECK (done_at IS NULL OR state = 'done');
ALTER TABLE messages ADD COLUMN expired_leases BIGINT NOT NULL DEFAULT 0
    CONSTRAINT messages_expired_leases_nonnegative CHECK (expired_leases >= 0);
ALTER TABLE messages ADD COLUMN payload_sha256 TEXT
    CONSTRAINT messages_pruned_payload CHECK (payload_sha256 IS NULL
        OR (state = 'done' AND payload = '{}' AND length(payload_sha256) = 64));
