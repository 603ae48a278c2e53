-- queue_core on SQLite: every statement the protocol runs, by name.
-- Loaded once by engines/queries.py; each "-- name:" line starts one statement,
-- written for sqlite3 with named parameters (:name), and run as written.
-- One writer at a time (BEGIN IMMEDIATE): what a write transaction reads cannot
-- change before it writes, so no statement here locks rows.
-- now: whole seconds, rounded down; until: a new lease's end, rounded up, plus
-- the lease (rules.lease_deadline); both come from the store's clock.

-- name: enqueue_find
-- The stored events among a batch's ids (:ids, a JSON array), pruned or not.
SELECT event_id, payload, payload_sha256 FROM messages
WHERE queue = :queue AND event_id IN (SELECT value FROM json_each(:ids));

-- name: enqueue_insert
-- A batch's new events (:events, a JSON array of [event_id, payload]), in one
-- statement, all at one :priority.
INSERT INTO messages (event_id, payload, state, available_at, enqueued_at, queue, priority)
SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), 'ready',
       :available_at, :now, :queue, :priority
FROM json_each(:events);

-- name: claim_messages
-- The worker's claim: chooses and leases up to :wanted messages and returns them,
-- in one statement; a candidate whose last lease ran out goes to dead instead.
-- Among the available, the highest priority first, then the oldest.
UPDATE messages SET
  state = CASE WHEN attempts >= :max_attempts THEN 'dead' ELSE 'leased' END,
  attempts = CASE WHEN attempts >= :max_attempts THEN attempts ELSE attempts + 1 END,
  generation = CASE WHEN attempts >= :max_attempts THEN generation ELSE generation + 1 END,
  lease_until = CASE WHEN attempts >= :max_attempts THEN NULL ELSE :until END,
  lease_token = CASE WHEN attempts >= :max_attempts THEN lease_token ELSE :token END,
  last_error = CASE WHEN attempts >= :max_attempts THEN :lease_expired ELSE last_error END,
  last_detail = CASE WHEN attempts >= :max_attempts
    THEN 'the lease of claim ' || CAST(attempts AS TEXT)
         || ' of ' || CAST(:max_attempts AS TEXT) || ' ended at '
         || coalesce(CAST(lease_until AS TEXT), 'None')
         || ' with no completion'
    ELSE last_detail END,
  expired_leases = expired_leases
    + CASE WHEN attempts >= :max_attempts OR state = 'leased' THEN 1 ELSE 0 END
WHERE queue = :queue AND event_id IN (
  SELECT event_id FROM messages
  WHERE queue = :queue AND state IN ('ready', 'leased')
    AND available_at <= :now
    AND (state = 'ready' OR lease_until <= :now)
  ORDER BY priority DESC, available_at, event_id
  LIMIT :wanted)
-- the hash itself, not "IS NOT NULL": SQLite 3.40 answers that wrongly in
-- the rows an UPDATE of a STRICT table returns (1 for a NULL)
RETURNING event_id, payload, state, attempts, generation, available_at, lease_until,
  last_error, last_detail, enqueued_at, done_at, expired_leases, payload_sha256, queue, priority;

-- name: fenced_move
-- The fence, written once: each lease of :leases (a JSON array of
-- [event_id, generation, claim token]) moves only while it is its message's
-- current, unexpired lease: its generation, its claim token, leased, before
-- its deadline. :move says where to: 'ack' marks the message done (the ACK);
-- 'release' makes it ready again at its old place, and the claim that took it
-- does not count as an attempt; 'extend' keeps the lease until :until.
UPDATE messages SET
  state       = CASE :move WHEN 'ack' THEN 'done' WHEN 'release' THEN 'ready'
                ELSE state END,
  lease_until = CASE :move WHEN 'extend' THEN :until END,
  done_at     = CASE :move WHEN 'ack' THEN :now END,
  attempts    = CASE :move WHEN 'release' THEN attempts - 1 ELSE attempts END
WHERE queue = :queue
  AND (event_id, generation, lease_token) IN (
    SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'),
           json_extract(value, '$[2]')
    FROM json_each(:leases))
  AND state = 'leased'
  AND lease_until > :now;

-- name: message
-- One message.
SELECT event_id, payload, state, attempts, generation, available_at, lease_until,
  last_error, last_detail, enqueued_at, done_at, expired_leases,
  payload_sha256 IS NOT NULL, queue, priority
FROM messages WHERE queue = :queue AND event_id = :event_id;

-- name: lease_locked
-- One message with its lease's claim token, for the fenced check.
SELECT event_id, payload, state, attempts, generation, available_at, lease_until,
  last_error, last_detail, enqueued_at, done_at, expired_leases,
  payload_sha256 IS NOT NULL, queue, priority, lease_token
FROM messages WHERE queue = :queue AND event_id = :event_id;

-- name: fail_dead
-- A failure that ends the cycle: dead, with its code and reason.
UPDATE messages SET state = 'dead', lease_until = NULL, last_error = :code,
  last_detail = :detail
WHERE queue = :queue AND event_id = :event_id;

-- name: fail_retry
-- A temporary failure with attempts left: ready again after the backoff.
UPDATE messages
SET state = 'ready', lease_until = NULL, available_at = :available_at,
    last_error = :code, last_detail = :detail
WHERE queue = :queue AND event_id = :event_id;

-- name: redrive_state
-- A message's state, before a redrive.
SELECT state FROM messages WHERE queue = :queue AND event_id = :event_id;

-- name: redrive_reset
-- A dead message's new cycle: attempts from zero, available now.
UPDATE messages SET state = 'ready', attempts = 0, available_at = :now
WHERE queue = :queue AND event_id = :event_id;

-- name: redrive_dead
-- Redrive in bulk: the first :limit dead messages after :after, by event id,
-- whose last_error is :code (NULL: any), each given a new cycle as
-- redrive_reset gives one; the state is checked by the statement that writes.
-- Returns the ids it redrove.
UPDATE messages SET state = 'ready', attempts = 0, available_at = :now
WHERE queue = :queue AND state = 'dead' AND event_id IN (
  SELECT event_id FROM messages
  WHERE queue = :queue AND state = 'dead' AND event_id > :after
    AND (:code IS NULL OR last_error = :code)
  ORDER BY event_id
  LIMIT :limit)
RETURNING event_id;

-- name: status_counts
SELECT state, count(*) FROM messages WHERE queue = :queue GROUP BY state;

-- name: messages_all
SELECT event_id, payload, state, attempts, generation, available_at, lease_until,
  last_error, last_detail, enqueued_at, done_at, expired_leases,
  payload_sha256 IS NOT NULL, queue, priority
FROM messages WHERE queue = :queue ORDER BY event_id;

-- name: messages_in_state
SELECT event_id, payload, state, attempts, generation, available_at, lease_until,
  last_error, last_detail, enqueued_at, done_at, expired_leases,
  payload_sha256 IS NOT NULL, queue, priority
FROM messages WHERE queue = :queue AND state = :state ORDER BY event_id;

-- name: messages_first
-- The first :limit messages, by event id.
SELECT event_id, payload, state, attempts, generation, available_at, lease_until,
  last_error, last_detail, enqueued_at, done_at, expired_leases,
  payload_sha256 IS NOT NULL, queue, priority
FROM messages WHERE queue = :queue ORDER BY event_id LIMIT :limit;

-- name: messages_first_in_state
SELECT event_id, payload, state, attempts, generation, available_at, lease_until,
  last_error, last_detail, enqueued_at, done_at, expired_leases,
  payload_sha256 IS NOT NULL, queue, priority
FROM messages WHERE queue = :queue AND state = :state ORDER BY event_id LIMIT :limit;

-- name: purge_state
-- Only ready or dead messages, of one state.
DELETE FROM messages WHERE queue = :queue AND state = :state
  AND state IN ('ready', 'dead');

-- name: oldest_ready
SELECT min(enqueued_at) FROM messages WHERE queue = :queue AND state = 'ready';

-- name: dead_attempts
SELECT attempts, count(*) FROM messages
WHERE queue = :queue AND state = 'dead' GROUP BY attempts ORDER BY attempts;

-- name: done_summary
-- The timed done messages: how many, the longest, the sum.
SELECT count(*), max(done_at - enqueued_at), coalesce(sum(done_at - enqueued_at), 0)
FROM messages WHERE queue = :queue AND state = 'done'
  AND enqueued_at IS NOT NULL AND done_at IS NOT NULL;

-- name: done_percentile
-- The :offset-th shortest enqueue-to-done time.
SELECT done_at - enqueued_at AS seconds
FROM messages WHERE queue = :queue AND state = 'done'
  AND enqueued_at IS NOT NULL AND done_at IS NOT NULL
ORDER BY seconds LIMIT 1 OFFSET :offset;

-- name: expired_and_pruned
SELECT coalesce(sum(expired_leases), 0), count(payload_sha256)
FROM messages WHERE queue = :queue;

-- name: work_counters
-- A queue's counters of work done (processed, retried, dead, expired leases):
-- its rows' own, plus what rows that left no longer show (queue_counters).
WITH kept AS (
  SELECT processed, retried, dead, expired_leases FROM queue_counters
  WHERE queue = :queue
)
SELECT
  coalesce(sum(state = 'done'), 0) + coalesce((SELECT processed FROM kept), 0),
  coalesce(sum(retries), 0) + coalesce((SELECT retried FROM kept), 0),
  coalesce(sum(state = 'dead'), 0) + coalesce((SELECT dead FROM kept), 0),
  coalesce(sum(expired_leases), 0) + coalesce((SELECT expired_leases FROM kept), 0)
FROM messages WHERE queue = :queue;

-- name: prune_chunk
SELECT event_id, payload FROM messages
WHERE queue = :queue AND state = 'done' AND payload_sha256 IS NULL
  AND done_at IS NOT NULL AND done_at <= :cutoff
ORDER BY event_id LIMIT :limit;

-- name: prune_payload
UPDATE messages SET payload = '{}', payload_sha256 = :digest
WHERE queue = :queue AND event_id = :event_id;

-- name: prune_unknown_age
SELECT count(*) FROM messages WHERE queue = :queue AND state = 'done' AND done_at IS NULL;

-- name: queue_settings
-- One queue's settings, its retry policy last.
SELECT name, id_pattern, max_attempts, lease_seconds, max_payload_bytes,
  backoff_base_seconds, backoff_max_seconds, backoff_jitter
FROM queues WHERE name = :name;

-- name: queue_insert
-- A new queue with its settings and retry policy.
INSERT INTO queues (name, id_pattern, max_attempts, lease_seconds, max_payload_bytes,
  backoff_base_seconds, backoff_max_seconds, backoff_jitter)
VALUES (:name, :id_pattern, :max_attempts, :lease_seconds, :max_payload_bytes,
  :backoff_base_seconds, :backoff_max_seconds, :backoff_jitter);

-- name: queues_all
-- Every queue's settings, by name.
SELECT name, id_pattern, max_attempts, lease_seconds, max_payload_bytes,
  backoff_base_seconds, backoff_max_seconds, backoff_jitter
FROM queues ORDER BY name;

-- name: queue_counts
SELECT queue, state, count(*) FROM messages GROUP BY queue, state;

-- name: receipt_lookup
SELECT scope, tenant, operation, payload, effect, effect_queue FROM receipts
WHERE scope = :scope AND tenant = :tenant AND operation = :operation;

-- name: receipt_insert
INSERT INTO receipts (scope, tenant, operation, payload, effect_queue, effect)
VALUES (:scope, :tenant, :operation, :payload, :effect_queue, :effect);

-- name: receipt_all
SELECT scope, tenant, operation, payload, effect, effect_queue FROM receipts
ORDER BY scope, tenant, operation;

-- name: receipts_create
-- The receipts table in an SQLite database that is not a queue's: the table of
-- migration 10 (a queue's database has it from there).
CREATE TABLE IF NOT EXISTS receipts (
    tenant       TEXT NOT NULL CHECK (length(tenant) BETWEEN 1 AND 200),
    operation    TEXT NOT NULL CHECK (length(operation) BETWEEN 1 AND 200),
    payload      TEXT NOT NULL CHECK (json_valid(payload)),
    effect       TEXT NOT NULL CHECK (length(effect) > 0),
    -- after the columns of migration 2, as PostgreSQL's ALTER TABLE adds them
    scope        TEXT NOT NULL CHECK (length(scope) BETWEEN 1 AND 200),
    effect_queue TEXT CHECK (effect_queue IS NULL OR length(effect_queue) BETWEEN 1 AND 63),
    PRIMARY KEY (scope, tenant, operation)
) STRICT;

-- name: receipts_unscoped
-- A receipts table from before scopes, in a database that is not a queue's:
-- its receipts move to the scope 'default' (as migration 10 does where no
-- queue message is their effect).
SELECT 1 FROM pragma_table_info('receipts') WHERE name = 'tenant'
AND NOT EXISTS (SELECT 1 FROM pragma_table_info('receipts') WHERE name = 'scope');

-- name: receipts_rescope
ALTER TABLE receipts RENAME TO receipts_unscoped;

-- name: receipts_rescope_copy
INSERT INTO receipts (scope, tenant, operation, payload, effect_queue, effect)
SELECT 'default', tenant, operation, payload, NULL, effect FROM receipts_unscoped;

-- name: receipts_rescope_drop
DROP TABLE receipts_unscoped;

-- name: table_exists
SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = :name;

-- name: line_version
-- A migration line's recorded version (no row: never installed).
SELECT version FROM migration_lines WHERE line = :line;

-- name: line_version_set
-- Record a migration line's version, once its migrations ran.
INSERT INTO migration_lines (line, version) VALUES (:line, :version)
ON CONFLICT (line) DO UPDATE SET version = excluded.version;
