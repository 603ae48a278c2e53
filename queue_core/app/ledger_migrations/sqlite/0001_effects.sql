-- The ledger, version 1: the reference application's effect, one row per paid
-- event. It belongs to the application, not to the queue: the queue's schema
-- never mentions it. The foreign key ties an effect to the message that made
-- it; a message is keyed by its queue and its id (schema version 4).
-- IF NOT EXISTS: a database whose effects was made before migration lines
-- existed is adopted at version 1.
CREATE TABLE IF NOT EXISTS effects (
    -- first: SQLite 3.40's integrity_check misreads a WITHOUT ROWID table
    -- whose key columns come after others
    queue        TEXT    NOT NULL DEFAULT 'default',
    event_id     TEXT    NOT NULL,
    category     TEXT    NOT NULL CHECK (length(category) > 0),
    amount_cents INTEGER NOT NULL CHECK (amount_cents > 0),
    PRIMARY KEY (queue, event_id),
    FOREIGN KEY (queue, event_id) REFERENCES messages (queue, event_id)
) STRICT, WITHOUT ROWID;  -- one b-tree, no separate key index: one page less per ACK
