"""Every statement of the protocol, by name, for each engine.

Each statement is written once, with ``?`` placeholders; an engine supplies
only the fragments that differ (``Dialect``): its row locks, how a list of
ids is matched, the turns it takes where it has no database write lock.
``SQLITE`` and ``POSTGRESQL`` are the two sets, made when this module loads
(for psycopg, ``?`` becomes ``%s``). The protocol runs ``tx.sql.<name>`` and
never asks which engine it is on; the pages print the statements from here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Final

# The columns of a ``Message``, in its order; the last one says whether prune
# removed the payload (SQLite answers 0/1, PostgreSQL a bool).
MESSAGE_COLUMNS: Final = (
    "event_id, payload, state, attempts, generation, available_at, lease_until, "
    "last_error, last_detail, enqueued_at, done_at, expired_leases, "
    "payload_sha256 IS NOT NULL, queue"
)
# The same columns after RETURNING, with the hash itself last (message_of makes
# it a bool): SQLite 3.40 answers "payload_sha256 IS NOT NULL" wrongly there,
# 1 for a NULL, in a STRICT table (tests/test_worker_path.py would see it).
_RETURNED_COLUMNS: Final = MESSAGE_COLUMNS.replace(
    "payload_sha256 IS NOT NULL", "payload_sha256"
)
# The columns of a queue's ``QueueSettings``, in its order.
QUEUE_COLUMNS: Final = "name, id_pattern, max_attempts, lease_seconds, max_payload_bytes"
# The timed rows of the metrics: done messages with both of their times.
_TIMED: Final = (
    "FROM messages WHERE queue = ? AND state = 'done' "
    "AND enqueued_at IS NOT NULL AND done_at IS NOT NULL"
)


@dataclass(frozen=True)
class Dialect:
    """What one engine's statements say differently."""

    name: str
    # appended to the claim's read of its candidates
    claim_lock: str
    # appended to a completion's, failure's or redrive's read of its message
    row_lock: str
    # matches event_id against one parameter holding a list of ids
    ids_in_list: str
    # the claim's chosen messages ({} is the query choosing them) must be chosen
    # once: a rescan of a locking subquery would lock and take further rows.
    # Put before the claim's UPDATE (a WITH that names them), and its match
    claim_with: str
    ids_chosen: str
    # the statement that makes enqueues take turns (None: the write lock does)
    enqueue_turn: str | None
    # the statement that makes receipts of one key take turns (None: as above)
    receipt_turn: str | None
    # the server's clock in seconds with its fraction (None: no server clock)
    server_time: str | None
    placeholder: str  # as the driver wants it: "?" or "%s"
    # the value bound to ids_in_list's parameter
    id_list: Callable[[list[str]], object]
    # matches (event_id, generation, lease_token) against :leases, a JSON array
    # of such triples
    leases_in_list: str
    # the time in a statement with named parameters: now (whole seconds, rounded
    # down) and a new lease's end (rounded up, plus :lease_seconds); where the
    # engine has a clock of its own, a NULL parameter means "read it"
    now: str
    until: str


@dataclass(frozen=True)
class Statements:
    """The named statements of one engine; every field is one statement."""

    dialect: Dialect
    # enqueue: its turn, the one read of a batch's stored ids, one row of the INSERT
    enqueue_turn: str | None
    enqueue_find: str
    enqueue_insert: str
    enqueue_insert_row: str
    # claim: the candidates in claim order, a lease that ran out for the last
    # time, a new lease
    claim_candidates: str
    claim_expired_to_dead: str
    claim_lease: str
    # the worker's path: leases up to :wanted messages and returns them, in one
    # statement (a candidate whose last lease ran out goes to dead instead)
    claim_messages: str
    # the fence and the ACK, with named parameters and the engine's clock
    ack: str
    # the same for every lease of a batch at once: it changes as many rows as
    # there are leases only if each is still its message's current lease
    ack_many: str
    # a lease given back, fenced like the ACK: ready again at its old place,
    # and the claim that took it does not count as an attempt
    release: str
    # one message, and one locked with its lease's claim token for the fenced check
    message: str
    lease_locked: str
    # the fence and the ACK in one statement
    complete_ack: str
    extend_lease: str
    fail_dead: str
    fail_retry: str
    redrive_state: str
    redrive_reset: str
    # reads
    status_counts: str
    messages_all: str
    messages_in_state: str
    # the first :limit of them, by event id
    messages_first: str
    messages_first_in_state: str
    # purge: only ready or dead messages, of one state
    purge_state: str
    oldest_ready: str
    dead_attempts: str
    done_summary: str
    done_percentile: str
    expired_and_pruned: str
    # prune
    prune_chunk: str
    prune_payload: str
    prune_unknown_age: str
    # named queues: one queue's settings, a new queue, every queue, the counts
    # of every queue by state
    queue_settings: str
    queue_insert: str
    queues_all: str
    queue_counts: str
    # receipts
    receipt_turn: str | None
    receipt_lookup: str
    receipt_insert: str
    receipt_all: str
    # the server's clock
    server_time: str | None


def _statements(dialect: Dialect) -> Statements:
    written = {
        "enqueue_find": "SELECT event_id, payload, payload_sha256 FROM messages "
        f"WHERE queue = ? AND {dialect.ids_in_list}",
        "enqueue_insert": "INSERT INTO messages"
        " (event_id, payload, state, available_at, enqueued_at, queue) VALUES ",
        "enqueue_insert_row": "(?, ?, 'ready', ?, ?, ?)",
        "claim_candidates": """
            SELECT event_id, attempts, generation, lease_until FROM messages
            WHERE queue = ? AND state IN ('ready', 'leased')
              AND available_at <= ?
              AND (state = 'ready' OR lease_until <= ?)
            ORDER BY available_at, event_id
            LIMIT ?"""
        + dialect.claim_lock,
        "claim_expired_to_dead": "UPDATE messages SET state = 'dead', "
        "lease_until = NULL, last_error = ?, last_detail = ?, "
        "expired_leases = expired_leases + 1 WHERE queue = ? AND event_id = ?",
        "claim_lease": """
            UPDATE messages
            SET state = 'leased', attempts = ?, generation = ?, lease_until = ?,
                expired_leases = expired_leases + ?, lease_token = ?
            WHERE queue = ? AND event_id = ?""",
        "message": f"SELECT {MESSAGE_COLUMNS} FROM messages "
        "WHERE queue = ? AND event_id = ?",
        "lease_locked": f"SELECT {MESSAGE_COLUMNS}, lease_token FROM messages "
        "WHERE queue = ? AND event_id = ?"
        + dialect.row_lock,
        "complete_ack": "UPDATE messages SET state = 'done', lease_until = NULL, "
        "done_at = ? WHERE queue = ? AND event_id = ? AND generation = ? "
        "AND lease_token = ? AND state = 'leased' AND lease_until > ?",
        "extend_lease": "UPDATE messages SET lease_until = ? "
        "WHERE queue = ? AND event_id = ? AND generation = ? "
        "AND lease_token = ? AND state = 'leased' AND lease_until > ?",
        "fail_dead": "UPDATE messages SET state = 'dead', lease_until = NULL, "
        "last_error = ?, last_detail = ? WHERE queue = ? AND event_id = ?",
        "fail_retry": """
            UPDATE messages
            SET state = 'ready', lease_until = NULL, available_at = ?,
                last_error = ?, last_detail = ?
            WHERE queue = ? AND event_id = ?""",
        "redrive_state": "SELECT state FROM messages WHERE queue = ? AND event_id = ?"
        + dialect.row_lock,
        "redrive_reset": "UPDATE messages SET state = 'ready', attempts = 0, "
        "available_at = ? WHERE queue = ? AND event_id = ?",
        "status_counts": "SELECT state, count(*) FROM messages WHERE queue = ? "
        "GROUP BY state",
        "messages_all": f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE queue = ? "
        "ORDER BY event_id",
        "messages_in_state": f"SELECT {MESSAGE_COLUMNS} FROM messages "
        "WHERE queue = ? AND state = ? ORDER BY event_id",
        "messages_first": f"SELECT {MESSAGE_COLUMNS} FROM messages "
        "WHERE queue = ? ORDER BY event_id LIMIT ?",
        "messages_first_in_state": f"SELECT {MESSAGE_COLUMNS} FROM messages "
        "WHERE queue = ? AND state = ? ORDER BY event_id LIMIT ?",
        "purge_state": "DELETE FROM messages WHERE queue = ? AND state = ? "
        "AND state IN ('ready', 'dead')",
        "oldest_ready": "SELECT min(enqueued_at) FROM messages "
        "WHERE queue = ? AND state = 'ready'",
        "dead_attempts": "SELECT attempts, count(*) FROM messages "
        "WHERE queue = ? AND state = 'dead' GROUP BY attempts ORDER BY attempts",
        "done_summary": "SELECT count(*), max(done_at - enqueued_at), "
        f"coalesce(sum(done_at - enqueued_at), 0) {_TIMED}",
        "done_percentile": f"SELECT done_at - enqueued_at AS seconds {_TIMED} "
        "ORDER BY seconds LIMIT 1 OFFSET ?",
        "expired_and_pruned": "SELECT coalesce(sum(expired_leases), 0), "
        "count(payload_sha256) FROM messages WHERE queue = ?",
        "prune_chunk": "SELECT event_id, payload FROM messages "
        "WHERE queue = ? AND state = 'done' AND payload_sha256 IS NULL "
        "AND done_at IS NOT NULL AND done_at <= ? "
        "ORDER BY event_id LIMIT ?",
        "prune_payload": "UPDATE messages SET payload = '{}', payload_sha256 = ? "
        "WHERE queue = ? AND event_id = ?",
        "prune_unknown_age": "SELECT count(*) FROM messages "
        "WHERE queue = ? AND state = 'done' AND done_at IS NULL",
        "queue_settings": f"SELECT {QUEUE_COLUMNS} FROM queues WHERE name = ?",
        "queue_insert": f"INSERT INTO queues ({QUEUE_COLUMNS}) VALUES (?, ?, ?, ?, ?)",
        "queues_all": f"SELECT {QUEUE_COLUMNS} FROM queues ORDER BY name",
        "queue_counts": "SELECT queue, state, count(*) FROM messages "
        "GROUP BY queue, state",
        "receipt_lookup": "SELECT tenant, operation, payload, effect FROM receipts "
        "WHERE tenant = ? AND operation = ?",
        "receipt_insert": "INSERT INTO receipts (tenant, operation, payload, effect) "
        "VALUES (?, ?, ?, ?)",
        "receipt_all": "SELECT tenant, operation, payload, effect FROM receipts "
        "ORDER BY tenant, operation",
    }
    # Named parameters (:name), for the statements whose time may be the engine's.
    spent = "attempts >= :max_attempts"
    # the messages a claim takes, in claim order
    chosen = f"""
              SELECT event_id FROM messages
              WHERE queue = :queue AND state IN ('ready', 'leased')
                AND available_at <= {dialect.now}
                AND (state = 'ready' OR lease_until <= {dialect.now})
              ORDER BY available_at, event_id
              LIMIT :wanted{dialect.claim_lock}"""
    named = {
        "claim_messages": dialect.claim_with.format(chosen) + f"""
            UPDATE messages SET
              state = CASE WHEN {spent} THEN 'dead' ELSE 'leased' END,
              attempts = CASE WHEN {spent} THEN attempts ELSE attempts + 1 END,
              generation = CASE WHEN {spent} THEN generation ELSE generation + 1 END,
              lease_until = CASE WHEN {spent} THEN NULL ELSE {dialect.until} END,
              lease_token = CASE WHEN {spent} THEN lease_token ELSE :token END,
              last_error = CASE WHEN {spent} THEN :lease_expired ELSE last_error END,
              last_detail = CASE WHEN {spent}
                THEN 'the lease of claim ' || CAST(attempts AS TEXT)
                     || ' of ' || CAST(:max_attempts AS TEXT) || ' ended at '
                     || coalesce(CAST(lease_until AS TEXT), 'None')
                     || ' with no completion'
                ELSE last_detail END,
              expired_leases = expired_leases
                + CASE WHEN {spent} OR state = 'leased' THEN 1 ELSE 0 END
            WHERE queue = :queue AND {dialect.ids_chosen.format(chosen)}
            RETURNING {_RETURNED_COLUMNS}""",
        "ack": "UPDATE messages SET state = 'done', lease_until = NULL, "
        f"done_at = {dialect.now} WHERE queue = :queue AND event_id = :event_id "
        "AND generation = :generation AND lease_token = :token "
        f"AND state = 'leased' AND lease_until > {dialect.now}",
        "release": "UPDATE messages SET state = 'ready', lease_until = NULL, "
        "attempts = attempts - 1 WHERE queue = :queue AND event_id = :event_id "
        "AND generation = :generation AND lease_token = :token "
        f"AND state = 'leased' AND lease_until > {dialect.now}",
        "ack_many": "UPDATE messages SET state = 'done', lease_until = NULL, "
        f"done_at = {dialect.now} WHERE queue = :queue AND {dialect.leases_in_list} "
        f"AND state = 'leased' AND lease_until > {dialect.now}",
    }
    for name, sql in written.items():
        # No statement here holds a literal '?' or '%', so the driver's
        # placeholder can be put in by a plain replacement.
        assert "%" not in sql, name
        written[name] = sql.replace("?", dialect.placeholder)
    for name, sql in named.items():
        assert "%" not in sql and "?" not in sql, name
        written[name] = (
            _PARAMETER.sub(r"%(\1)s", sql) if dialect.placeholder == "%s" else sql
        )
    engine_own = ("enqueue_turn", "receipt_turn", "server_time")

    def own(sql: str | None) -> str | None:
        return None if sql is None else sql.replace("?", dialect.placeholder)

    statements = Statements(
        dialect=dialect,
        enqueue_turn=own(dialect.enqueue_turn),
        receipt_turn=own(dialect.receipt_turn),
        server_time=own(dialect.server_time),
        **written,
    )
    assert {f.name for f in fields(statements)} == {"dialect", *written, *engine_own}
    return statements


# a named parameter, :name (never inside the statements' string literals)
_PARAMETER: Final = re.compile(r"(?<![:\w]):([a-z_]+)")


SQLITE: Final = _statements(
    Dialect(
        name="sqlite",
        # one writer at a time: what a write transaction reads cannot change
        claim_lock="",
        row_lock="",
        ids_in_list="event_id IN (SELECT value FROM json_each(?))",
        claim_with="",
        ids_chosen="event_id IN ({})",
        enqueue_turn=None,
        receipt_turn=None,
        server_time=None,
        placeholder="?",
        id_list=json.dumps,
        leases_in_list="(event_id, generation, lease_token) IN"
        " (SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'),"
        " json_extract(value, '$[2]') FROM json_each(:leases))",
        now=":now",
        until=":until",
    )
)

# On PostgreSQL a claim takes the rows it leases and skips rows another
# transaction holds; a completion, failure or redrive locks its message's row
# before checking it. Enqueues take turns on an advisory lock (its key is the
# application id plus one), so that a duplicate or a conflict is decided as on
# SQLite; receipts of one key take turns on two hashed keys, a key space apart.
POSTGRESQL: Final = _statements(
    Dialect(
        name="postgresql",
        claim_lock=" FOR UPDATE SKIP LOCKED",
        row_lock=" FOR UPDATE",
        ids_in_list="event_id = ANY(?)",
        # a locking WITH runs once (an IN subquery may be rescanned by a nested
        # loop; ARRAY(subquery) runs once too, but cost a third of a
        # millisecond more per claim here)
        claim_with="WITH chosen AS ({})",
        ids_chosen="event_id IN (SELECT event_id FROM chosen)",
        enqueue_turn="SELECT pg_advisory_xact_lock(1363373939)",
        receipt_turn="SELECT pg_advisory_xact_lock(hashtext(?), hashtext(?))",
        server_time="SELECT extract(epoch FROM clock_timestamp())::float8",
        placeholder="%s",
        id_list=list,
        leases_in_list="(event_id, generation, lease_token) IN (SELECT lease ->> 0,"
        " CAST(lease ->> 1 AS BIGINT), CAST(lease ->> 2 AS BIGINT)"
        " FROM jsonb_array_elements(CAST(:leases AS JSONB)) AS lease)",
        # statement_timestamp(): one reading for the whole statement
        now="coalesce(CAST(:now AS BIGINT),"
        " CAST(floor(extract(epoch FROM statement_timestamp())) AS BIGINT))",
        until="coalesce(CAST(:until AS BIGINT),"
        " CAST(ceil(extract(epoch FROM statement_timestamp())) AS BIGINT)"
        " + :lease_seconds)",
    )
)
