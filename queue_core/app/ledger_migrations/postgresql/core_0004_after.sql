-- The ledger's effects across the queue's migration 4, after it: the foreign
-- key names the message's new key.
ALTER TABLE effects ADD CONSTRAINT effects_event_id_fkey FOREIGN KEY (queue, event_id)
    REFERENCES messages (queue, event_id);
