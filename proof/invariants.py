"""What must always hold in a queue file: read it read-only, list every violated invariant.

``check_invariants(db, ...)`` reads a queue file and returns the list of
violated invariants (empty: all hold). It opens the file **read-only**
(``mode=ro``) and uses plain SQL on purpose: it inspects the result of the
protocol, it does not drive it, so it must not share the code it judges
(``Store``) and must not be able to change what it looks at. ``db`` may also
be a ``postgresql://`` URL: the database is then read with psycopg in one
``REPEATABLE READ READ ONLY`` transaction (see ``read_file``).

``finish_queue(db, now)`` is the other half of every experiment: a fresh
worker of the reference application (``queue_core.ledger``) that finishes the
queue, letting model time pass, so that the checker can then demand that
nothing is left behind.
"""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from queue_core import ledger
from queue_core.engines import is_postgres_url
from queue_core.clock import ModelClock
from queue_core.queues import DEFAULT_QUEUE
from queue_core.receipts import ReceiptHandler
from queue_core.store import LEASE_EXPIRED, MAX_ATTEMPTS, MessageHandler, Store
from queue_core.values import Message
from queue_core.worker import work

if TYPE_CHECKING:
    import psycopg
    import psycopg.sql

Payload = Mapping[str, Any]
EffectRow = tuple[str, str, int]  # event_id, category, amount_cents
ReceiptRow = tuple[str, str, str, str]  # tenant, operation, payload, effect

__all__ = [
    "EffectRow",
    "FileState",
    "Payload",
    "ReceiptRow",
    "check_invariants",
    "finish_queue",
    "losses_and_doubles",
    "read_file",
]


@dataclass(frozen=True)
class FileState:
    """Everything the checker reads from a queue file (or database), in one read transaction.

    ``integrity`` is ``("ok",)`` or the problems found: on SQLite what
    ``PRAGMA integrity_check`` says; on PostgreSQL, which has no such check,
    the re-check of every declared constraint against the stored rows (see
    ``read_file``). ``foreign_key_errors`` counts rows whose foreign key names
    no row (``PRAGMA foreign_key_check``; on PostgreSQL an anti-join per
    foreign key). ``engine`` says which of the two read it.
    """

    integrity: tuple[str, ...]
    foreign_key_errors: int
    messages: tuple[Message, ...]
    effects: tuple[EffectRow, ...]
    receipts: tuple[ReceiptRow, ...] = ()
    engine: str = "sqlite"

    def message(self, event_id: str) -> Message | None:
        return next((m for m in self.messages if m.event_id == event_id), None)

    def rows(
        self,
    ) -> tuple[tuple[Message, ...], tuple[EffectRow, ...], tuple[ReceiptRow, ...]]:
        """Messages, effects and receipts: what "the same state" means for the crash matrix."""
        return self.messages, self.effects, self.receipts

    @property
    def total_cents(self) -> int:
        """The money: the sum of every effect's amount."""
        return sum(amount for _, _, amount in self.effects)

    def receipt_proof(self, m: Message) -> ReceiptRow | None:
        """The receipt of ``m``'s operation, if it proves an ACK without an effect of ``m``'s own.

        The operation is named by the payload's ``tenant`` and ``operation`` fields
        (what ``receipts.key_from_payload`` reads). The proof holds if that
        receipt exists, was recorded for the same payload, and names an
        existing effect.
        """
        receipt = self.receipt_of(m)
        if receipt is None or receipt[3] not in {e for e, _, _ in self.effects}:
            return None
        if _canonical(json.loads(receipt[2])) != _canonical(json.loads(m.payload)):
            return None
        return receipt

    def receipt_of(self, m: Message) -> ReceiptRow | None:
        """The receipt stored under the operation ``m``'s payload names, if any."""
        key = _operation_key(m)
        return (
            next((r for r in self.receipts if (r[0], r[1]) == key), None)
            if key
            else None
        )


def read_file(db: str | Path) -> FileState:
    """Read a queue file through a read-only connection (``mode=ro``): nothing can be written.

    The file must have the queue's current schema (version 2: ``last_detail``
    and the receipts table); the ledger's ``effects`` table may be missing
    (an application that was never installed has no effects).
    The connection may leave empty ``-wal``/``-shm`` files beside the database:
    a read-only connection may not delete them. The next writer reuses them.

    A ``postgresql://`` URL is read with psycopg (not through ``Store``) in one
    ``BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY`` transaction, one
    snapshot for every read, which the server refuses to let write anything.
    PostgreSQL has no ``PRAGMA integrity_check``; what stands in for it is a
    re-check, in that snapshot, of every constraint the tables of the current
    schema declare, against their rows: each CHECK re-evaluated on every row
    (also one added ``NOT VALID``, which never checked the rows it found),
    each NOT NULL column, and each primary and unique key for duplicates,
    with index scans turned off so that the rows themselves are read, not an
    index that might disagree with them. It does not check pages or index
    structure (that would need the ``amcheck`` extension installed).
    Foreign keys: an anti-join per foreign key counts the rows that name no
    row (an effect whose ``event_id`` has no message).
    Psycopg's errors (``psycopg.Error``) propagate, as sqlite3's do for a file.
    """
    if is_postgres_url(db):
        return _read_postgres(str(db))
    conn = sqlite3.connect(f"{Path(db).resolve().as_uri()}?mode=ro", uri=True)
    try:
        conn.execute("BEGIN")  # one consistent snapshot for all the reads below
        integrity = tuple(str(row[0]) for row in conn.execute("PRAGMA integrity_check"))
        foreign = len(conn.execute("PRAGMA foreign_key_check").fetchall())
        messages = tuple(
            Message(*row)
            for row in conn.execute(
                "SELECT event_id, payload, state, attempts, generation, available_at, lease_until, last_error,"
                " last_detail FROM messages ORDER BY event_id"
            )
        )
        has_effects = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'effects'"
        ).fetchone()
        effects: tuple[EffectRow, ...] = (
            tuple(
                (str(e), str(c), int(a))
                for e, c, a in conn.execute(
                    "SELECT event_id, category, amount_cents FROM effects ORDER BY event_id"
                )
            )
            if has_effects
            else ()
        )
        receipts: tuple[ReceiptRow, ...] = tuple(
            (str(t), str(o), str(p), str(e))
            for t, o, p, e in conn.execute(
                "SELECT tenant, operation, payload, effect FROM receipts ORDER BY tenant, operation"
            )
        )
        conn.execute("ROLLBACK")
    finally:
        conn.close()
    return FileState(integrity, foreign, messages, effects, receipts)


def _read_postgres(url: str) -> FileState:
    """``read_file`` for a PostgreSQL database: one read-only snapshot (psycopg imported only here)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        try:
            # Read the rows themselves (sequential scans), not an index that could disagree with them,
            # in one process: before schema version 5 queue_core_json_type was labelled PARALLEL
            # SAFE, but its EXCEPTION block needs a subtransaction, which a parallel worker refuses.
            for setting in ("indexscan", "indexonlyscan", "bitmapscan"):
                conn.execute(f"SET LOCAL enable_{setting} = off")
            conn.execute("SET LOCAL max_parallel_workers_per_gather = 0")
            integrity = _postgres_constraint_recheck(conn)
            foreign = _postgres_dangling_references(conn)
            messages = tuple(
                Message(*row)
                for row in conn.execute(
                    "SELECT event_id, payload, state, attempts, generation, available_at, lease_until, last_error,"
                    ' last_detail FROM messages ORDER BY event_id COLLATE "C"'
                )
            )
            has_effects = conn.execute(
                "SELECT to_regclass('effects') IS NOT NULL"
            ).fetchone()
            effects: tuple[EffectRow, ...] = (
                tuple(
                    (str(e), str(c), int(a))
                    for e, c, a in conn.execute(
                        'SELECT event_id, category, amount_cents FROM effects ORDER BY event_id COLLATE "C"'
                    )
                )
                if has_effects and has_effects[0]
                else ()
            )
            receipts: tuple[ReceiptRow, ...] = tuple(
                (str(t), str(o), str(p), str(e))
                for t, o, p, e in conn.execute(
                    "SELECT tenant, operation, payload, effect FROM receipts"
                    ' ORDER BY tenant COLLATE "C", operation COLLATE "C"'
                )
            )
        finally:
            # also ends a transaction a failed read left aborted
            conn.execute("ROLLBACK")
    return FileState(
        integrity, foreign, messages, effects, receipts, engine="postgresql"
    )


# The declared constraints of the tables in the current schema: CHECK ('c'), primary key ('p'),
# unique ('u') and foreign key ('f'), with their columns in key order and, for a CHECK, its expression.
_CONSTRAINTS = """
SELECT t.relname::text, c.conname::text, c.contype::text, pg_get_expr(c.conbin, c.conrelid),
       ARRAY(SELECT a.attname::text FROM unnest(c.conkey) WITH ORDINALITY AS k(attnum, n)
             JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.attnum ORDER BY k.n),
       f.relname::text,
       ARRAY(SELECT a.attname::text FROM unnest(c.confkey) WITH ORDINALITY AS k(attnum, n)
             JOIN pg_attribute a ON a.attrelid = c.confrelid AND a.attnum = k.attnum ORDER BY k.n)
FROM pg_constraint c
JOIN pg_class t ON t.oid = c.conrelid
JOIN pg_namespace s ON s.oid = t.relnamespace
LEFT JOIN pg_class f ON f.oid = c.confrelid
WHERE s.nspname = current_schema() AND t.relkind = 'r' AND c.contype IN ('c', 'p', 'u', 'f')
ORDER BY t.relname, c.conname
"""

_NOT_NULL_COLUMNS = """
SELECT t.relname::text, a.attname::text
FROM pg_attribute a
JOIN pg_class t ON t.oid = a.attrelid
JOIN pg_namespace s ON s.oid = t.relnamespace
WHERE s.nspname = current_schema() AND t.relkind = 'r'
  AND a.attnum > 0 AND NOT a.attisdropped AND a.attnotnull
ORDER BY t.relname, a.attnum
"""


def _postgres_constraint_recheck(conn: psycopg.Connection[Any]) -> tuple[str, ...]:
    """What stands in for ``PRAGMA integrity_check``: every CHECK, NOT NULL and key, re-checked on the rows."""
    from psycopg import sql

    problems: list[str] = []

    def count(query: sql.Composed) -> int:
        return _count(conn, query)

    for table, name, kind, expression, columns, _, _ in conn.execute(
        _CONSTRAINTS
    ).fetchall():
        if kind == "c":
            # The server's own text of the CHECK: a row breaks it where it is false (NULL passes, as in a CHECK).
            broken = count(
                sql.SQL("SELECT count(*) FROM {} WHERE NOT ({})").format(
                    sql.Identifier(table), sql.SQL(expression)
                )
            )
            what = f"CHECK {name}"
        elif kind in ("p", "u"):
            keys = sql.SQL(", ").join(map(sql.Identifier, columns))
            broken = count(
                sql.SQL(
                    "SELECT count(*) FROM (SELECT 1 FROM {} GROUP BY {} HAVING count(*) > 1) AS d"
                ).format(sql.Identifier(table), keys)
            )
            what = f"{'primary key' if kind == 'p' else 'unique key'} {name} (keys stored twice)"
        else:
            continue  # foreign keys: _postgres_dangling_references
        if broken:
            problems.append(f"{table}: {broken} row(s) break {what}")
    for table, column in conn.execute(_NOT_NULL_COLUMNS).fetchall():
        broken = count(
            sql.SQL("SELECT count(*) FROM {} WHERE {} IS NULL").format(
                sql.Identifier(table), sql.Identifier(column)
            )
        )
        if broken:
            problems.append(f"{table}: {broken} row(s) break NOT NULL {column}")
    return tuple(problems) or ("ok",)


def _postgres_dangling_references(conn: psycopg.Connection[Any]) -> int:
    """Rows whose foreign key names no row, over every foreign key (an anti-join each)."""
    from psycopg import sql

    dangling = 0
    for table, _, kind, _, columns, parent, parent_columns in conn.execute(
        _CONSTRAINTS
    ).fetchall():
        if kind != "f":
            continue
        present = sql.SQL(" AND ").join(
            sql.SQL("c.{} IS NOT NULL").format(sql.Identifier(c)) for c in columns
        )
        match = sql.SQL(" AND ").join(
            sql.SQL("p.{} = c.{}").format(sql.Identifier(p), sql.Identifier(c))
            for c, p in zip(columns, parent_columns)
        )
        dangling += _count(
            conn,
            sql.SQL(
                "SELECT count(*) FROM {} AS c WHERE {} AND NOT EXISTS (SELECT 1 FROM {} AS p WHERE {})"
            ).format(sql.Identifier(table), present, sql.Identifier(parent), match),
        )
    return dangling


def _count(conn: psycopg.Connection[Any], query: psycopg.sql.Composed) -> int:
    row = conn.execute(query).fetchone()
    if row is None:  # a count(*) always returns one row
        raise RuntimeError(f"no row from {query!r}")
    return int(row[0])


def _operation_key(m: Message) -> tuple[str, str] | None:
    """The (tenant, operation) a message's payload names, or None (the checker's own reading)."""
    try:
        payload = json.loads(m.payload)
    except ValueError:
        return None
    if not isinstance(payload, dict):
        return None
    tenant, operation = payload.get("tenant"), payload.get("operation")
    return (
        (tenant, operation)
        if isinstance(tenant, str) and isinstance(operation, str)
        else None
    )


def check_invariants(
    db: str | Path | FileState,
    *,
    events: Mapping[str, Payload] | None = None,
    expected_total: int | None = None,
    finished: bool = True,
    max_attempts: int = MAX_ATTEMPTS,
) -> list[str]:
    """Return every violated invariant of the queue file ``db`` (an empty list: all hold).

    Always checked: ``PRAGMA integrity_check`` is ok (on PostgreSQL: every
    declared constraint holds on the rows, see ``read_file``) and no foreign key dangles;
    each done message has exactly one effect, or none of its own and the proof
    of a receipt (see below); no effect lacks its done message;
    each effect is what its stored payload says (category, amount); a dead
    message has a recorded reason; ``generation >= attempts`` (every claim raises
    both, a redrive resets only attempts); ``attempts <= max_attempts``; a
    message dead of ``lease_expired`` spent the whole budget.

    Receipts (``receipts.ReceiptHandler``): every receipt names an existing
    effect; no effect has more than one receipt; a done message without an
    effect of its own was ACKed on the proof of the receipt of its operation
    (the payload's ``tenant`` and ``operation``), recorded for the same
    payload, whose effect exists; a message whose operation has a receipt
    naming another event's effect has no effect of its own (the operation
    would count twice). These rules read the receipts of a queue completed
    under a ``ReceiptHandler`` around the ledger's handler, whose receipts
    name event ids of ``effects``; a receipt written with ``receipts.record``
    for an effect kept elsewhere (another table) would be reported as naming
    no effect.

    :param events: every event the producers sent (event id -> payload): none
        may be missing (lost before it was stored), none may be stored with
        another payload, and no other message may appear.
    :param expected_total: the money the effects must add up to.
    :param finished: after a final pass, every message must be done, or dead
        with a reason: nothing may be left ready or leased.
    """
    if isinstance(db, FileState):
        state = db
    else:
        try:
            state = read_file(db)
        except sqlite3.DatabaseError as exc:
            return [f"the file cannot be read: {exc}"]
        except _postgres_errors(db) as exc:
            return [f"the database cannot be read: {exc}"]
    violations: list[str] = []
    postgres = state.engine == "postgresql"
    if state.integrity != ("ok",):
        check = "constraint re-check" if postgres else "integrity_check"
        violations.append(f"{check}: {'; '.join(state.integrity[:3])}")
    if state.foreign_key_errors:
        check = "foreign keys (anti-join)" if postgres else "foreign_key_check"
        violations.append(f"{check}: {state.foreign_key_errors} dangling reference(s)")
    violations += _message_violations(
        state, finished=finished, max_attempts=max_attempts
    )
    violations += _effect_violations(state)
    violations += _receipt_violations(state)
    if events is not None:
        violations += _sent_violations(state, events)
    if expected_total is not None and state.total_cents != expected_total:
        violations.append(
            f"money: effects add up to {state.total_cents}, expected {expected_total}"
        )
    return violations


def _postgres_errors(db: str | Path) -> tuple[type[Exception], ...]:
    """psycopg's error class when ``db`` is a URL (imported only then); else nothing to catch."""
    if not is_postgres_url(db):
        return ()
    import psycopg

    return (psycopg.Error,)


def _message_violations(
    state: FileState, *, finished: bool, max_attempts: int
) -> list[str]:
    """Each message: its effects (or the proof of a receipt), its reason, attempts and generation."""
    violations = []
    effects_per_event = Counter(event_id for event_id, _, _ in state.effects)
    for m in state.messages:
        count = effects_per_event.get(m.event_id, 0)
        if m.state == "done" and count > 1:
            violations.append(f"{m.event_id} is done with {count} effects (doubled)")
        elif m.state == "done" and count == 0 and state.receipt_proof(m) is None:
            receipt = state.receipt_of(m)
            why = (
                "and no receipt of its operation"
                if receipt is None
                else f"and the receipt of {receipt[0]}/{receipt[1]} is no proof (effect {receipt[3]} "
                f"{'missing' if effects_per_event.get(receipt[3], 0) == 0 else 'of another payload'})"
            )
            violations.append(f"{m.event_id} is done with 0 effects {why} (lost)")
        receipt = state.receipt_of(m) if count else None
        if receipt is not None and receipt[3] != m.event_id:
            violations.append(
                f"{m.event_id} has an effect of its own, but the receipt of its operation "
                f"{receipt[0]}/{receipt[1]} names {receipt[3]} (the operation is doubled)"
            )
        if m.state == "dead" and not m.last_error:
            violations.append(f"{m.event_id} is dead without a recorded reason")
        if m.generation < m.attempts:
            violations.append(
                f"{m.event_id}: generation {m.generation} < attempts {m.attempts}"
            )
        if m.attempts > max_attempts:
            violations.append(
                f"{m.event_id}: {m.attempts} attempts, more than the budget of {max_attempts}"
            )
        if (
            m.state == "dead"
            and m.last_error == LEASE_EXPIRED
            and m.attempts != max_attempts
        ):
            violations.append(
                f"{m.event_id}: dead of {LEASE_EXPIRED} after {m.attempts} attempts"
            )
        if finished and m.state not in ("done", "dead"):
            violations.append(f"{m.event_id} is still {m.state} after the final pass")
    return violations


def _effect_violations(state: FileState) -> list[str]:
    """Each effect: a done message of its own, and the category and amount of its payload."""
    violations = []
    messages = {m.event_id: m for m in state.messages}
    for event_id, category, amount in state.effects:
        m = messages.get(event_id)
        if m is None or m.state != "done":
            violations.append(
                f"effect of {event_id} without a done message "
                f"({'no message' if m is None else m.state})"
            )
            continue
        payload = json.loads(m.payload)
        if (payload.get("category"), payload.get("amount_cents")) != (category, amount):
            violations.append(
                f"effect of {event_id} is {category} {amount}, its payload says otherwise"
            )
    return violations


def _receipt_violations(state: FileState) -> list[str]:
    """Each receipt names an existing effect; no effect has two receipts."""
    violations = []
    effects = {event_id for event_id, _, _ in state.effects}
    for tenant, operation, _, effect in state.receipts:
        if effect not in effects:
            violations.append(
                f"receipt {tenant}/{operation} names {effect}, which has no effect"
            )
    receipts_per_effect = Counter(effect for _, _, _, effect in state.receipts)
    for effect, count in sorted(receipts_per_effect.items()):
        if count > 1:
            violations.append(f"effect of {effect} has {count} receipts")
    return violations


def _sent_violations(state: FileState, events: Mapping[str, Payload]) -> list[str]:
    """Every event sent is stored, with its payload, and nothing else is."""
    violations = []
    messages = {m.event_id: m for m in state.messages}
    for event_id, payload in events.items():
        m = messages.get(event_id)
        if m is None:
            violations.append(f"{event_id} was sent but is not stored (lost)")
        elif _canonical(json.loads(m.payload)) != _canonical(payload):
            violations.append(f"{event_id} is stored with another payload")
    for event_id in sorted(messages.keys() - events.keys()):
        violations.append(f"{event_id} is stored but was never sent")
    return violations


def _canonical(value: Any) -> str:
    """The checker's own canonical JSON (it does not borrow the envelope's): 1 and 1.0 differ."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def losses_and_doubles(
    state: FileState, sent: Mapping[str, Payload], valid: set[str]
) -> tuple[int, int]:
    """How many effects were lost and how many doubled, counted (the checker lists them).

    Losses: a sent event not stored, a valid event not done, a done message
    without its effect (and without the proof of a receipt). Doubles: more
    than one effect for an event, an effect without a done message, an effect
    of an operation whose receipt names another event's effect.
    """
    messages = {m.event_id: m for m in state.messages}
    effects = Counter(e for e, _, _ in state.effects)
    lost = sum(1 for e in sent if e not in messages)
    lost += sum(1 for e in valid if e in messages and messages[e].state != "done")
    lost += sum(
        1
        for m in state.messages
        if m.state == "done"
        and effects[m.event_id] == 0
        and state.receipt_proof(m) is None
    )
    doubled = sum(n - 1 for n in effects.values() if n > 1)
    doubled += sum(
        1 for e in effects if e not in messages or messages[e].state != "done"
    )
    doubled += sum(
        1
        for m in state.messages
        if effects[m.event_id]
        and (r := state.receipt_of(m)) is not None
        and r[3] != m.event_id
    )
    return lost, doubled


def finish_queue(
    db: str | Path,
    now: int,
    *,
    categories: Sequence[str] = (),
    lease_seconds: int = 2,
    receipts: bool = False,
    max_passes: int = 1_000,
    queue: str = DEFAULT_QUEUE,
) -> int:
    """A fresh worker finishes the queue: work, let model time pass, until nothing is ready or leased.

    ``db`` is a queue file or a ``postgresql://`` URL. The worker runs the
    reference application (``ledger.Handler``, plus ``categories``) and
    installs its table first if the file has none, as ``queue-core work`` does. Time jumps to the next moment something becomes
    claimable (a backoff ends, a lease runs out). Returns the model time at
    which the queue was finished. With ``receipts``, the worker completes
    under a ``ReceiptHandler`` (the operation named by the payload's
    ``tenant`` and ``operation``) that refuses a receipt whose effect is gone. ``queue``: which one.
    """
    clock = ModelClock(now)
    handler: MessageHandler = ledger.Handler.with_categories(categories)
    if receipts:
        handler = ReceiptHandler(handler, effect_exists=ledger.has_effect)
    # Closed on the way out: whoever reads or copies the file next finds everything in it, not in a WAL
    # that an open connection keeps.
    with Store(db, clock=clock, create=False, queue=queue) as store:
        ledger.install(store)
        for _ in range(max_passes):
            work(store, handler, lease_seconds=lease_seconds)
            pending = [m for m in store.messages() if m.state in ("ready", "leased")]
            if not pending:
                return clock.now()
            due = min(max(m.available_at, m.lease_until or 0) for m in pending)
            clock.set(max(due, clock.now() + 1))
    raise RuntimeError(f"the queue was not finished after {max_passes} passes")
