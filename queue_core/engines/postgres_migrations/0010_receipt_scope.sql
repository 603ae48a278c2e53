-- queue_core on PostgreSQL, migration 10: a receipt belongs to a scope
-- (SQLite's migration 10 says why).
--
-- A receipt from before gets the scope of the one queue holding a message
-- whose event id is its effect, and that queue as its effect_queue; where no
-- queue or several hold one, the scope 'default' and no effect_queue.
ALTER TABLE receipts ADD COLUMN scope TEXT;
ALTER TABLE receipts ADD COLUMN effect_queue TEXT
    CONSTRAINT receipts_effect_queue_length
    CHECK (effect_queue IS NULL OR length(effect_queue) BETWEEN 1 AND 63);

UPDATE receipts AS r
SET scope = coalesce(owner.queue, 'default'), effect_queue = owner.queue
FROM receipts AS k
LEFT JOIN (
    SELECT event_id, min(queue) AS queue FROM messages
    GROUP BY event_id HAVING count(*) = 1
) AS owner ON owner.event_id = k.effect
WHERE k.tenant = r.tenant AND k.operation = r.operation;

ALTER TABLE receipts ALTER COLUMN scope SET NOT NULL;
ALTER TABLE receipts ADD CONSTRAINT receipts_scope_length
    CHECK (length(scope) BETWEEN 1 AND 200);
ALTER TABLE receipts DROP CONSTRAINT receipts_pkey;
ALTER TABLE receipts ADD PRIMARY KEY (scope, tenant, operation);
