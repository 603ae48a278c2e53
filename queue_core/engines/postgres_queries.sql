-- queue_core on PostgreSQL: every statement the protocol runs, by name.
-- Loaded once by engines/queries.py; each "-- name:" line starts one statement,
-- written for psycopg with named parameters (%(name)s), and run as written.
-- There is no database write lock: a claim takes the rows it leases and skips
-- rows another transaction holds; a completion, failure or redrive locks its
-- message's row before it checks it.
-- now and until: given by the store's clock, or NULL to read the server's
-- (statement_timestamp(): one reading for the whole statement); until is a new
-- lease's end, rounded up, plus the lease (rules.lease_deadline).

-- name: enqueue_turn
-- Enqueues take turns on an advisory lock (the application id plus one), so that
-- a duplicate or a conflict is decided as on SQLite, where the write lock does it.
SELECT pg_advisory_xact_lock(1363373939);

-- name: receipt_turn
-- Receipts of one key take turns, on two hashed keys (the scope with the tenant).
SELECT pg_advisory_xact_lock(hashtext(%(scope)s || '/' || %(tenant)s), hashtext(%(operation)s));

-- name: server_time
-- The server's clock in seconds, with its fraction: one clock for every host.
SELECT CAST(extract(epoch FROM clock_timestamp()) AS DOUBLE PRECISION);

-- name: enqueue_find
-- The stored events among a batch's ids (ids, a JSON array), pruned or not.
SELECT event_id, payload, payload_sha256 FROM messages
WHERE queue = %(queue)s
  AND event_id IN (SELECT json_array_elements_text(CAST(%(ids)s AS JSON)));

-- name: enqueue_insert
-- A batch's new events (events, a JSON array of [event_id, payload]), in one
-- statement, all at one priority.
INSERT INTO messages (event_id, payload, state, available_at, enqueued_at, queue, priority)
SELECT event ->> 0, event ->> 1, 'ready', %(available_at)s, %(now)s, %(queue)s, %(priority)s
FROM json_array_elements(CAST(%(events)s AS JSON)) AS event;

-- name: claim_messages
-- The worker's claim: chooses and leases up to wanted messages and returns them,
-- in one statement; a candidate whose last lease ran out goes to dead instead.
-- Among the available, the highest priority first, then the oldest.
-- a locking WITH runs once (an IN subquery may be rescanned by a nested loop,
-- locking and taking further rows)
WITH chosen AS (
  SELECT event_id FROM messages
  WHERE queue = %(queue)s AND state IN ('ready', 'leased')
    AND available_at <= coalesce(CAST(%(now)s AS BIGINT), CAST(floor(extract(epoch FROM statement_timestamp())) AS BIGINT))
    AND (state = 'ready' OR lease_until <= coalesce(CAST(%(now)s AS BIGINT), CAST(floor(extract(epoch FROM statement_timestamp())) AS BIGINT)))
  ORDER BY priority DESC, available_at, event_id
  LIMIT %(wanted)s
  FOR UPDATE SKIP LOCKED)
UPDATE messages SET
  state = CASE WHEN attempts >= %(max_attempts)s THEN 'dead' ELSE 'leased' END,
  attempts = CASE WHEN attempts >= %(max_attempts)s THEN attempts ELSE attempts + 1 END,
  generation = CASE WHEN attempts >= %(max_attempts)s THEN generation ELSE generation + 1 END,
  lease_until = CASE WHEN attempts >= %(max_attempts)s THEN NULL ELSE coalesce(CAST(%(until)s AS BIGINT), CAST(ceil(extract(epoch FROM statement_timestamp())) AS BIGINT) + %(lease_seconds)s) END,
  lease_token = CASE WHEN attempts >= %(max_attempts)s THEN lease_token ELSE %(token)s END,
  last_error = CASE WHEN attempts >= %(max_attempts)s THEN %(lease_expired)s ELSE last_error END,
  last_detail = CASE WHEN attempts >= %(max_attempts)s
    THEN 'the lease of claim ' || CAST(attempts AS TEXT)
         || ' of ' || CAST(%(max_attempts)s AS TEXT) || ' ended at '
         || coalesce(CAST(lease_until AS TEXT), 'None')
         || ' with no completion'
    ELSE last_detail END,
  expired_leases = expired_leases
    + CASE WHEN attempts >= %(max_attempts)s OR state = 'leased' THEN 1 ELSE 0 END
WHERE queue = %(queue)s AND event_id IN (SELECT event_id FROM chosen)
RETURNING event_id, payload, state, attempts, generation, available_at, lease_until,
  last_error, last_detail, enqueued_at, done_at, expired_leases, payload_sha256, queue, priority;

-- name: fenced_move
-- The fence, written once: each lease of leases (a JSON array of
-- [event_id, generation, claim token]) moves only while it is its message's
-- current, unexpired lease: its generation, its claim token, leased, before
-- its deadline. move says where to: 'ack' marks the message done (the ACK);
-- 'release' makes it ready again at its old place, and the claim that took it
-- does not count as an attempt; 'extend' keeps the lease until until.
UPDATE messages SET
  state       = CASE CAST(%(move)s AS TEXT) WHEN 'ack' THEN 'done'
                WHEN 'release' THEN 'ready' ELSE state END,
  lease_until = CASE CAST(%(move)s AS TEXT) WHEN 'extend' THEN CAST(%(until)s AS BIGINT) END,
  done_at     = CASE CAST(%(move)s AS TEXT) WHEN 'ack' THEN coalesce(CAST(%(now)s AS BIGINT), CAST(floor(extract(epoch FROM statement_timestamp())) AS BIGINT)) END,
  attempts    = CASE CAST(%(move)s AS TEXT) WHEN 'release' THEN attempts - 1
                ELSE attempts END
WHERE queue = %(queue)s
  AND (event_id, generation, lease_token) IN (
    SELECT lease ->> 0, CAST(lease ->> 1 AS BIGINT), CAST(lease ->> 2 AS BIGINT)
    FROM json_array_elements(CAST(%(leases)s AS JSON)) AS lease)
  AND state = 'leased'
  AND lease_until > coalesce(CAST(%(now)s AS BIGINT), CAST(floor(extract(epoch FROM statement_timestamp())) AS BIGINT));

-- name: message
-- One message.
SELECT event_id, payload, state, attempts, generation, available_at, lease_until,
  last_error, last_detail, enqueued_at, done_at, expired_leases,
  payload_sha256 IS NOT NULL, queue, priority
FROM messages WHERE queue = %(queue)s AND event_id = %(event_id)s;

-- name: lease_locked
-- One message with its lease's claim token, for the fenced check.
SELECT event_id, payload, state, attempts, generation, available_at, lease_until,
  last_error, last_detail, enqueued_at, done_at, expired_leases,
  payload_sha256 IS NOT NULL, queue, priority, lease_token
FROM messages WHERE queue = %(queue)s AND event_id = %(event_id)s FOR UPDATE;

-- name: fail_dead
-- A failure that ends the cycle: dead, with its code and reason.
UPDATE messages SET state = 'dead', lease_until = NULL, last_error = %(code)s,
  last_detail = %(detail)s
WHERE queue = %(queue)s AND event_id = %(event_id)s;

-- name: fail_retry
-- A temporary failure with attempts left: ready again after the backoff.
UPDATE messages
SET state = 'ready', lease_until = NULL, available_at = %(available_at)s,
    last_error = %(code)s, last_detail = %(detail)s
WHERE queue = %(queue)s AND event_id = %(event_id)s;

-- name: redrive_state
-- A message's state, before a redrive.
SELECT state FROM messages WHERE queue = %(queue)s AND event_id = %(event_id)s FOR UPDATE;

-- name: redrive_reset
-- A dead message's new cycle: attempts from zero, available now.
UPDATE messages SET state = 'ready', attempts = 0, available_at = %(now)s
WHERE queue = %(queue)s AND event_id = %(event_id)s;

-- name: redrive_dead
-- Redrive in bulk: the first limit dead messages after after, by event id,
-- whose last_error is code (NULL: any), each given a new cycle as
-- redrive_reset gives one; their rows are locked first, and the state is
-- checked again by the statement that writes. Returns the ids it redrove.
WITH chosen AS (
  SELECT event_id FROM messages
  WHERE queue = %(queue)s AND state = 'dead' AND event_id > %(after)s
    AND (CAST(%(code)s AS TEXT) IS NULL OR last_error = %(code)s)
  ORDER BY event_id
  LIMIT %(limit)s
  FOR UPDATE)
UPDATE messages SET state = 'ready', attempts = 0, available_at = %(now)s
WHERE queue = %(queue)s AND state = 'dead'
  AND event_id IN (SELECT event_id FROM chosen)
RETURNING event_id;

-- name: status_counts
SELECT state, count(*) FROM messages WHERE queue = %(queue)s GROUP BY state;

-- name: messages_all
SELECT event_id, payload, state, attempts, generation, available_at, lease_until,
  last_error, last_detail, enqueued_at, done_at, expired_leases,
  payload_sha256 IS NOT NULL, queue, priority
FROM messages WHERE queue = %(queue)s ORDER BY event_id;

-- name: messages_in_state
SELECT event_id, payload, state, attempts, generation, available_at, lease_until,
  last_error, last_detail, enqueued_at, done_at, expired_leases,
  payload_sha256 IS NOT NULL, queue, priority
FROM messages WHERE queue = %(queue)s AND state = %(state)s ORDER BY event_id;

-- name: messages_first
-- The first limit messages, by event id.
SELECT event_id, payload, state, attempts, generation, available_at, lease_until,
  last_error, last_detail, enqueued_at, done_at, expired_leases,
  payload_sha256 IS NOT NULL, queue, priority
FROM messages WHERE queue = %(queue)s ORDER BY event_id LIMIT %(limit)s;

-- name: messages_first_in_state
SELECT event_id, payload, state, attempts, generation, available_at, lease_until,
  last_error, last_detail, enqueued_at, done_at, expired_leases,
  payload_sha256 IS NOT NULL, queue, priority
FROM messages WHERE queue = %(queue)s AND state = %(state)s ORDER BY event_id LIMIT %(limit)s;

-- name: purge_state
-- Only ready or dead messages, of one state.
DELETE FROM messages WHERE queue = %(queue)s AND state = %(state)s
  AND state IN ('ready', 'dead');

-- name: oldest_ready
SELECT min(enqueued_at) FROM messages WHERE queue = %(queue)s AND state = 'ready';

-- name: dead_attempts
SELECT attempts, count(*) FROM messages
WHERE queue = %(queue)s AND state = 'dead' GROUP BY attempts ORDER BY attempts;

-- name: done_summary
-- The timed done messages: how many, the longest, the sum.
SELECT count(*), max(done_at - enqueued_at), coalesce(sum(done_at - enqueued_at), 0)
FROM messages WHERE queue = %(queue)s AND state = 'done'
  AND enqueued_at IS NOT NULL AND done_at IS NOT NULL;

-- name: done_percentile
-- The offset-th shortest enqueue-to-done time.
SELECT done_at - enqueued_at AS seconds
FROM messages WHERE queue = %(queue)s AND state = 'done'
  AND enqueued_at IS NOT NULL AND done_at IS NOT NULL
ORDER BY seconds LIMIT 1 OFFSET %(offset)s;

-- name: expired_and_pruned
SELECT coalesce(sum(expired_leases), 0), count(payload_sha256)
FROM messages WHERE queue = %(queue)s;

-- name: work_counters
-- A queue's counters of work done (processed, retried, dead, expired leases):
-- its rows' own, plus what rows that left no longer show (queue_counters).
WITH kept AS (
  SELECT processed, retried, dead, expired_leases FROM queue_counters
  WHERE queue = %(queue)s
)
SELECT
  count(*) FILTER (WHERE state = 'done') + coalesce((SELECT processed FROM kept), 0),
  coalesce(sum(retries), 0) + coalesce((SELECT retried FROM kept), 0),
  count(*) FILTER (WHERE state = 'dead') + coalesce((SELECT dead FROM kept), 0),
  coalesce(sum(expired_leases), 0) + coalesce((SELECT expired_leases FROM kept), 0)
FROM messages WHERE queue = %(queue)s;

-- name: prune_chunk
SELECT event_id, payload FROM messages
WHERE queue = %(queue)s AND state = 'done' AND payload_sha256 IS NULL
  AND done_at IS NOT NULL AND done_at <= %(cutoff)s
ORDER BY event_id LIMIT %(limit)s;

-- name: prune_payload
UPDATE messages SET payload = '{}', payload_sha256 = %(digest)s
WHERE queue = %(queue)s AND event_id = %(event_id)s;

-- name: prune_unknown_age
SELECT count(*) FROM messages WHERE queue = %(queue)s AND state = 'done' AND done_at IS NULL;

-- name: queue_settings
-- One queue's settings, its retry policy last.
SELECT name, id_pattern, max_attempts, lease_seconds, max_payload_bytes,
  backoff_base_seconds, backoff_max_seconds, backoff_jitter
FROM queues WHERE name = %(name)s;

-- name: queue_insert
-- A new queue with its settings and retry policy.
INSERT INTO queues (name, id_pattern, max_attempts, lease_seconds, max_payload_bytes,
  backoff_base_seconds, backoff_max_seconds, backoff_jitter)
VALUES (%(name)s, %(id_pattern)s, %(max_attempts)s, %(lease_seconds)s,
  %(max_payload_bytes)s, %(backoff_base_seconds)s, %(backoff_max_seconds)s, %(backoff_jitter)s);

-- name: queues_all
-- Every queue's settings, by name.
SELECT name, id_pattern, max_attempts, lease_seconds, max_payload_bytes,
  backoff_base_seconds, backoff_max_seconds, backoff_jitter
FROM queues ORDER BY name;

-- name: queue_counts
SELECT queue, state, count(*) FROM messages GROUP BY queue, state;

-- name: receipt_lookup
SELECT scope, tenant, operation, payload, effect, effect_queue FROM receipts
WHERE scope = %(scope)s AND tenant = %(tenant)s AND operation = %(operation)s;

-- name: receipt_insert
INSERT INTO receipts (scope, tenant, operation, payload, effect_queue, effect)
VALUES (%(scope)s, %(tenant)s, %(operation)s, %(payload)s, %(effect_queue)s, %(effect)s);

-- name: receipt_all
SELECT scope, tenant, operation, payload, effect, effect_queue FROM receipts
ORDER BY scope, tenant, operation;

-- name: table_exists
-- Read from the catalog with the statement's own snapshot: to_regclass would
-- consult this session's catalog cache, which can still say "no such table"
-- after another session created it while this one waited for a lock.
SELECT 1 FROM pg_catalog.pg_tables
WHERE schemaname = current_schema() AND tablename = %(name)s;

-- name: line_turn
-- Installs of migration lines take turns under the schema's advisory lock
-- (the application id): no two read the same old version.
SELECT pg_advisory_xact_lock(1363373938);

-- name: line_version
-- A migration line's recorded version (no row: never installed).
SELECT version FROM migration_lines WHERE line = %(line)s;

-- name: line_version_set
-- Record a migration line's version, once its migrations ran.
INSERT INTO migration_lines (line, version) VALUES (%(line)s, %(version)s)
ON CONFLICT (line) DO UPDATE SET version = EXCLUDED.version;
