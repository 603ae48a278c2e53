-- queue_core on SQLite, migration 4: named queues. Every message belongs to
-- one queue, and an event id is unique within its queue (a key of two
-- columns). The queue 'default' holds every message from before, with the
-- teaching settings it always had. The engine runs this with foreign keys
-- off, as SQLite's own procedure for a changed table asks, and checks them
-- all before COMMIT; a table of yours that references messages (event_id)
-- must move to (queue, event_id) with it (see the engine).

-- One row per queue: its own rules, read by the store when it opens the queue.
CREATE TABLE queues (
    name              TEXT    PRIMARY KEY
                      CHECK (length(name) BETWEEN 1 AND 63 AND name GLOB '[a-z]*'
                             AND name NOT GLOB '*[^a-z0-9_-]*'),
    -- a Python regular expression matched in full; never matches ''
    id_pattern        TEXT    NOT NULL CHECK (length(id_pattern) BETWEEN 1 AND 1000),
    max_attempts      INTEGER NOT NULL CHECK (max_attempts BETWEEN 1 AND 1000),
    lease_seconds     INTEGER NOT NULL CHECK (lease_seconds BETWEEN 1 AND 31536000),
    max_payload_bytes INTEGER NOT NULL CHECK (max_payload_bytes BETWEEN 1 AND 1000000)
) STRICT;

INSERT INTO queues (name, id_pattern, max_attempts, lease_seconds, max_payload_bytes)
VALUES ('default', 'E[0-9]{4}', 3, 30, 10000);

-- The messages table again, with its queue (the last column, so that a row
-- reads as before) and the key (queue, event_id).
CREATE TABLE messages_v4 (
    event_id     TEXT    NOT NULL CHECK (length(event_id) BETWEEN 1 AND 200),
    payload      TEXT    NOT NULL
                 CHECK (json_valid(payload) AND json_type(payload) = 'object'),
    state        TEXT    NOT NULL DEFAULT 'ready'
                 CHECK (state IN ('ready', 'leased', 'done', 'dead')),
    attempts     INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    generation   INTEGER NOT NULL DEFAULT 0 CHECK (generation >= 0),
    available_at INTEGER NOT NULL CHECK (available_at >= 0),
    lease_until  INTEGER CHECK ((state = 'leased') = (lease_until IS NOT NULL)),
    last_error   TEXT    CHECK (last_error IS NULL OR length(last_error) > 0),
    last_detail  TEXT    CHECK (last_detail IS NULL OR last_error IS NOT NULL),
    enqueued_at  INTEGER CHECK (enqueued_at IS NULL OR enqueued_at >= 0),
    done_at      INTEGER CHECK (done_at IS NULL OR state = 'done'),
    expired_leases INTEGER NOT NULL DEFAULT 0 CHECK (expired_leases >= 0),
    payload_sha256 TEXT
                 CHECK (payload_sha256 IS NULL
                        OR (state = 'done' AND payload = '{}'
                            AND length(payload_sha256) = 64)),
    queue        TEXT    NOT NULL DEFAULT 'default' REFERENCES queues (name),
    PRIMARY KEY (queue, event_id),
    CHECK (state <> 'dead' OR last_error IS NOT NULL),
    -- the default queue keeps the teaching rule, even against raw SQL
    CHECK (queue <> 'default'
           OR (length(event_id) = 5 AND event_id GLOB 'E[0-9][0-9][0-9][0-9]'))
) STRICT;

INSERT INTO messages_v4 (event_id, payload, state, attempts, generation,
    available_at, lease_until, last_error, last_detail, enqueued_at, done_at,
    expired_leases, payload_sha256, queue)
SELECT event_id, payload, state, attempts, generation, available_at,
    lease_until, last_error, last_detail, enqueued_at, done_at, expired_leases,
    payload_sha256, 'default'
FROM messages;

DROP TABLE messages;

ALTER TABLE messages_v4 RENAME TO messages;

-- Claim reads only its own queue's ready and leased rows, in claim order.
CREATE INDEX messages_claimable
    ON messages (queue, available_at, event_id)
    WHERE state IN ('ready', 'leased');
