-- queue_core on PostgreSQL, migration 8: counters of work done that survive
-- restarts (SQLite's migration 8). A queue's totals (processed, retried,
-- dead, expired leases) are read from its rows, which already hold them, plus
-- queue_counters: what rows that left no longer show. Triggers keep both
-- inside the transaction of the change, and fire only on the rare moves (a
-- retry, a redrive, a delete): an ACK or a claim writes nothing more, so no
-- worker waits on a shared counter row.

-- Temporary failures of this message that scheduled another attempt (from
-- version 8 on: a message's retries before it are not known).
ALTER TABLE messages ADD COLUMN retries BIGINT NOT NULL DEFAULT 0
    CONSTRAINT messages_retries_nonnegative CHECK (retries >= 0);

-- Per queue, what its rows no longer show: done and dead messages deleted,
-- deaths undone by a redrive, the retries and expired leases of deleted rows.
CREATE TABLE queue_counters (
    queue          TEXT COLLATE "C" PRIMARY KEY REFERENCES queues (name),
    processed      BIGINT NOT NULL DEFAULT 0
                   CONSTRAINT queue_counters_processed CHECK (processed >= 0),
    retried        BIGINT NOT NULL DEFAULT 0
                   CONSTRAINT queue_counters_retried CHECK (retried >= 0),
    dead           BIGINT NOT NULL DEFAULT 0
                   CONSTRAINT queue_counters_dead CHECK (dead >= 0),
    expired_leases BIGINT NOT NULL DEFAULT 0
                   CONSTRAINT queue_counters_expired_leases CHECK (expired_leases >= 0)
);

-- A retry: leased to ready with its attempt spent (a release gives the
-- attempt back, attempts - 1, and is no retry). Counted in the row itself.
CREATE FUNCTION queue_core_count_retry() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.retries := NEW.retries + 1;
    RETURN NEW;
END;
$$;

CREATE TRIGGER messages_count_retry
BEFORE UPDATE OF state ON messages
FOR EACH ROW
WHEN (OLD.state = 'leased' AND NEW.state = 'ready' AND NEW.attempts = OLD.attempts)
EXECUTE FUNCTION queue_core_count_retry();

-- A redrive: the death stays counted after the message leaves dead.
CREATE FUNCTION queue_core_count_redrive() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO queue_counters (queue, dead) VALUES (OLD.queue, 1)
    ON CONFLICT (queue) DO UPDATE SET dead = queue_counters.dead + 1;
    RETURN NULL;
END;
$$;

CREATE TRIGGER messages_count_redrive
AFTER UPDATE OF state ON messages
FOR EACH ROW
WHEN (OLD.state = 'dead' AND NEW.state <> 'dead')
EXECUTE FUNCTION queue_core_count_redrive();

-- Deleted messages (purge): what they counted stays counted, one statement's
-- rows at once.
CREATE FUNCTION queue_core_count_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO queue_counters AS kept (queue, processed, retried, dead, expired_leases)
    SELECT queue, count(*) FILTER (WHERE state = 'done'), coalesce(sum(retries), 0),
           count(*) FILTER (WHERE state = 'dead'), coalesce(sum(expired_leases), 0)
    FROM gone GROUP BY queue
    ON CONFLICT (queue) DO UPDATE SET
        processed = kept.processed + EXCLUDED.processed,
        retried = kept.retried + EXCLUDED.retried,
        dead = kept.dead + EXCLUDED.dead,
        expired_leases = kept.expired_leases + EXCLUDED.expired_leases;
    RETURN NULL;
END;
$$;

CREATE TRIGGER messages_count_delete
AFTER DELETE ON messages
REFERENCING OLD TABLE AS gone
FOR EACH STATEMENT
EXECUTE FUNCTION queue_core_count_delete();
