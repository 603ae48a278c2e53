-- queue_core on PostgreSQL, migration 2 (PostgreSQL support began at schema
-- version 2): the same tables as SQLite's migrations 1 and 2, with the same
-- CHECKs, so that impossible states stay unstorable even for a client that
-- bypasses the protocol with raw SQL. Migrations run in order, all in one
-- transaction, under the engine's advisory lock; a released file never changes.
--
-- Differences from SQLite, on purpose:
--   * No STRICT: a PostgreSQL column only ever holds its own type. Wrong
--     input is refused before any CHECK (e.g. 'ten' for a BIGINT), except
--     what PostgreSQL converts on assignment: a numeric 1.5 becomes 2.
--   * No user_version or application_id: the one-row table queue_core_schema
--     says which application and which schema version the database holds.
--   * event_id compares and sorts bytewise (COLLATE "C"), like SQLite's BINARY,
--     whatever the database's default collation.

-- SQLite's json_valid and json_type in one: the JSON type of a text
-- ('object', 'array', 'string', 'number', 'boolean' or 'null'), or 'invalid'
-- when it is not JSON at all. A cast inside the CHECK itself would refuse bad
-- JSON with a data exception (22P02) instead of a check violation (23514).
-- The type json only validates the text (jsonb would refuse "\u0000", which
-- canonical JSON may hold); the text itself is stored, never json or jsonb.
CREATE OR REPLACE FUNCTION queue_core_json_type(doc text) RETURNS text
    LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS '
BEGIN
    RETURN pg_catalog.json_typeof(doc::pg_catalog.json);
EXCEPTION WHEN data_exception THEN
    RETURN ''invalid'';
END
';

CREATE TABLE messages (
    event_id     TEXT COLLATE "C" PRIMARY KEY
                 CONSTRAINT messages_event_id_format
                 CHECK (length(event_id) = 5 AND event_id ~ '^E[0-9]{4}$'),
    payload      TEXT    NOT NULL
                 CONSTRAINT messages_payload_object
                 CHECK (queue_core_json_type(payload) = 'object'),
    state        TEXT    NOT NULL DEFAULT 'ready'
                 CONSTRAINT messages_state_known
                 CHECK (state IN ('ready', 'leased', 'done', 'dead')),
    attempts     BIGINT  NOT NULL DEFAULT 0
                 CONSTRAINT messages_attempts_nonnegative CHECK (attempts >= 0),
    generation   BIGINT  NOT NULL DEFAULT 0
                 CONSTRAINT messages_generation_nonnegative CHECK (generation >= 0),
    available_at BIGINT  NOT NULL
                 CONSTRAINT messages_available_at_nonnegative CHECK (available_at >= 0),
    -- A lease deadline exists exactly while the message is leased.
    lease_until  BIGINT  CONSTRAINT messages_lease_until_while_leased
                 CHECK ((state = 'leased') = (lease_until IS NOT NULL)),
    last_error   TEXT    CONSTRAINT messages_last_error_nonempty
                 CHECK (last_error IS NULL OR length(last_error) > 0),
    -- The human-readable reason beside last_error's code.
    last_detail  TEXT    CONSTRAINT messages_last_detail_with_error
                 CHECK (last_detail IS NULL OR last_error IS NOT NULL),
    -- A dead message always says why.
    CONSTRAINT messages_dead_with_error
    CHECK (state <> 'dead' OR last_error IS NOT NULL)
);

-- Claim reads only ready and leased rows, in claim order; done and dead rows
-- (which stay forever for deduplication) are not in this index at all.
CREATE INDEX messages_claimable
    ON messages (available_at, event_id)
    WHERE state IN ('ready', 'leased');

-- Idempotency receipts: (tenant, operation) -> canonical payload, and the
-- effect it produced. Written in the same transaction as that effect.
CREATE TABLE receipts (
    tenant    TEXT NOT NULL
              CONSTRAINT receipts_tenant_length
              CHECK (length(tenant) BETWEEN 1 AND 200),
    operation TEXT NOT NULL
              CONSTRAINT receipts_operation_length
              CHECK (length(operation) BETWEEN 1 AND 200),
    payload   TEXT NOT NULL
              CONSTRAINT receipts_payload_json
              CHECK (queue_core_json_type(payload) <> 'invalid'),
    effect    TEXT NOT NULL
              CONSTRAINT receipts_effect_nonempty CHECK (length(effect) > 0),
    PRIMARY KEY (tenant, operation)
);

-- What PRAGMA application_id and user_version say on SQLite: one row, never
-- two. The engine writes the row after the last migration.
CREATE TABLE queue_core_schema (
    singleton      BOOLEAN PRIMARY KEY DEFAULT TRUE
                   CONSTRAINT queue_core_schema_one_row CHECK (singleton),
    application_id BIGINT  NOT NULL
                   CONSTRAINT queue_core_schema_application
                   CHECK (application_id = 1363373938),
    version        INTEGER NOT NULL
                   CONSTRAINT queue_core_schema_version_positive CHECK (version >= 1)
);
