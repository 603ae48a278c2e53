-- queue_core on SQLite, migration 10: a receipt belongs to a scope.
--
-- A receipt was keyed by (tenant, operation) alone, so a charge in one queue
-- and a refund in another with the same key shared one receipt, and the
-- second was ACKed on the first one's effect. The key is now (scope, tenant,
-- operation): a ReceiptHandler's scope is its queue's name unless it is given
-- one, and code outside a queue names its own. The effect is named by its
-- queue (effect_queue, NULL when the effect is not a queue message's) and its
-- reference (for a queue message: the event id).
--
-- A receipt from before gets the scope of the one queue holding a message
-- whose event id is its effect, and that queue as its effect_queue; where no
-- queue or several hold one, the scope 'default' and no effect_queue.
CREATE TABLE receipts_scoped (
    tenant       TEXT NOT NULL CHECK (length(tenant) BETWEEN 1 AND 200),
    operation    TEXT NOT NULL CHECK (length(operation) BETWEEN 1 AND 200),
    payload      TEXT NOT NULL CHECK (json_valid(payload)),
    effect       TEXT NOT NULL CHECK (length(effect) > 0),
    -- after the columns of migration 2, as PostgreSQL's ALTER TABLE adds them
    scope        TEXT NOT NULL CHECK (length(scope) BETWEEN 1 AND 200),
    effect_queue TEXT CHECK (effect_queue IS NULL OR length(effect_queue) BETWEEN 1 AND 63),
    PRIMARY KEY (scope, tenant, operation)
) STRICT;

INSERT INTO receipts_scoped (scope, tenant, operation, payload, effect_queue, effect)
SELECT coalesce(owner.queue, 'default'), r.tenant, r.operation, r.payload, owner.queue, r.effect
FROM receipts AS r
LEFT JOIN (
    SELECT event_id, min(queue) AS queue FROM messages
    GROUP BY event_id HAVING count(*) = 1
) AS owner ON owner.event_id = r.effect;

DROP TABLE receipts;
ALTER TABLE receipts_scoped RENAME TO receipts;
