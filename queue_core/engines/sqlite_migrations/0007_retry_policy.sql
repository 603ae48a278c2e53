-- queue_core on SQLite, migration 7: each queue's retry policy. The delay
-- after a temporary failure of attempt n is min(backoff_max_seconds,
-- backoff_base_seconds * 2**(n-1)), less up to backoff_jitter of it. Every
-- queue from before gets 1 s doubling to at most an hour, without jitter:
-- the queue 'default' keeps its 1 s then 2 s, and no delay grows past an
-- hour any more. New queues take their jitter from the code (queues.py).

ALTER TABLE queues ADD COLUMN backoff_base_seconds INTEGER NOT NULL DEFAULT 1
    CHECK (backoff_base_seconds BETWEEN 1 AND 86400);
ALTER TABLE queues ADD COLUMN backoff_max_seconds INTEGER NOT NULL DEFAULT 3600
    CHECK (backoff_max_seconds BETWEEN backoff_base_seconds AND 31622400);
-- the fraction of each delay that jitter may take off
ALTER TABLE queues ADD COLUMN backoff_jitter REAL NOT NULL DEFAULT 0
    CHECK (backoff_jitter BETWEEN 0 AND 1);
