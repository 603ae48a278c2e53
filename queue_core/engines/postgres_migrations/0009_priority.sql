-- queue_core on PostgreSQL, migration 9: a priority per message (SQLite's
-- migration 9). The claim takes the highest priority first among the
-- available messages, then the oldest available_at, then the event id. 0 is
-- every message from before, and the default; -100..100 leaves room above and
-- below it.

ALTER TABLE messages ADD COLUMN priority BIGINT NOT NULL DEFAULT 0
    CONSTRAINT messages_priority_range CHECK (priority BETWEEN -100 AND 100);

-- Claim reads only its own queue's ready and leased rows, in claim order
-- (the order of claim_messages' ORDER BY, so that no sort is needed).
DROP INDEX messages_claimable;
CREATE INDEX messages_claimable
    ON messages (queue, priority DESC, available_at, event_id)
    WHERE state IN ('ready', 'leased');
