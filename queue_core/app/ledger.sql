-- The ledger: the reference application's effect, one row per paid event.
-- It belongs to the application, not to the queue: the queue's schema never
-- mentions it. The foreign key ties an effect to the message that made it.
CREATE TABLE IF NOT EXISTS effects (
    event_id     TEXT    PRIMARY KEY REFERENCES messages (event_id),
    category     TEXT    NOT NULL CHECK (length(category) > 0),
    amount_cents INTEGER NOT NULL CHECK (amount_cents > 0)
) STRICT, WITHOUT ROWID;  -- one b-tree, no separate key index: one page less per ACK
