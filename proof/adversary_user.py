"""What user code does, as the adversary draws it: handlers and the caller's own transactions.

Each ``Kind`` is a handler's body as an application might write it: write
nothing, write to one table or two, undo part of its work with a savepoint,
refuse, raise, fail a statement and catch it (with a savepoint opened before
or after the failure), sleep past its lease, or swallow a refused fence. Every
row it writes is tagged with the attempt that wrote it (``adversary_db``), so
that the checks can tell whose effect committed.

The kinds belong to attack families, which a run can switch on and off
(``FAMILIES``): ``base`` is always on; the others are the attacks that broke
clauses of the promise on SQLite in issue #44 (``scopes``: receipts shared by
several queues and by code outside any queue; ``savepoints``: a failure
forgotten on a ``ROLLBACK TO`` of a savepoint opened after it; ``swallow``: a
refused fence caught by user code, whose transaction then commits), and those
the adversary found beyond them: ``recovery`` (a failure undone by a ``ROLLBACK
TO`` of a savepoint opened before it, which the promise's words refuse too),
``control`` (COMMIT or ROLLBACK through ``tx.execute``), ``batch_tx`` (a lost
lease in the caller's own ``complete_many_tx``), ``names`` (a handler's
``ROLLBACK TO`` the store's own savepoint) and ``leftover`` (a savepoint one
handler of a batch leaves open, rolled back to by a later handler of the same
batch).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

from queue_core import (
    Lease,
    LeaseLost,
    Message,
    ModelClock,
    PermanentFailure,
    QueueError,
    StatementFailed,
    Store,
    TemporaryFailure,
    Tx,
    receipts,
)
from queue_core.envelope import parse_items
from queue_core.receipts import ReceiptHandler
from queue_core.store import MessageHandler

from proof.adversary_db import FAILING_STATEMENTS, EffectRow

__all__ = [
    "ALL_FAMILIES",
    "FAMILIES",
    "KINDS",
    "Call",
    "Kind",
    "OwnResult",
    "OwnStep",
    "receipt_handler",
    "record_outside",
    "run_own_step",
    "tag",
]

FAMILIES: Final = {
    "scopes": "hole 1 of #44: receipts in several queues and beside receipts recorded "
              "outside any queue",
    "savepoints": "hole 2 of #44: a caught failed statement, then a savepoint opened after "
                  "it and rolled back to",
    "swallow": "hole 3 of #44: a refused fence (LeaseLost) or StatementFailed caught by user "
               "code, in its own transaction or inside a handler",
    "recovery": "a caught failed statement undone by a ROLLBACK TO a savepoint opened before "
                "it (the code of #44 allows it; the promise's words refuse the ACK)",
    "control": "transaction control run through tx.execute inside a handler or the caller's "
               "transaction (COMMIT, ROLLBACK, COMMIT then BEGIN), its error caught",
    "batch_tx": "the caller's own writes in its transaction, then complete_many_tx, which "
                "reports a lost lease as an outcome instead of raising it",
    "names": "a handler's ROLLBACK TO a savepoint it did not open, named as the store's own "
             "(queue_core_message, queue_core_batch), its error caught",
    "leftover": "a handler of a batch leaves a savepoint of its own open; a later handler "
                "of the same batch rolls back to it (undoing the earlier one's effect)",
}
ALL_FAMILIES: Final = frozenset(FAMILIES)
SLOW_TEMPORARY: Final = "adv_flaky"
SLOW_PERMANENT: Final = "adv_bad"


@dataclass(frozen=True)
class Kind:
    """A handler's body: the rows it keeps when ACKed, and how it is refused if it is."""

    name: str
    family: str  # "base" or one of FAMILIES
    writes: tuple[tuple[str, str], ...] = ()  # (table, part) of the rows it keeps when ACKed
    refusal: str | None = None  # the code its refusal is recorded with; None: it returns
    permanent: bool = False
    batch: bool = True  # usable in complete_many (no clock moves, no other lease, no enqueue)
    control: str | None = None  # the transaction control it runs between its two rows


_A = (("adv_effect", "a"),)
_AB = (("adv_effect", "a"), ("adv_effect", "b"))
KINDS: Final = (
    Kind("nothing", "base"),
    Kind("one", "base", _A),
    Kind("two_tables", "base", (("adv_effect", "a"), ("adv_other", "b"))),
    Kind("savepoint_undo", "base", _A),
    Kind("raise_temporary", "base", refusal=SLOW_TEMPORARY),
    Kind("raise_permanent", "base", refusal=SLOW_PERMANENT, permanent=True),
    Kind("raise_other", "base", refusal="handler_error"),
    Kind("fail_caught", "base", refusal="statement_failed"),
    Kind("fail_caught_only", "base", refusal="statement_failed"),
    Kind("fail_then_savepoint", "savepoints", refusal="statement_failed"),
    Kind("savepoint_then_fail", "recovery", refusal="statement_failed"),
    Kind("extend_after_expiry", "swallow", _A, batch=False),
    Kind("swallow_other", "swallow", _A, batch=False),
    Kind("outbox", "base", _A, batch=False),
    Kind("commit_inside", "control", _AB, control="COMMIT"),
    Kind("rollback_inside", "control", _AB, control="ROLLBACK"),
    Kind("commit_begin_inside", "control", _AB, control="COMMIT; BEGIN"),
    Kind("rollback_to_store", "names", _A,
         control="ROLLBACK TO queue_core_batch; ROLLBACK TO queue_core_message"),
    Kind("leave_open", "leftover", _A),
    Kind("rollback_to_leftover", "leftover", _A, control="ROLLBACK TO adv_open"),
)


def tag(table: str, part: str, call: Call) -> EffectRow:
    """The row ``call``'s code writes as ``part`` of ``table``."""
    lease = call.lease
    return EffectRow(table, call.scope, call.queue, lease.event_id, lease.generation,
                     lease.token, call.kind.name, part, call.tenant, call.operation)


def _write(tx: Tx, row: EffectRow) -> None:
    tx.execute(
        f"INSERT INTO {row.table} (scope, queue, event_id, generation, token, kind, part, "
        "tenant, operation) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (row.scope, row.queue, row.event_id, row.generation, row.token, row.kind, row.part,
         row.tenant, row.operation),
    )


def _quietly(tx: Tx, sql: str) -> None:
    """User code that runs a statement and catches whatever it raises."""
    try:
        tx.execute(sql)
    except Exception:
        pass


@dataclass
class Call:
    """One attempt's handler: what it was drawn to do, and what it saw while it ran."""

    kind: Kind
    queue: str
    lease: Lease
    tenant: str
    operation: str
    clock: ModelClock
    store: Store
    scope: str = ""  # the receipts' scope it runs under; "" without receipts
    slow: int = 0  # 0: at once; 1: until a second before its lease ends; 2: past its end
    failing: int = 0  # which of FAILING_STATEMENTS it runs
    payload: dict[str, Any] = field(default_factory=dict)  # the message's (what the outbox sends on)
    other: tuple[Store, Lease] | None = None  # swallow_other: another message's lease
    outbox: Store | None = None  # outbox: the queue it sends its message on to, in its transaction
    ran: bool = False
    clock_after: int = 0
    other_result: str | None = None  # what completing the other lease did ("done" or a code)

    def rows(self) -> tuple[EffectRow, ...]:
        """The rows it keeps if its ACK commits (its own effect)."""
        return tuple(sorted(tag(table, part, self) for table, part in self.kind.writes))

    def smuggled(self) -> EffectRow | None:
        """swallow_other's row for the other message, tagged with the other lease."""
        if self.other is None:
            return None
        store, lease = self.other
        return EffectRow("adv_effect", "", store.queue, lease.event_id, lease.generation,
                         lease.token, "smuggled", "x", self.tenant, self.operation)

    def __call__(self, tx: Tx, message: Message) -> None:
        self.ran = True
        if self.slow and message.lease_until is not None:
            left = message.lease_until - self.clock.now()
            self.clock.advance(max(0, left - 1) if self.slow == 1 else max(0, left) + self.slow - 2)
        try:
            self._body(tx)
        finally:
            self.clock_after = self.clock.now()

    def _body(self, tx: Tx) -> None:
        name, bad = self.kind.name, FAILING_STATEMENTS[self.failing]
        if name == "savepoint_undo":
            tx.execute("SAVEPOINT adv_undo")
            _write(tx, tag("adv_effect", "undone", self))
            tx.execute("ROLLBACK TO adv_undo")
            tx.execute("RELEASE adv_undo")
        if name == "savepoint_then_fail":
            tx.execute("SAVEPOINT adv_early")
            _quietly(tx, bad)
            _quietly(tx, "ROLLBACK TO adv_early")
            _quietly(tx, "RELEASE adv_early")
        if name == "extend_after_expiry":
            left = self.lease.lease_until - self.clock.now()
            self.clock.advance(max(0, left) + 1)
            try:
                self.store.extend_tx(tx, self.lease)
            except LeaseLost:
                pass  # "it was only a heartbeat": the mistake this kind is about
        if name == "fail_caught_only":
            _quietly(tx, bad)
            return
        if name == "rollback_to_store":  # "undo what I did so far" (a SAVEPOINT of its own was skipped)
            _quietly(tx, (self.kind.control or "").split("; ")[self.failing])
        if name == "leave_open":  # "in case I need to undo": never released
            tx.execute("SAVEPOINT adv_open")
        if name == "rollback_to_leftover":  # "undo my part", to a savepoint another handler opened
            _quietly(tx, "ROLLBACK TO adv_open")
        if name != "nothing":
            _write(tx, tag("adv_effect", "a", self))
        if name == "two_tables":
            _write(tx, tag("adv_other", "b", self))
        if name in ("fail_caught", "fail_then_savepoint"):
            _quietly(tx, bad)
        if name == "fail_then_savepoint":
            for statement in ("SAVEPOINT adv_later", "ROLLBACK TO adv_later", "RELEASE adv_later"):
                _quietly(tx, statement)
        if self.kind.control is not None and name not in ("rollback_to_store", "rollback_to_leftover"):
            for statement in self.kind.control.split("; "):
                _quietly(tx, statement)  # "we commit what we have so far"
            _write(tx, tag("adv_effect", "b", self))
        if name == "outbox" and self.outbox is not None:
            self.send_on(tx, self.outbox)
        if name == "swallow_other" and self.other is not None:
            self._complete_the_other(tx)
        if name == "raise_temporary":
            raise TemporaryFailure(SLOW_TEMPORARY, "the adversary's temporary refusal")
        if name == "raise_permanent":
            raise PermanentFailure(SLOW_PERMANENT, "the adversary's permanent refusal")
        if name == "raise_other":
            raise RuntimeError("the adversary's handler broke")

    def send_on(self, tx: Tx, outbox: Store) -> None:
        """The transactional outbox: the same event, sent on to another queue with the effect."""
        batch = parse_items([{"event_id": self.lease.event_id, "payload": self.payload}],
                            rules=outbox.settings)
        outbox.enqueue_tx(tx, batch)

    def _complete_the_other(self, tx: Tx) -> None:
        store, lease = self.other or (self.store, self.lease)
        row = self.smuggled()
        assert row is not None
        _write(tx, row)
        try:
            store.complete_tx(tx, lease)
            self.other_result = "done"
        except (LeaseLost, StatementFailed) as refused:
            self.other_result = refused.code  # swallowed: "the other one was not ours anyway"


def receipt_handler(call: Call, shared: str | None) -> MessageHandler:
    """``call`` under receipts: its queue's own scope (the default), or ``shared`` on purpose."""
    return ReceiptHandler(call) if shared is None else ReceiptHandler(call, scope=shared)


def record_outside(tx: Tx, scope: str, payload: dict[str, Any], row: EffectRow) -> bool:
    """Code outside any queue records an effect under a receipt; True if it wrote it (not reused)."""
    def write_effect() -> str:
        _write(tx, row)
        return row.event_id

    done = receipts.record(tx, str(payload["tenant"]), str(payload["operation"]), payload,
                           write_effect, scope=scope)
    return not done.reused


@dataclass(frozen=True)
class OwnStep:
    """One attempt inside the caller's own ``store.transaction()``: write, maybe fail, ACK."""

    check_first: bool  # leased_tx before writing (the fenced read; not before complete_many_tx)
    writes: bool  # write the effect row
    failure: str | None  # None, "plain", "savepoint_after", "savepoint_before" or "commit"
    ack: str  # "complete_tx", "ack_tx" or "complete_many_tx" (of this one lease)
    swallow: bool  # catch LeaseLost / StatementFailed from the fenced calls

    @property
    def family(self) -> str:
        if self.swallow:
            return "swallow"
        if self.failure is None and self.ack == "complete_many_tx":
            return "batch_tx"
        return {"savepoint_after": "savepoints", "savepoint_before": "recovery",
                "commit": "control"}.get(self.failure or "", "base")


@dataclass
class OwnResult:
    """What one OwnStep saw: its rows, and what its fenced calls did ("done" or a code)."""

    rows: tuple[EffectRow, ...] = ()
    checked: str | None = None  # "done", or "raised:<code>" (swallowed)
    acked: str | None = None  # "done", "raised:<code>" (swallowed), or complete_many_tx's outcome
    failed: bool = False  # a statement of it failed
    control: bool = False  # it ran transaction control through tx.execute


def run_own_step(tx: Tx, store: Store, lease: Lease, step: OwnStep, row: EffectRow,
                 seen: OwnResult) -> None:
    """The step's statements, as the caller writes them inside ``store.transaction()``.

    What its fenced calls did goes to ``seen`` as they happen (a refusal that
    is not swallowed escapes, and ends the transaction).
    """
    caught: tuple[type[QueueError], ...] = (LeaseLost, StatementFailed) if step.swallow else ()
    if step.check_first and step.ack != "complete_many_tx":  # which reads each lease itself
        try:
            store.leased_tx(tx, lease)
            seen.checked = "done"
        except caught as refused:
            seen.checked = f"raised:{refused.code}"
    if step.writes:
        _write(tx, row)
    if step.failure == "savepoint_before":
        tx.execute("SAVEPOINT adv_early")
    if step.failure == "commit":
        seen.control = True
        _quietly(tx, "COMMIT")  # "what we wrote so far is safe"
    elif step.failure is not None:
        seen.failed = True
        _quietly(tx, FAILING_STATEMENTS[0])
    if step.failure == "savepoint_after":
        for statement in ("SAVEPOINT adv_later", "ROLLBACK TO adv_later", "RELEASE adv_later"):
            _quietly(tx, statement)
    if step.failure == "savepoint_before":
        _quietly(tx, "ROLLBACK TO adv_early")
        _quietly(tx, "RELEASE adv_early")
    try:
        if step.ack == "complete_many_tx":  # the effect is the caller's: the handler writes nothing
            seen.acked = store.complete_many_tx(tx, [lease], _nothing)[0].outcome.value
        else:
            (store.ack_tx if step.ack == "ack_tx" else store.complete_tx)(tx, lease)
            seen.acked = "done"
    except caught as refused:
        seen.acked = f"raised:{refused.code}"


def _nothing(tx: Tx, message: Message) -> None:
    """A handler that writes nothing: the caller wrote the effect before."""
