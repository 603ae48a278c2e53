"""The protocol's operations on one engine, each one named statement of that engine's.

An engine keeps its statements in a ``.sql`` file of named queries
(``-- name: ack``, as sqlc and aiosql write them), in its driver's own
parameter style, loaded once and run as written: nothing is assembled or
rewritten at run time. ``Operations`` is what the protocol calls: one method
per operation, with typed parameters and results, so that no protocol code
knows a statement's text or the order of its parameters. Both engines name
their statements and parameters alike; where an engine needs no statement
(SQLite takes no turns: its write lock decides), it has none, and the
operation does nothing.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any, Final

from ..values import Lease, Message, WorkCounters
from . import Connection

# One statement starts at its name line; the comment lines right below it say what it does.
_NAME: Final = re.compile(r"^-- name: ([a-z_]+)[ \t]*$", re.M)

# The columns of a Message, in its order (every statement that returns messages
# selects these: the pruned flag after expired_leases, then queue and priority).
MESSAGE_FIELDS: Final = 15
_PRUNED: Final = 12

Times = Mapping[str, "int | None"]  # now, until, lease_seconds: Tx.times()
# a queue's row: name, id pattern, attempts, lease, payload limit, then its retry
# policy (backoff base, backoff cap, jitter), the order of QueueSettings
SettingsRow = tuple[str, str, int, int, int, int, int, float]


@dataclass(frozen=True)
class Query:
    """One named statement: what its comment says it does, and its text."""

    name: str
    doc: str
    sql: str


# A receipt as stored: scope, tenant, operation, payload, effect, effect_queue.
ReceiptRow = tuple[str, str, str, str, str, "str | None"]


def _receipt_row(row: Any) -> ReceiptRow:
    return (row[0], row[1], row[2], row[3], row[4], None if row[5] is None else str(row[5]))


def load(package: str, filename: str) -> dict[str, Query]:
    """The named statements of one ``.sql`` file of ``package``, by name."""
    text = resources.files(package).joinpath(filename).read_text(encoding="utf-8")
    found: dict[str, Query] = {}
    parts = _NAME.split(text)
    for name, body in zip(parts[1::2], parts[2::2]):
        lines = body.strip("\n").splitlines()
        doc = [line[2:].strip() for line in _leading_comments(lines)]
        sql = "\n".join(lines[len(doc):]).strip().rstrip(";").strip()
        if name in found:
            raise ValueError(f"{filename}: the statement {name} is named twice")
        if not sql:
            raise ValueError(f"{filename}: the statement {name} is empty")
        found[name] = Query(name, " ".join(doc), sql)
    return found


def _leading_comments(lines: list[str]) -> list[str]:
    taken = []
    for line in lines:
        if not line.startswith("--"):
            break
        taken.append(line)
    return taken


def _settings_row(row: Sequence[Any]) -> SettingsRow:
    return (row[0], row[1], row[2], row[3], row[4], row[5], row[6], float(row[7]))


def message_of(row: Sequence[Any]) -> Message:
    """A ``Message`` from a row of the message columns.

    The pruned column is true when the payload's hash is stored: whether the
    statement returns the comparison or the hash itself, ``bool`` reads it.
    """
    values = list(row[:MESSAGE_FIELDS])
    values[_PRUNED] = bool(values[_PRUNED])
    return Message(*values)


class Operations:
    """The protocol's operations on one engine's named statements."""

    def __init__(self, queries: Mapping[str, Query]) -> None:
        self.queries = dict(queries)
        self._q = {name: query.sql for name, query in queries.items()}

    def sql(self, name: str) -> str:
        """The text of statement ``name`` (for pages and tests)."""
        return self._q[name]

    # ------------------------------------------------------------- enqueue

    def enqueue_turn(self, conn: Connection) -> None:
        """Make this enqueue wait for the others (where no write lock does it)."""
        turn = self._q.get("enqueue_turn")
        if turn is not None:
            conn.execute(turn)

    def stored(self, conn: Connection, queue: str, ids: list[str]) -> list[tuple[str, str, str | None]]:
        """Of ``ids``, the stored events: (event_id, payload, hash if pruned)."""
        rows = conn.execute(self._q["enqueue_find"], {"queue": queue, "ids": json.dumps(ids)})
        return [(row[0], row[1], row[2]) for row in rows.fetchall()]

    def insert(
        self, conn: Connection, queue: str, events: list[tuple[str, str]], *, now: int, available_at: int,
        priority: int = 0,
    ) -> None:
        """Store new events (event_id, canonical payload), ready at ``available_at``, at ``priority``."""
        conn.execute(self._q["enqueue_insert"], {
            "queue": queue, "events": json.dumps(events), "now": now, "available_at": available_at,
            "priority": priority,
        })

    # --------------------------------------------------------------- claim

    def claim_messages(
        self, conn: Connection, queue: str, wanted: int, *, max_attempts: int, token: int,
        times: Times, lease_expired: str,
    ) -> list[Message]:
        """Lease up to ``wanted`` messages in one statement; the leased and the newly dead."""
        rows = conn.execute(self._q["claim_messages"], {
            **times, "queue": queue, "wanted": wanted, "max_attempts": max_attempts,
            "token": token, "lease_expired": lease_expired,
        })
        return [message_of(row) for row in rows.fetchall()]

    # --------------------------------------------------------------- fence

    def ack(self, conn: Connection, queue: str, leases: Sequence[Lease], times: Times) -> int:
        """The fenced ACK of ``leases``: how many of their messages it marked done."""
        return self._fenced_move(conn, queue, leases, "ack", times)

    def release(self, conn: Connection, queue: str, lease: Lease, times: Times) -> bool:
        """The fenced release; True if the message is ready again."""
        return self._fenced_move(conn, queue, [lease], "release", times) == 1

    def extend(self, conn: Connection, queue: str, lease: Lease, *, now: int, until: int) -> bool:
        """The fenced extension to ``until``; True if the lease was current."""
        return self._fenced_move(conn, queue, [lease], "extend", {"now": now, "until": until}) == 1

    def _fenced_move(
        self, conn: Connection, queue: str, leases: Sequence[Lease], move: str, times: Times
    ) -> int:
        # the one statement that writes the fence (fenced_move): how many leases moved
        triples = [[lease.event_id, lease.generation, lease.token] for lease in leases]
        return conn.execute(self._q["fenced_move"], {
            "now": times.get("now"), "until": times.get("until"), "queue": queue,
            "leases": json.dumps(triples), "move": move,
        }).rowcount

    def lease_locked(self, conn: Connection, queue: str, event_id: str) -> tuple[Message, int] | None:
        """The message (its row locked where rows are) and its lease's claim token."""
        row = conn.execute(self._q["lease_locked"], {"queue": queue, "event_id": event_id}).fetchone()
        return None if row is None else (message_of(row), row[MESSAGE_FIELDS])

    # ------------------------------------------------------- fail, redrive

    def fail_dead(self, conn: Connection, queue: str, event_id: str, code: str, detail: str | None) -> None:
        """The message is dead, with ``code`` and ``detail``."""
        conn.execute(self._q["fail_dead"], {
            "queue": queue, "event_id": event_id, "code": code, "detail": detail,
        })

    def fail_retry(
        self, conn: Connection, queue: str, event_id: str, code: str, detail: str | None, *, available_at: int
    ) -> None:
        """The message is ready again at ``available_at``, with ``code`` and ``detail``."""
        conn.execute(self._q["fail_retry"], {
            "queue": queue, "event_id": event_id, "code": code, "detail": detail,
            "available_at": available_at,
        })

    def state(self, conn: Connection, queue: str, event_id: str) -> str | None:
        """The message's state (its row locked where rows are), or None."""
        row = conn.execute(self._q["redrive_state"], {"queue": queue, "event_id": event_id}).fetchone()
        return None if row is None else str(row[0])

    def redrive(self, conn: Connection, queue: str, event_id: str, now: int) -> None:
        """A dead message's new cycle: attempts from zero, available at ``now``."""
        conn.execute(self._q["redrive_reset"], {"queue": queue, "event_id": event_id, "now": now})

    def redrive_dead(
        self, conn: Connection, queue: str, *, code: str | None, after: str, limit: int, now: int
    ) -> list[str]:
        """Up to ``limit`` dead messages after ``after`` (of ``code``) redriven; their ids."""
        rows = conn.execute(self._q["redrive_dead"], {
            "queue": queue, "code": code, "after": after, "limit": limit, "now": now,
        })
        return [str(row[0]) for row in rows.fetchall()]

    # --------------------------------------------------------------- reads

    def message(self, conn: Connection, queue: str, event_id: str) -> Message | None:
        """One message, or None."""
        row = conn.execute(self._q["message"], {"queue": queue, "event_id": event_id}).fetchone()
        return None if row is None else message_of(row)

    def messages(self, conn: Connection, queue: str, state: str | None, limit: int | None) -> list[Message]:
        """The messages (of ``state``; the first ``limit``), by event id."""
        params = {"queue": queue, "state": state, "limit": limit}
        if limit is None:
            name = "messages_all" if state is None else "messages_in_state"
        else:
            name = "messages_first" if state is None else "messages_first_in_state"
        return [message_of(row) for row in conn.execute(self._q[name], params).fetchall()]

    def counts(self, conn: Connection, queue: str) -> dict[str, int]:
        """How many messages of each stored state."""
        rows = conn.execute(self._q["status_counts"], {"queue": queue}).fetchall()
        return {str(state): int(count) for state, count in rows}

    def oldest_ready(self, conn: Connection, queue: str) -> int | None:
        """When the oldest ready message was enqueued."""
        value = conn.execute(self._q["oldest_ready"], {"queue": queue}).fetchone()[0]
        return None if value is None else int(value)

    def dead_attempts(self, conn: Connection, queue: str) -> dict[int, int]:
        """How many dead messages died after each number of attempts."""
        rows = conn.execute(self._q["dead_attempts"], {"queue": queue}).fetchall()
        return {int(attempts): int(count) for attempts, count in rows}

    def done_summary(self, conn: Connection, queue: str) -> tuple[int, int | None, int]:
        """The timed done messages: how many, the longest and the total enqueue-to-done seconds."""
        done, longest, total = conn.execute(self._q["done_summary"], {"queue": queue}).fetchone()
        return int(done), None if longest is None else int(longest), int(total)

    def done_seconds_at(self, conn: Connection, queue: str, offset: int) -> int:
        """The enqueue-to-done seconds of the timed done message at ``offset``, shortest first."""
        row = conn.execute(self._q["done_percentile"], {"queue": queue, "offset": offset}).fetchone()
        return int(row[0])

    def expired_and_pruned(self, conn: Connection, queue: str) -> tuple[int, int]:
        """Leases that ran out, and payloads pruned, in all."""
        expired, pruned = conn.execute(self._q["expired_and_pruned"], {"queue": queue}).fetchone()
        return int(expired), int(pruned)

    def work_counters(self, conn: Connection, queue: str) -> WorkCounters:
        """The queue's counters of work done, as they stand (they survive restarts)."""
        row = conn.execute(self._q["work_counters"], {"queue": queue}).fetchone()
        return WorkCounters(*(int(value) for value in row))

    def purge(self, conn: Connection, queue: str, state: str) -> int:
        """Remove every message of ``state`` (ready or dead only); how many."""
        return max(0, conn.execute(self._q["purge_state"], {"queue": queue, "state": state}).rowcount)

    # --------------------------------------------------------------- prune

    def prunable(self, conn: Connection, queue: str, cutoff: int, limit: int) -> list[tuple[str, str]]:
        """Up to ``limit`` done messages ACKed by ``cutoff`` with their payloads."""
        rows = conn.execute(self._q["prune_chunk"], {"queue": queue, "cutoff": cutoff, "limit": limit})
        return [(row[0], row[1]) for row in rows.fetchall()]

    def prune(self, conn: Connection, queue: str, digests: list[tuple[str, str]]) -> None:
        """Replace each (event_id, digest)'s payload by its hash."""
        conn.executemany(self._q["prune_payload"], [
            {"queue": queue, "event_id": event_id, "digest": digest} for event_id, digest in digests
        ])

    def unknown_age(self, conn: Connection, queue: str) -> int:
        """Done messages with no done time (from before schema version 3)."""
        return int(conn.execute(self._q["prune_unknown_age"], {"queue": queue}).fetchone()[0])

    # -------------------------------------------------------- named queues

    def queue_settings(self, conn: Connection, name: str) -> SettingsRow | None:
        """Queue ``name``'s settings row, or None."""
        row = conn.execute(self._q["queue_settings"], {"name": name}).fetchone()
        return None if row is None else _settings_row(row)

    def create_queue(self, conn: Connection, settings: Mapping[str, object]) -> None:
        """A new queue's row (its name and settings)."""
        conn.execute(self._q["queue_insert"], dict(settings))

    def queues(self, conn: Connection) -> list[SettingsRow]:
        """Every queue's settings row, by name."""
        rows = conn.execute(self._q["queues_all"]).fetchall()
        return [_settings_row(row) for row in rows]

    def queue_counts(self, conn: Connection) -> dict[str, dict[str, int]]:
        """Every queue's counts by state."""
        counts: dict[str, dict[str, int]] = {}
        for queue, state, count in conn.execute(self._q["queue_counts"]).fetchall():
            counts.setdefault(queue, {})[state] = int(count)
        return counts

    # ------------------------------------------------------------ receipts

    def receipt_turn(self, conn: Connection, scope: str, tenant: str, operation: str) -> None:
        """Make this key's writers take turns (where no write lock does it)."""
        turn = self._q.get("receipt_turn")
        if turn is not None:
            conn.execute(turn, {"scope": scope, "tenant": tenant, "operation": operation})

    def receipt(self, conn: Connection, scope: str, tenant: str, operation: str) -> ReceiptRow | None:
        """The receipt of (``scope``, ``tenant``, ``operation``), or None."""
        row = conn.execute(self._q["receipt_lookup"], {
            "scope": scope, "tenant": tenant, "operation": operation,
        }).fetchone()
        return None if row is None else _receipt_row(row)

    def add_receipt(self, conn: Connection, receipt: ReceiptRow) -> None:
        """Store a receipt: (scope, tenant, operation, payload, effect, effect_queue)."""
        scope, tenant, operation, payload, effect, effect_queue = receipt
        conn.execute(self._q["receipt_insert"], {
            "scope": scope, "tenant": tenant, "operation": operation, "payload": payload,
            "effect": effect, "effect_queue": effect_queue,
        })

    def create_receipts(self, conn: Connection) -> None:
        """The receipts table, in a database that is not a queue's (SQLite's only).

        A table from before scopes moves to the scope ``default``.
        """
        conn.execute(self._q["receipts_create"])
        if conn.execute(self._q["receipts_unscoped"]).fetchone() is not None:
            conn.execute(self._q["receipts_rescope"])
            conn.execute(self._q["receipts_create"])
            conn.execute(self._q["receipts_rescope_copy"])
            conn.execute(self._q["receipts_rescope_drop"])

    def receipts(self, conn: Connection) -> list[ReceiptRow]:
        """Every receipt, by key."""
        return [_receipt_row(r) for r in conn.execute(self._q["receipt_all"]).fetchall()]

    # ------------------------------------------------------------- catalog

    def server_time(self, conn: Connection) -> float:
        """The database server's clock, in seconds with a fraction."""
        return float(conn.execute(self._q["server_time"]).fetchone()[0])

    def table_exists(self, conn: Connection, name: str) -> bool:
        """Whether table ``name`` exists; reading it writes nothing."""
        return conn.execute(self._q["table_exists"], {"name": name}).fetchone() is not None

    # ----------------------------------------------------- migration lines

    def line_turn(self, conn: Connection) -> None:
        """Make installs of migration lines take turns (where no write lock does it)."""
        turn = self._q.get("line_turn")
        if turn is not None:
            conn.execute(turn)

    def line_version(self, conn: Connection, line: str) -> int:
        """The recorded version of migration line ``line`` (0: never installed)."""
        row = conn.execute(self._q["line_version"], {"line": line}).fetchone()
        return 0 if row is None else int(row[0])

    def set_line_version(self, conn: Connection, line: str, version: int) -> None:
        """Record migration line ``line`` at ``version``."""
        conn.execute(self._q["line_version_set"], {"line": line, "version": version})
