-- queue_core on SQLite, migration 1: the messages table.
-- Migrations run in order, all in one transaction; a file, once released,
-- never changes (a new column is a new migration).
-- STRICT tables: SQLite refuses a value of the wrong type instead of storing it.
-- The CHECKs make impossible states unstorable, even for a client that
-- bypasses the protocol with raw SQL.

CREATE TABLE messages (
    event_id     TEXT    PRIMARY KEY
                 CHECK (length(event_id) = 5 AND event_id GLOB 'E[0-9][0-9][0-9][0-9]'),
    payload      TEXT    NOT NULL
                 CHECK (json_valid(payload) AND json_type(payload) = 'object'),
    state        TEXT    NOT NULL DEFAULT 'ready'
                 CHECK (state IN ('ready', 'leased', 'done', 'dead')),
    attempts     INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    generation   INTEGER NOT NULL DEFAULT 0 CHECK (generation >= 0),
    available_at INTEGER NOT NULL CHECK (available_at >= 0),
    -- A lease deadline exists exactly while the message is leased.
    lease_until  INTEGER CHECK ((state = 'leased') = (lease_until IS NOT NULL)),
    last_error   TEXT    CHECK (last_error IS NULL OR length(last_error) > 0),
    -- A dead message always says why.
    CHECK (state <> 'dead' OR last_error IS NOT NULL)
) STRICT;

-- Claim reads only ready and leased rows, in claim order; done and dead rows
-- (which stay forever for deduplication) are not in this index at all.
CREATE INDEX messages_claimable
    ON messages (available_at, event_id)
    WHERE state IN ('ready', 'leased');
