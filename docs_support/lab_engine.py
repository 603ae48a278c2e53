"""The lab's engine: two workers, one queue file, one model clock, and the fence.

The page ``docs/lab.md`` loads this module into the reader's browser (Pyodide)
beside ``queue_core`` and drives it from ``docs/assets/javascripts/lab.js``;
``tests/test_lab_engine.py`` runs the same steps under CPython. It imports only
the standard library and ``queue_core``: every step runs the real package on a
real SQLite file, and every row and effect it reports is read back from that
file with plain SQL after the step.

Worker A and worker B each open their own ``Store`` (their own connection) on
the file, and share one ``ModelClock``. What a worker holds (its lease, whether
it is paused) lives in the worker, as in a real process; what the database
holds is read from the database.

The ACK can be switched from queue_core's fenced ACK to the naive ACKs the
chapters show failing. A naive ACK is the same statement as queue_core's
(``fenced_move`` for ``'ack'``) with conditions taken out of its ``WHERE``,
run after the effect in one transaction, as the chapters' naive workers do:
only the fence differs.

There are no processes in a browser, so a crash cannot kill one. The lab
stops the completion at the point the crash matrix names
(``complete.after_effect``: the effect inserted, no ACK yet): its store is
told of that point by a probe, which abandons the transaction there (it is
rolled back, as SQLite discards a transaction that never reached its
commit record), the worker's connection is closed and what it held in
memory is gone.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from queue_core import Claimed, LeaseLost, Message, ModelClock, Store, Tx

__all__ = [
    "ACKS",
    "FREE_EVENTS",
    "LEASE_SECONDS",
    "NAIVE_ACKS",
    "START",
    "Lab",
    "LabError",
]

START: Final = 1000
LEASE_SECONDS: Final = 3
WORKERS: Final = ("A", "B")
QUEUE: Final = "default"
FAIL_CODE: Final = "downstream_unavailable"

# What each ACK checks, in the words the page and the lab's selector use.
ACKS: Final[dict[str, str]] = {
    "fenced": "queue_core's fence: generation, claim token, leased, before lease_until",
    "generation": "generation only (queue_core before schema version 5)",
    "time": "time only: is some lease of the message still valid?",
    "none": "no fence: the event id alone",
}
# queue_core's ACK (engines/sqlite_queries.sql, fenced_move with :move = 'ack'),
# with conditions taken out of its WHERE. Parameters: done_at, event_id, then
# what the WHERE still checks.
_ACK_SET = "UPDATE messages SET state = 'done', lease_until = NULL, done_at = ?"
NAIVE_ACKS: Final[dict[str, str]] = {
    "generation": f"{_ACK_SET} WHERE queue = 'default' AND event_id = ?"
    " AND generation = ? AND state = 'leased' AND lease_until > ?",
    "time": f"{_ACK_SET} WHERE queue = 'default' AND event_id = ?"
    " AND state = 'leased' AND lease_until > ?",
    "none": f"{_ACK_SET} WHERE queue = 'default' AND event_id = ?",
}
# Would queue_core's fence let this lease write now? (Recorded with each effect.)
FENCE_HOLDS: Final = (
    "SELECT count(*) FROM messages WHERE queue = 'default' AND event_id = ?"
    " AND generation = ? AND lease_token = ? AND state = 'leased' AND lease_until > ?"
)
EFFECTS_TABLE: Final = (
    "CREATE TABLE IF NOT EXISTS lab_effects (n INTEGER PRIMARY KEY, event_id TEXT NOT NULL,"
    " worker TEXT NOT NULL, generation INTEGER NOT NULL, amount_cents INTEGER NOT NULL,"
    " at INTEGER NOT NULL, fence_held INTEGER NOT NULL)"
)
ROWS_SQL: Final = (
    "SELECT event_id, state, attempts, generation, lease_token, lease_until,"
    " available_at, last_error FROM messages WHERE queue = 'default' ORDER BY event_id"
)
EFFECTS_SQL: Final = (
    "SELECT n, event_id, worker, generation, amount_cents, at, fence_held"
    " FROM lab_effects ORDER BY n"
)

PAYLOADS: Final[dict[str, dict[str, Any]]] = {
    "book": {"category": "book", "amount_cents": 10000},
    "pen": {"category": "pen", "amount_cents": 2000},
    # a poison message: its handler crashes the worker that runs it, every time
    "poison": {"category": "book", "amount_cents": 1500, "poison": True},
}
# The free lab's messages: (event id, kind of payload).
FREE_EVENTS: Final = (("E0001", "book"), ("E0002", "pen"))


class LabError(ValueError):
    """An action the lab cannot take now (the page's buttons never ask for one)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class Crashed(BaseException):
    """The worker's process died here: raised past every ``except Exception``."""


class _Refused(Exception):
    """A naive ACK changed no row: the transaction is rolled back with the effect."""


def _token(token: int) -> str:
    """A claim token as the page shows it: its first six hexadecimal digits."""
    return "#" + f"{token:016x}"[:6] if token else "0"


@dataclass
class _Worker:
    """What one worker process holds: its store (connection), its lease, paused or not."""

    name: str
    store: Store | None = None
    claimed: Claimed | None = None
    paused: bool = False
    crashed: bool = False
    dies_after_effect: bool = False  # the crash step arms it for one completion

    def memory(self) -> dict[str, Any]:
        lease = self.claimed.lease if self.claimed is not None else None
        state = "crashed" if self.crashed else "paused" if self.paused else "idle"
        if lease is not None and not self.paused:
            state = "holding"
        return {
            "state": state,
            "lease": (
                None
                if lease is None
                else {
                    "event_id": lease.event_id,
                    "generation": lease.generation,
                    "attempt": lease.attempt,
                    "token": _token(lease.token),
                    "lease_until": lease.lease_until,
                }
            ),
        }


@dataclass
class _Lease:
    """One claim on the timeline: who held it, from when, until when, how it ended."""

    worker: str
    event_id: str
    generation: int
    token: str
    start: int
    until: int
    step: int  # the step that claimed it
    ended: int | None = None
    ended_step: int | None = None  # the step after which the worker no longer held it
    how: str = ""


@dataclass
class Lab:
    """Two workers on one queue file in ``folder``; ``act`` takes one step."""

    folder: Path
    events: tuple[tuple[str, str], ...] = FREE_EVENTS
    ack: str = "fenced"
    clock: ModelClock = field(default_factory=lambda: ModelClock(START))
    steps: list[dict[str, Any]] = field(default_factory=list)
    leases: list[_Lease] = field(default_factory=list)
    copied_at: int | None = None
    copied_step: int | None = None
    db: Path = field(init=False)
    copy: Path = field(init=False)
    workers: dict[str, _Worker] = field(init=False)

    def __post_init__(self) -> None:
        if self.ack not in ACKS:
            raise LabError("unknown_ack", f"no ACK {self.ack!r}; one of {list(ACKS)}")
        unknown = [kind for _, kind in self.events if kind not in PAYLOADS]
        if unknown:
            raise LabError("unknown_event", f"no payload for {unknown}")
        self.folder.mkdir(parents=True, exist_ok=True)
        self.db = self.folder / "queue.sqlite3"
        self.copy = self.folder / "copy.sqlite3"
        self.workers = {name: _Worker(name) for name in WORKERS}
        with Store(self.db, clock=self.clock) as store:
            store.enqueue(
                "".join(
                    json.dumps({"event_id": e, "payload": PAYLOADS[kind]}) + "\n"
                    for e, kind in self.events
                )
            )
            with store.transaction() as tx:
                tx.execute(EFFECTS_TABLE)
        self.steps.append(self._step("lab", "start", "ok", self._started_says()))

    # ------------------------------------------------------------- reading

    def rows(self) -> list[dict[str, Any]]:
        """The messages as the database holds them now (plain SQL, a connection of its own)."""
        names = (
            "event_id",
            "state",
            "attempts",
            "generation",
            "token",
            "lease_until",
            "available_at",
            "last_error",
        )
        found = []
        for row in self.query(ROWS_SQL):
            item = dict(zip(names, row))
            item["token"] = _token(int(item["token"]))
            found.append(item)
        return found

    def effects(self) -> list[dict[str, Any]]:
        """The effects table as the database holds it now."""
        names = (
            "n",
            "event_id",
            "worker",
            "generation",
            "amount_cents",
            "at",
            "fence_held",
        )
        return [
            {**dict(zip(names, row)), "fence_held": bool(row[6])}
            for row in self.query(EFFECTS_SQL)
        ]

    def query(self, sql: str) -> list[tuple[Any, ...]]:
        """Rows of one read-only statement on the lab's database (the browser test's check)."""
        if not sql.lstrip().upper().startswith("SELECT"):
            raise LabError("not_a_select", "the lab's query reads only (SELECT ...)")
        conn = sqlite3.connect(self.db)
        try:
            return [tuple(row) for row in conn.execute(sql).fetchall()]
        finally:
            conn.close()

    # ------------------------------------------------------------- acting

    def allowed(self) -> dict[str, str | None]:
        """Each action and why it cannot be taken now (``None``: it can)."""
        why: dict[str, str | None] = {}
        for w in self.workers.values():
            held = w.claimed is not None
            for action in (
                "claim",
                "pause",
                "wake",
                "complete",
                "fail",
                "release",
                "crash",
            ):
                reason: str | None = None
                if w.paused and action != "wake":
                    reason = f"{w.name} is paused: wake it first"
                elif action == "wake" and not w.paused:
                    reason = f"{w.name} is not paused"
                elif action == "claim" and held:
                    reason = f"{w.name} holds a lease already"
                elif action not in ("claim", "wake") and not held:
                    reason = f"{w.name} holds no lease"
                why[f"{w.name}.{action}"] = reason
        why["clock.1"] = why["clock.lease"] = why["db.copy"] = None
        why["db.restore"] = (
            None if self.copied_at is not None else "no copy has been taken"
        )
        return why

    def act(self, action: str) -> dict[str, Any]:
        """Take one step (``"A.claim"``, ``"clock.1"``, ``"db.restore"``, ...); the step's record."""
        reason = self.allowed().get(action, f"no action {action!r}")
        if reason is not None:
            raise LabError("not_allowed", reason)
        actor, _, verb = action.partition(".")
        if actor == "clock":
            self.clock.advance(1 if verb == "1" else LEASE_SECONDS)
            return self._record(
                actor, verb, "ok", f"The clock moves to {self.clock.now()}."
            )
        if actor == "db":
            return self._database(verb)
        worker = self.workers[actor]
        do: dict[str, Callable[[_Worker], tuple[str, str]]] = {
            "claim": self._claim,
            "pause": self._pause,
            "wake": self._wake,
            "complete": lambda w: self._complete(w, crash=False),
            "crash": lambda w: self._complete(w, crash=True),
            "fail": self._fail,
            "release": self._release,
        }
        outcome, said = do[verb](worker)
        return self._record(actor, verb, outcome, said)

    def close(self) -> None:
        """Close every worker's connection."""
        for w in self.workers.values():
            self._disconnect(w)

    # -------------------------------------------------------- the workers

    def _store(self, w: _Worker) -> Store:
        if w.store is None:
            w.store = Store(self.db, clock=self.clock, probe=self._probe_of(w))
        return w.store

    def _probe_of(self, w: _Worker) -> Callable[[str], None]:
        def probe(point: str) -> None:
            if point == "complete.after_effect" and w.dies_after_effect:
                raise Crashed(point)

        return probe

    def _disconnect(self, w: _Worker) -> None:
        if w.store is not None:
            w.store.close()
            w.store = None

    def _claim(self, w: _Worker) -> tuple[str, str]:
        said = ""
        if w.crashed:
            w.crashed = False
            said = f"{w.name} starts again (a new process, a new connection). "
        before = {r["event_id"]: r for r in self.rows()}
        claimed = self._store(w).claim_message(LEASE_SECONDS)
        dead = [
            r
            for r in self.rows()
            if r["state"] == "dead" and before[r["event_id"]]["state"] != "dead"
        ]
        for r in dead:
            said += (
                f"{r['event_id']} goes to the dead letters ({r['last_error']}): its "
                f"{r['attempts']} claims are spent. "
            )
        if claimed is None:
            return "nothing", said + f"{w.name} finds nothing to claim now."
        lease = claimed.lease
        w.claimed = claimed
        self.leases.append(
            _Lease(
                w.name,
                lease.event_id,
                lease.generation,
                _token(lease.token),
                self.clock.now(),
                lease.lease_until,
                len(self.steps),
            )
        )
        return "ok", said + (
            f"{w.name} claims {lease.event_id}: generation {lease.generation}, claim token "
            f"{_token(lease.token)}, attempt {lease.attempt}, lease until {lease.lease_until}."
        )

    def _pause(self, w: _Worker) -> tuple[str, str]:
        w.paused = True
        return "ok", f"{w.name} stalls: it keeps its lease in memory and does nothing."

    def _wake(self, w: _Worker) -> tuple[str, str]:
        w.paused = False
        assert w.claimed is not None
        lease = w.claimed.lease
        return "ok", (
            f"{w.name} wakes up, sure it still holds {lease.event_id} "
            f"(generation {lease.generation}, until {lease.lease_until})."
        )

    def _let_go(self, w: _Worker, how: str) -> None:
        """The worker no longer holds its lease: the timeline's bar ends now."""
        w.claimed = None
        for lease in reversed(self.leases):
            if lease.worker == w.name and lease.ended is None:
                lease.ended, lease.ended_step, lease.how = (
                    self.clock.now(),
                    len(self.steps),
                    how,
                )
                break

    def _write_effect(
        self, tx: Tx, w: _Worker, message: Message, claimed: Claimed
    ) -> None:
        """The handler: one effect row, and whether queue_core's fence held when it was written."""
        payload = message.payload_object
        if payload.get("poison"):
            raise Crashed(f"the handler crashed {w.name} on {message.event_id}")
        lease = claimed.lease
        now = tx.now()
        held = tx.execute(
            FENCE_HOLDS, (lease.event_id, lease.generation, lease.token, now)
        )
        tx.execute(
            "INSERT INTO lab_effects (event_id, worker, generation, amount_cents, at,"
            " fence_held) VALUES (?, ?, ?, ?, ?, ?)",
            (
                message.event_id,
                w.name,
                lease.generation,
                int(payload["amount_cents"]),
                now,
                int(held.fetchone()[0]),
            ),
        )

    def _complete(self, w: _Worker, *, crash: bool) -> tuple[str, str]:
        claimed = w.claimed
        assert claimed is not None
        lease = claimed.lease
        store = self._store(w)
        name = f"{w.name} completes {lease.event_id} (generation {lease.generation})"
        if self.ack != "fenced":
            name += (
                f" with the {self.ack}-only ACK" if self.ack != "none" else " unfenced"
            )
        try:
            if self.ack == "fenced":
                w.dies_after_effect = crash
                store.complete_message(
                    claimed,
                    lambda tx, message: self._write_effect(tx, w, message, claimed),
                )
            else:
                self._naive_complete(store, w, claimed, crash=crash)
        except Crashed as died:
            self._crash(w)
            where = (
                "between its effect and its ACK"
                if "after_effect" in str(died)
                else "in its handler"
            )
            return "crashed", (
                f"{w.name} dies {where} while completing {lease.event_id}: its transaction "
                "never commits and is rolled back; its connection is closed and what it held "
                "in memory is gone."
            )
        except LeaseLost as lost:
            self._let_go(w, "refused")
            return (
                "refused",
                f"{name}: refused, LeaseLost ({lost}). Its effect is rolled back.",
            )
        except _Refused as refused:
            self._let_go(w, "refused")
            return "refused", f"{name}: refused ({refused}). Its effect is rolled back."
        finally:
            w.dies_after_effect = False
        self._let_go(w, "done")
        mine = [e for e in self.effects() if e["event_id"] == lease.event_id]
        stale = (
            ""
            if not mine or mine[-1]["fence_held"]
            else (
                " queue_core's fence would have refused it: this lease was not the current one."
            )
        )
        return "ok", f"{name}: accepted, effect and ACK committed.{stale}"

    def _naive_complete(
        self, store: Store, w: _Worker, claimed: Claimed, *, crash: bool
    ) -> None:
        lease = claimed.lease
        with store.transaction() as tx:
            self._write_effect(tx, w, claimed.message, claimed)
            if crash:
                raise Crashed("complete.after_effect")
            now = tx.now()
            checks: dict[str, tuple[Any, ...]] = {
                "generation": (lease.generation, now),
                "time": (now,),
                "none": (),
            }
            acked = tx.execute(
                NAIVE_ACKS[self.ack], (now, lease.event_id, *checks[self.ack])
            )
            if acked.rowcount != 1:
                raise _Refused(f"the {self.ack}-only ACK changed no row")

    def _crash(self, w: _Worker) -> None:
        self._let_go(w, "crashed")
        self._disconnect(w)
        w.paused, w.crashed = False, True

    def _fail(self, w: _Worker) -> tuple[str, str]:
        assert w.claimed is not None
        lease = w.claimed.lease
        try:
            done = self._store(w).fail(lease, FAIL_CODE)
        except LeaseLost as lost:
            self._let_go(w, "refused")
            return (
                "refused",
                f"{w.name}'s failure report is refused: LeaseLost ({lost}).",
            )
        self._let_go(w, "failed")
        where = (
            f"ready again at {done.available_at}"
            if done.available_at is not None
            else done.outcome.value
        )
        return (
            "ok",
            f"{w.name} reports a temporary failure ({FAIL_CODE}): {lease.event_id} is {where}.",
        )

    def _release(self, w: _Worker) -> tuple[str, str]:
        assert w.claimed is not None
        lease = w.claimed.lease
        try:
            self._store(w).release(lease)
        except LeaseLost as lost:
            self._let_go(w, "refused")
            return "refused", f"{w.name}'s release is refused: LeaseLost ({lost})."
        self._let_go(w, "released")
        return (
            "ok",
            f"{w.name} gives {lease.event_id} back unfinished: it is ready again.",
        )

    # ------------------------------------------------------- the database

    def _database(self, verb: str) -> dict[str, Any]:
        if verb == "copy":
            _backup(self.db, self.copy)
            self.copied_at, self.copied_step = self.clock.now(), len(self.steps)
            return self._record(
                "db",
                verb,
                "ok",
                (
                    f"A copy of the database is taken at {self.copied_at}: a standby that "
                    "stops receiving what the primary commits from here on."
                ),
            )
        for w in self.workers.values():
            self._disconnect(w)
        _backup(self.copy, self.db)
        for lease in self.leases:
            if lease.step > (self.copied_step or 0) and lease.ended is None:
                lease.how = "forgotten"
        return self._record(
            "db",
            verb,
            "ok",
            (
                f"The copy from second {self.copied_at} replaces the database (a failover to "
                "a standby that lagged): every commit after it is forgotten. Both workers "
                "reconnect; what they hold in memory stays."
            ),
        )

    # ------------------------------------------------------------ records

    def _started_says(self) -> str:
        return (
            f"A new queue file holds {', '.join(e for e, _ in self.events)}; the clock reads "
            f"{self.clock.now()}; leases last {LEASE_SECONDS} s; the ACK: {ACKS[self.ack]}."
        )

    def _step(self, actor: str, action: str, outcome: str, said: str) -> dict[str, Any]:
        return {
            "number": len(self.steps),
            "at": self.clock.now(),
            "actor": actor,
            "action": action,
            "outcome": outcome,
            "said": said,
            "rows": self.rows(),
            "effects": self.effects(),
            "workers": {name: w.memory() for name, w in self.workers.items()},
        }

    def _record(
        self, actor: str, action: str, outcome: str, said: str
    ) -> dict[str, Any]:
        step = self._step(actor, action, outcome, said)
        self.steps.append(step)
        return step


def _backup(source: Path, target: Path) -> None:
    """Copy one SQLite database over another, through SQLite (its WAL included)."""
    src, dst = sqlite3.connect(source), sqlite3.connect(target)
    try:
        src.backup(dst)
    finally:
        src.close()
        dst.close()
