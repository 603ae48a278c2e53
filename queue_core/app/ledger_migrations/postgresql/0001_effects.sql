-- The ledger for PostgreSQL, version 1 (sqlite/0001_effects.sql on SQLite):
-- the reference application's effect, one row per paid event. It belongs to
-- the application, not to the queue: the queue's migrations never mention it.
-- The foreign key ties an effect to the message that made it; the primary key
-- makes a second effect for one event (of one queue) unstorable.
-- IF NOT EXISTS: a database whose effects was made before migration lines
-- existed is adopted at version 1. The engine runs it inside the installing
-- transaction, under the schema's advisory lock, so concurrent installs take
-- turns.

CREATE TABLE IF NOT EXISTS effects (
    -- first, as on SQLite (a database of version 3 gets it last: ALTER TABLE)
    queue        TEXT COLLATE "C" NOT NULL DEFAULT 'default',
    event_id     TEXT COLLATE "C" NOT NULL,
    category     TEXT   NOT NULL
                 CONSTRAINT effects_category_nonempty CHECK (length(category) > 0),
    amount_cents BIGINT NOT NULL
                 CONSTRAINT effects_amount_positive CHECK (amount_cents > 0),
    PRIMARY KEY (queue, event_id),
    CONSTRAINT effects_event_id_fkey FOREIGN KEY (queue, event_id)
        REFERENCES messages (queue, event_id)
);
