-- queue_core on SQLite, migration 8: counters of work done that survive restarts.
-- A queue's totals (processed, retried, dead, expired leases) are read from
-- its rows, which already hold them, plus queue_counters: what rows that left
-- no longer show. Triggers keep both inside the transaction of the change,
-- and fire only on the rare moves (a retry, a redrive, a delete): an ACK or a
-- claim writes nothing more, so no worker waits on a shared counter row.

-- Temporary failures of this message that scheduled another attempt (from
-- version 8 on: a message's retries before it are not known).
ALTER TABLE messages ADD COLUMN retries INTEGER NOT NULL DEFAULT 0
    CHECK (retries >= 0);

-- Per queue, what its rows no longer show: done and dead messages deleted,
-- deaths undone by a redrive, the retries and expired leases of deleted rows.
CREATE TABLE queue_counters (
    queue          TEXT    PRIMARY KEY REFERENCES queues (name),
    processed      INTEGER NOT NULL DEFAULT 0 CHECK (processed >= 0),
    retried        INTEGER NOT NULL DEFAULT 0 CHECK (retried >= 0),
    dead           INTEGER NOT NULL DEFAULT 0 CHECK (dead >= 0),
    expired_leases INTEGER NOT NULL DEFAULT 0 CHECK (expired_leases >= 0)
) STRICT;

-- A retry: leased to ready with its attempt spent (a release gives the
-- attempt back, attempts - 1, and is no retry).
CREATE TRIGGER messages_count_retry
AFTER UPDATE OF state ON messages
WHEN OLD.state = 'leased' AND NEW.state = 'ready' AND NEW.attempts = OLD.attempts
BEGIN
    UPDATE messages SET retries = retries + 1
    WHERE queue = NEW.queue AND event_id = NEW.event_id;
END;

-- A redrive: the death stays counted after the message leaves dead.
CREATE TRIGGER messages_count_redrive
AFTER UPDATE OF state ON messages
WHEN OLD.state = 'dead' AND NEW.state <> 'dead'
BEGIN
    INSERT INTO queue_counters (queue, dead) VALUES (OLD.queue, 1)
    ON CONFLICT (queue) DO UPDATE SET dead = dead + 1;
END;

-- A deleted message (purge): what it counted stays counted.
CREATE TRIGGER messages_count_delete
AFTER DELETE ON messages
BEGIN
    INSERT INTO queue_counters (queue, processed, retried, dead, expired_leases)
    VALUES (OLD.queue, OLD.state = 'done', OLD.retries, OLD.state = 'dead',
            OLD.expired_leases)
    ON CONFLICT (queue) DO UPDATE SET
        processed = processed + excluded.processed,
        retried = retried + excluded.retried,
        dead = dead + excluded.dead,
        expired_leases = expired_leases + excluded.expired_leases;
END;
