-- queue_core schema, version 3 (PRAGMA user_version = 3); receipts.sql is
-- part of it. Older files are migrated forward when opened (database.py).
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
    -- The human-readable reason beside last_error's code (added in version 2).
    last_detail  TEXT    CHECK (last_detail IS NULL OR last_error IS NOT NULL),
    -- Added in version 3, for the metrics (NULL: a row from before version 3).
    enqueued_at  INTEGER CHECK (enqueued_at IS NULL OR enqueued_at >= 0),
    done_at      INTEGER CHECK (done_at IS NULL OR state = 'done'),
    -- Leases of this message that ran out and a later claim took over (or that
    -- ended in dead).
    expired_leases INTEGER NOT NULL DEFAULT 0 CHECK (expired_leases >= 0),
    -- Set by prune: the payload is gone ('{}'), its SHA-256 keeps deduplication exact.
    payload_sha256 TEXT CHECK (payload_sha256 IS NULL
                               OR (state = 'done' AND payload = '{}'
                                   AND length(payload_sha256) = 64)),
    -- A dead message always says why.
    CHECK (state <> 'dead' OR last_error IS NOT NULL)
) STRICT;

-- Claim reads only ready and leased rows, in claim order; done and dead rows
-- (which stay forever for deduplication) are not in this index at all.
CREATE INDEX messages_claimable
    ON messages (available_at, event_id)
    WHERE state IN ('ready', 'leased');
