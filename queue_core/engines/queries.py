"""The default ``Operations``: each operation one named statement of the engine's own ``.sql`` file.

An engine keeps its statements in a ``.sql`` file of named queries
(``-- name: fenced_move``, as sqlc and aiosql write them), in its driver's
own parameter style, loaded once and run as written: nothing is assembled or
rewritten at run time. ``NamedQueries`` runs them: one method per operation
(``operations.Operations``), with typed parameters and results, so that no
protocol code knows a statement's text or the order of its parameters. Both
engines name their statements, parameters and result columns alike; a row is
read by its columns' names (``AS pruned``), found once per statement, never
by position. Where an engine needs no statement (SQLite takes no turns: its
write lock decides), it has none, and the operation does nothing. An engine
that does an operation otherwise overrides its method.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from importlib import resources
from operator import itemgetter
from typing import Any, Final

from ..values import Lease, Message, WorkCounters
from .base import Connection, Rows
from .operations import ReceiptRow, SettingsRow, Times

# One statement starts at its name line; the comment lines right below it say what it does.
_NAME: Final = re.compile(r"^-- name: ([a-z_]+)[ \t]*$", re.M)

# The columns a statement that returns messages names, a Message's fields (the
# pruned flag is the payload's hash, or whether there is one: bool reads it).
MESSAGE_COLUMNS: Final = tuple(field.name for field in fields(Message))
SETTINGS_COLUMNS: Final = (
    "name",
    "id_pattern",
    "max_attempts",
    "lease_seconds",
    "max_payload_bytes",
    "backoff_base_seconds",
    "backoff_max_seconds",
    "backoff_jitter",
)
RECEIPT_COLUMNS: Final = ("scope", "tenant", "operation", "payload", "effect", "effect_queue")
COUNTER_COLUMNS: Final = ("processed", "retried", "dead", "expired_leases")
_PRUNED: Final = MESSAGE_COLUMNS.index("pruned")
_UNKNOWN: Final[Any] = object()  # a statement whose columns were not looked at yet


@dataclass(frozen=True)
class Query:
    """One named statement: what its comment says it does, and its text."""

    name: str
    doc: str
    sql: str


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


def message_of(values: Sequence[Any]) -> Message:
    """A ``Message`` from its columns' values, in the order of ``MESSAGE_COLUMNS``."""
    row = list(values[: len(MESSAGE_COLUMNS)])
    row[_PRUNED] = bool(row[_PRUNED])  # the hash itself, or the comparison
    return Message(*row)


class NamedQueries:
    """The protocol's operations on one engine's named statements (``Operations``)."""

    def __init__(self, queries: Mapping[str, Query]) -> None:
        self.queries = dict(queries)
        self._q = {name: query.sql for name, query in queries.items()}
        # (statement, columns) -> what picks those columns from its rows, by name
        self._pickers: dict[tuple[str, tuple[str, ...]], Callable[[Any], Any] | None] = {}

    def sql(self, name: str) -> str:
        """The text of statement ``name`` (for pages and tests)."""
        return self._q[name]

    # --------------------------------------------------- rows, by name

    def _picker(
        self, name: str, rows: Rows, columns: tuple[str, ...]
    ) -> Callable[[Any], Any] | None:
        """What takes ``columns`` (a tuple of them) out of a row of statement ``name``.

        Found by the columns' names in the statement's description, once;
        None when the row is already those columns in that order (the hot
        path: nothing to copy).
        """
        key = (name, columns)
        try:
            return self._pickers[key]
        except KeyError:
            pass
        names = [column[0] for column in rows.description]
        absent = [column for column in columns if column not in names]
        if absent:
            raise ValueError(f"statement {name} returns no column {', '.join(absent)}")
        picker: Callable[[Any], Any] | None
        if names == list(columns):
            picker = None
        elif len(columns) == 1:
            at = names.index(columns[0])
            picker = lambda row: (row[at],)  # noqa: E731  (itemgetter of one is not a tuple)
        else:
            picker = itemgetter(*(names.index(column) for column in columns))
        self._pickers[key] = picker
        return picker

    def _all(self, name: str, params: Any, columns: tuple[str, ...], conn: Connection) -> list[Any]:
        """Every row of statement ``name``, each as the tuple of ``columns``."""
        rows = conn.execute(self._q[name], params)
        fetched = rows.fetchall()
        if not fetched:
            return []
        pick = self._pickers.get((name, columns), _UNKNOWN)
        if pick is _UNKNOWN:
            pick = self._picker(name, rows, columns)
        return fetched if pick is None else [pick(row) for row in fetched]

    def _one(self, name: str, params: Any, columns: tuple[str, ...], conn: Connection) -> Any:
        """The first row of statement ``name`` as the tuple of ``columns``, or None."""
        rows = conn.execute(self._q[name], params)
        row = rows.fetchone()
        if row is None:
            return None
        pick = self._picker(name, rows, columns)
        return row if pick is None else pick(row)

    def _messages(self, name: str, params: Any, conn: Connection) -> list[Message]:
        return [message_of(values) for values in self._all(name, params, MESSAGE_COLUMNS, conn)]

    # ------------------------------------------------------------- enqueue

    def enqueue_turn(self, conn: Connection) -> None:
        """Make this enqueue wait for the others (where no write lock does it)."""
        turn = self._q.get("enqueue_turn")
        if turn is not None:
            conn.execute(turn)

    def stored(self, conn: Connection, queue: str, ids: list[str]) -> list[tuple[str, str, str | None]]:
        """Of ``ids``, the stored events: (event_id, payload, hash if pruned)."""
        params = {"queue": queue, "ids": json.dumps(ids)}
        return self._all("enqueue_find", params, ("event_id", "payload", "payload_sha256"), conn)

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
        return self._messages("claim_messages", {
            **times, "queue": queue, "wanted": wanted, "max_attempts": max_attempts,
            "token": token, "lease_expired": lease_expired,
        }, conn)

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

    def fail(
        self, conn: Connection, queue: str, lease: Lease, move: str, times: Times, *,
        code: str, detail: str | None, available_at: int | None,
    ) -> bool:
        """The fenced failure of ``lease``: ``move`` "retry" (ready at ``available_at``) or "dead",
        recording ``code`` and ``detail``; True if the lease was current."""
        return self._fenced_move(
            conn, queue, [lease], move, times, code=code, detail=detail, available_at=available_at
        ) == 1

    def _fenced_move(
        self, conn: Connection, queue: str, leases: Sequence[Lease], move: str, times: Times,
        code: str | None = None, detail: str | None = None, available_at: int | None = None,
    ) -> int:
        # the one statement that writes the fence (fenced_move): how many leases moved
        triples = [[lease.event_id, lease.generation, lease.token] for lease in leases]
        return conn.execute(self._q["fenced_move"], {
            "now": times.get("now"), "until": times.get("until"), "queue": queue,
            "leases": json.dumps(triples), "move": move, "code": code, "detail": detail,
            "available_at": available_at,
        }).rowcount

    def lease_locked(self, conn: Connection, queue: str, event_id: str) -> tuple[Message, int] | None:
        """The message (its row locked where rows are) and its lease's claim token."""
        params = {"queue": queue, "event_id": event_id}
        row = self._one("lease_locked", params, (*MESSAGE_COLUMNS, "lease_token"), conn)
        return None if row is None else (message_of(row), row[-1])

    # ------------------------------------------------------------- redrive

    def state(self, conn: Connection, queue: str, event_id: str) -> str | None:
        """The message's state (its row locked where rows are), or None."""
        row = self._one("redrive_state", {"queue": queue, "event_id": event_id}, ("state",), conn)
        return None if row is None else str(row[0])

    def redrive(self, conn: Connection, queue: str, event_id: str, now: int) -> None:
        """A dead message's new cycle: attempts from zero, available at ``now``."""
        conn.execute(self._q["redrive_reset"], {"queue": queue, "event_id": event_id, "now": now})

    def redrive_dead(
        self, conn: Connection, queue: str, *, code: str | None, after: str, limit: int, now: int
    ) -> list[str]:
        """Up to ``limit`` dead messages after ``after`` (of ``code``) redriven; their ids."""
        params = {"queue": queue, "code": code, "after": after, "limit": limit, "now": now}
        return [str(event_id) for (event_id,) in self._all("redrive_dead", params, ("event_id",), conn)]

    # --------------------------------------------------------------- reads

    def message(self, conn: Connection, queue: str, event_id: str) -> Message | None:
        """One message, or None."""
        row = self._one("message", {"queue": queue, "event_id": event_id}, MESSAGE_COLUMNS, conn)
        return None if row is None else message_of(row)

    def messages(self, conn: Connection, queue: str, state: str | None, limit: int | None) -> list[Message]:
        """The messages (of ``state``; the first ``limit``), by event id."""
        params = {"queue": queue, "state": state, "limit": limit}
        if limit is None:
            name = "messages_all" if state is None else "messages_in_state"
        else:
            name = "messages_first" if state is None else "messages_first_in_state"
        return self._messages(name, params, conn)

    def counts(self, conn: Connection, queue: str) -> dict[str, int]:
        """How many messages of each stored state."""
        rows = self._all("status_counts", {"queue": queue}, ("state", "count"), conn)
        return {str(state): int(count) for state, count in rows}

    def oldest_ready(self, conn: Connection, queue: str) -> int | None:
        """When the oldest ready message was enqueued."""
        (value,) = self._one("oldest_ready", {"queue": queue}, ("oldest",), conn)
        return None if value is None else int(value)

    def dead_attempts(self, conn: Connection, queue: str) -> dict[int, int]:
        """How many dead messages died after each number of attempts."""
        rows = self._all("dead_attempts", {"queue": queue}, ("attempts", "count"), conn)
        return {int(attempts): int(count) for attempts, count in rows}

    def done_summary(self, conn: Connection, queue: str) -> tuple[int, int | None, int]:
        """The timed done messages: how many, the longest and the total enqueue-to-done seconds."""
        columns = ("done", "longest", "total")
        done, longest, total = self._one("done_summary", {"queue": queue}, columns, conn)
        return int(done), None if longest is None else int(longest), int(total)

    def done_seconds_at(self, conn: Connection, queue: str, offset: int) -> int:
        """The enqueue-to-done seconds of the timed done message at ``offset``, shortest first."""
        params = {"queue": queue, "offset": offset}
        (seconds,) = self._one("done_percentile", params, ("seconds",), conn)
        return int(seconds)

    def expired_and_pruned(self, conn: Connection, queue: str) -> tuple[int, int]:
        """Leases that ran out, and payloads pruned, in all."""
        columns = ("expired", "pruned")
        expired, pruned = self._one("expired_and_pruned", {"queue": queue}, columns, conn)
        return int(expired), int(pruned)

    def work_counters(self, conn: Connection, queue: str) -> WorkCounters:
        """The queue's counters of work done, as they stand (they survive restarts)."""
        row = self._one("work_counters", {"queue": queue}, COUNTER_COLUMNS, conn)
        return WorkCounters(*(int(value) for value in row))

    def purge(self, conn: Connection, queue: str, state: str) -> int:
        """Remove every message of ``state`` (ready or dead only); how many."""
        return max(0, conn.execute(self._q["purge_state"], {"queue": queue, "state": state}).rowcount)

    # --------------------------------------------------------------- prune

    def prunable(self, conn: Connection, queue: str, cutoff: int, limit: int) -> list[tuple[str, str]]:
        """Up to ``limit`` done messages ACKed by ``cutoff`` with their payloads."""
        params = {"queue": queue, "cutoff": cutoff, "limit": limit}
        return self._all("prune_chunk", params, ("event_id", "payload"), conn)

    def prune(self, conn: Connection, queue: str, digests: list[tuple[str, str]]) -> None:
        """Replace each (event_id, digest)'s payload by its hash."""
        conn.executemany(self._q["prune_payload"], [
            {"queue": queue, "event_id": event_id, "digest": digest} for event_id, digest in digests
        ])

    def unknown_age(self, conn: Connection, queue: str) -> int:
        """Done messages with no done time (from before schema version 3)."""
        (count,) = self._one("prune_unknown_age", {"queue": queue}, ("count",), conn)
        return int(count)

    # -------------------------------------------------------- named queues

    def queue_settings(self, conn: Connection, name: str) -> SettingsRow | None:
        """Queue ``name``'s settings row, or None."""
        row = self._one("queue_settings", {"name": name}, SETTINGS_COLUMNS, conn)
        return None if row is None else _settings_row(row)

    def create_queue(self, conn: Connection, settings: Mapping[str, object]) -> None:
        """A new queue's row (its name and settings)."""
        conn.execute(self._q["queue_insert"], dict(settings))

    def queues(self, conn: Connection) -> list[SettingsRow]:
        """Every queue's settings row, by name."""
        return [_settings_row(row) for row in self._all("queues_all", (), SETTINGS_COLUMNS, conn)]

    def queue_counts(self, conn: Connection) -> dict[str, dict[str, int]]:
        """Every queue's counts by state."""
        counts: dict[str, dict[str, int]] = {}
        for queue, state, count in self._all("queue_counts", (), ("queue", "state", "count"), conn):
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
        params = {"scope": scope, "tenant": tenant, "operation": operation}
        row = self._one("receipt_lookup", params, RECEIPT_COLUMNS, conn)
        return None if row is None else _receipt_row(row)

    def add_receipt(self, conn: Connection, receipt: ReceiptRow) -> None:
        """Store a receipt: (scope, tenant, operation, payload, effect, effect_queue)."""
        conn.execute(self._q["receipt_insert"], dict(zip(RECEIPT_COLUMNS, receipt)))

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
        return [_receipt_row(row) for row in self._all("receipt_all", (), RECEIPT_COLUMNS, conn)]

    # ------------------------------------------------------------- catalog

    def server_time(self, conn: Connection) -> float:
        """The database server's clock, in seconds with a fraction."""
        (seconds,) = self._one("server_time", (), ("seconds",), conn)
        return float(seconds)

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
        row = self._one("line_version", {"line": line}, ("version",), conn)
        return 0 if row is None else int(row[0])

    def set_line_version(self, conn: Connection, line: str, version: int) -> None:
        """Record migration line ``line`` at ``version``."""
        conn.execute(self._q["line_version_set"], {"line": line, "version": version})


def _settings_row(row: Sequence[Any]) -> SettingsRow:
    return (row[0], row[1], row[2], row[3], row[4], row[5], row[6], float(row[7]))


def _receipt_row(row: Sequence[Any]) -> ReceiptRow:
    return (row[0], row[1], row[2], row[3], row[4], None if row[5] is None else str(row[5]))
