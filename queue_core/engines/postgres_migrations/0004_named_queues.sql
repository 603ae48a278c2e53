-- queue_core on PostgreSQL, migration 4: named queues (SQLite's migration 4).
-- Every message belongs to one queue, and an event id is unique within its
-- queue. The queue 'default' holds every message from before, with the
-- teaching settings it always had. A table of yours that references
-- messages (event_id) must move to (queue, event_id) with it (see the engine).

CREATE TABLE queues (
    name              TEXT COLLATE "C" PRIMARY KEY
                      CONSTRAINT queues_name_format
                      CHECK (name ~ '^[a-z][a-z0-9_-]{0,62}$'),
    -- a Python regular expression matched in full; never matches ''
    id_pattern        TEXT    NOT NULL
                      CONSTRAINT queues_id_pattern_length
                      CHECK (length(id_pattern) BETWEEN 1 AND 1000),
    max_attempts      BIGINT  NOT NULL
                      CONSTRAINT queues_max_attempts_range
                      CHECK (max_attempts BETWEEN 1 AND 1000),
    lease_seconds     BIGINT  NOT NULL
                      CONSTRAINT queues_lease_seconds_range
                      CHECK (lease_seconds BETWEEN 1 AND 31536000),
    max_payload_bytes BIGINT  NOT NULL
                      CONSTRAINT queues_max_payload_bytes_range
                      CHECK (max_payload_bytes BETWEEN 1 AND 1000000)
);

INSERT INTO queues (name, id_pattern, max_attempts, lease_seconds, max_payload_bytes)
VALUES ('default', 'E[0-9]{4}', 3, 30, 10000);

ALTER TABLE messages ADD COLUMN queue TEXT COLLATE "C" NOT NULL DEFAULT 'default'
    CONSTRAINT messages_queue_fkey REFERENCES queues (name);

ALTER TABLE messages DROP CONSTRAINT messages_event_id_format;
ALTER TABLE messages ADD CONSTRAINT messages_event_id_length
    CHECK (length(event_id) BETWEEN 1 AND 200);
-- the default queue keeps the teaching rule, even against raw SQL
ALTER TABLE messages ADD CONSTRAINT messages_event_id_format
    CHECK (queue <> 'default' OR (length(event_id) = 5 AND event_id ~ '^E[0-9]{4}$'));

ALTER TABLE messages DROP CONSTRAINT messages_pkey;
ALTER TABLE messages ADD CONSTRAINT messages_pkey PRIMARY KEY (queue, event_id);

-- Claim reads only its own queue's ready and leased rows, in claim order.
DROP INDEX messages_claimable;
CREATE INDEX messages_claimable
    ON messages (queue, available_at, event_id)
    WHERE state IN ('ready', 'leased');
