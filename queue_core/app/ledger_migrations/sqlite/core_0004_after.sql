-- The ledger's effects across the queue's migration 4 (named queues), on a
-- database older than version 4: an effect was keyed by its event id alone,
-- and is now keyed by (queue, event_id) like its message, every row in the
-- queue 'default'. The engine runs this right after migration 4, with
-- foreign keys off, and checks every key before COMMIT.
CREATE TABLE effects_v4 (
    -- first: SQLite 3.40's integrity_check misreads a WITHOUT ROWID table
    -- whose key columns come after others
    queue        TEXT    NOT NULL DEFAULT 'default',
    event_id     TEXT    NOT NULL,
    category     TEXT    NOT NULL CHECK (length(category) > 0),
    amount_cents INTEGER NOT NULL CHECK (amount_cents > 0),
    PRIMARY KEY (queue, event_id),
    FOREIGN KEY (queue, event_id) REFERENCES messages (queue, event_id)
) STRICT, WITHOUT ROWID;
INSERT INTO effects_v4 (event_id, category, amount_cents, queue)
SELECT event_id, category, amount_cents, 'default' FROM effects;
DROP TABLE effects;
ALTER TABLE effects_v4 RENAME TO effects;
