-- The ledger's effects across the queue's migration 4 (named queues), on a
-- database older than version 4, before it: the effects' foreign key leaves
-- the message's old key free to go, and an effect is keyed by (queue,
-- event_id), every row in the queue 'default'.
ALTER TABLE effects DROP CONSTRAINT effects_event_id_fkey;
ALTER TABLE effects ADD COLUMN queue TEXT COLLATE "C" NOT NULL DEFAULT 'default';
ALTER TABLE effects DROP CONSTRAINT effects_pkey;
ALTER TABLE effects ADD CONSTRAINT effects_pkey PRIMARY KEY (queue, event_id);
