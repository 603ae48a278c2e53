"""A reader's own effect completes under the protocol (issue 8).

The store knows no business: completing a message is a fenced check, the
*caller's* writes in the same transaction, a re-check and the ACK. Here the
effect is an ``orders`` row in a table the reader creates themselves in the
queue's file (no ledger involved), completed both ways:

* ``store.complete(lease, handler)``, the handler writing through ``tx``;
* ``with store.transaction() as tx: store.leased_tx(...); own SQL; store.complete_tx(tx, lease)``.

Real SQLite files in ``tmp_path``; time is a ModelClock.
"""

from __future__ import annotations

import ast
import dataclasses
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path

import pytest

import queue_core.store
from queue_core import (
    Lease,
    LeaseLost,
    Message,
    ModelClock,
    Outcome,
    PermanentFailure,
    Store,
    TemporaryFailure,
    Tx,
    backoff_seconds,
    work,
)
from queue_core.store import HANDLER_ERROR, MAX_ATTEMPTS, PROBE_POINTS
from queue_core.testing.faults import FaultPlan, Tracer

from ..support import batch, line

ORDERS = "CREATE TABLE orders (event_id TEXT PRIMARY KEY, category TEXT NOT NULL, cents INTEGER NOT NULL) STRICT"


# ---------------------------------------------------------------- helpers

@pytest.fixture
def queue(db: Path, clock: ModelClock) -> Iterator[Store]:
    """A plain queue (no ledger) with the reader's own ``orders`` table in its file (closed after the test)."""
    with Store(db, clock=clock) as store:
        with store.transaction() as tx:
            tx.execute(ORDERS)
        yield store


def orders(db: Path) -> list[tuple[str, str, int]]:
    with closing(sqlite3.connect(db)) as conn:
        return conn.execute("SELECT event_id, category, cents FROM orders ORDER BY event_id").fetchall()


def write_order(tx: Tx, message: Message) -> None:
    """The reader's own effect: one order row from the stored payload."""
    payload = message.payload_object
    tx.execute("INSERT INTO orders (event_id, category, cents) VALUES (?, ?, ?)",
               (message.event_id, payload["category"], payload["amount_cents"]))


def row(store: Store, event_id: str = "E0001") -> tuple:
    m = store.message(event_id)
    return m.state, m.attempts, m.generation, m.available_at, m.lease_until, m.last_error, m.last_detail


def complete_by_handler(store: Store, lease: Lease, during: Callable[[], None] = lambda: None) -> object:
    """Way 1: the store opens the transaction and calls the handler."""
    def my_handler(tx: Tx, message: Message) -> None:
        write_order(tx, message)
        during()
    return store.complete(lease, my_handler)


def complete_explicitly(store: Store, lease: Lease, during: Callable[[], None] = lambda: None) -> object:
    """Way 2: the reader's own transaction, own INSERT, then complete_tx."""
    with store.transaction() as tx:
        message = store.leased_tx(tx, lease)
        write_order(tx, message)
        during()
        return store.complete_tx(tx, lease)


WAYS = {"handler": complete_by_handler, "explicit": complete_explicitly}


# ------------------------------------------------------- the happy path

@pytest.mark.parametrize("way", list(WAYS))
def test_the_readers_own_effect_and_the_ack_commit_together(queue: Store, db: Path, way: str) -> None:
    queue.enqueue(batch(line("E0001", "book", 1200), line("E0002", "pen", 300)))
    for _ in range(2):
        completion = WAYS[way](queue, queue.claim())
        assert completion.outcome is Outcome.DONE
    assert orders(db) == [("E0001", "book", 1200), ("E0002", "pen", 300)]
    assert {m.event_id: m.state for m in queue.messages()} == {"E0001": "done", "E0002": "done"}
    assert queue.claim() is None
    with closing(sqlite3.connect(db)) as conn:  # no ledger was needed: the store wrote no effect of its own
        assert conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'effects'").fetchone() is None


def test_the_explicit_form_sees_the_stored_payload_and_the_handler_gets_the_same(queue: Store) -> None:
    queue.enqueue(line("E0001", "bag", 4242))
    lease = queue.claim()
    with queue.transaction() as tx:
        message = queue.leased_tx(tx, lease)
        assert (message.event_id, message.state, message.generation) == ("E0001", "leased", lease.generation)
        assert message.payload_object == {"category": "bag", "amount_cents": 4242}
        assert tx.now() == 1000
        write_order(tx, message)
        queue.complete_tx(tx, lease)
    assert queue.message("E0001").state == "done"


def test_the_return_value_of_a_handler_is_ignored(queue: Store, db: Path) -> None:
    # Store.Handler's contract: "The return value is ignored." A handler returning
    # something odd does not escape work(); what it wrote through tx is the effect.
    queue.enqueue(batch(line("E0001"), line("E0002"), line("E0003")))
    odd = iter([42, object(), "done!"])

    def returns_odd_things(tx: Tx, message: Message) -> object:
        write_order(tx, message)
        return next(odd)

    summary = work(queue, returns_odd_things)
    assert (summary.claimed, summary.done, summary.retried, summary.dead) == (3, 3, 0, 0)
    assert [o[0] for o in orders(db)] == ["E0001", "E0002", "E0003"]


def test_the_handler_runs_between_the_fenced_check_and_after_effect(db: Path, clock: ModelClock,
                                                                     queue: Store) -> None:
    # 33 points of the simple path (5 of them extend's), and the batched path's own three per batch operation.
    batch_points = {f"{op}.{step}" for op in ("claim_many", "complete_many")
                    for step in ("after_begin", "before_commit", "after_commit")}
    assert len(PROBE_POINTS) == 42 and batch_points <= PROBE_POINTS and "complete.after_effect" in PROBE_POINTS
    assert "complete.after_insert" not in PROBE_POINTS  # renamed: it is the handler's effect, whatever it inserts
    queue.enqueue(batch(line("E0001"), line("E0002")))
    tracer = Tracer()
    traced = Store(db, clock=clock, probe=tracer)

    def my_handler(tx: Tx, message: Message) -> None:
        tracer.reached.append("handler")
        write_order(tx, message)

    traced.complete(traced.claim(), my_handler)
    steps = tracer.reached[tracer.reached.index("complete.after_begin"):]
    assert steps == ["complete.after_begin", "complete.after_read", "handler", "complete.after_effect",
                     "complete.after_recheck", "complete.after_update", "complete.before_commit",
                     "complete.after_commit"]

    def refusing(tx: Tx, message: Message) -> None:
        tracer.reached.append("handler")
        raise PermanentFailure("refused")

    tracer.reached.clear()
    traced.complete(traced.claim(), refusing)
    steps = tracer.reached[tracer.reached.index("complete.after_begin"):]
    # A refusal records the failure instead: no after_effect, no re-check for an ACK.
    assert steps == ["complete.after_begin", "complete.after_read", "handler", "complete.after_update",
                     "complete.before_commit", "complete.after_commit"]


def test_a_fault_after_the_effect_rolls_back_the_readers_row(db: Path, clock: ModelClock, queue: Store) -> None:
    queue.enqueue(line("E0001"))
    lease = queue.claim()

    def crash() -> None:
        raise OSError("the process is about to die")

    faulty = Store(db, clock=clock, probe=FaultPlan().arm("complete.after_effect", crash))
    with pytest.raises(OSError, match="about to die"):
        complete_by_handler(faulty, lease)
    assert orders(db) == []
    assert queue.message("E0001").state == "leased"
    assert complete_by_handler(queue, lease).outcome is Outcome.DONE  # the same lease, still current


# ----------------------------------------------------------- stale leases

@pytest.mark.parametrize("way", list(WAYS))
def test_a_re_issued_generation_is_refused_and_writes_nothing(queue: Store, db: Path, clock: ModelClock,
                                                              way: str) -> None:
    queue.enqueue(line("E0001"))
    stale = queue.claim(lease_seconds=2)
    clock.set(1002)
    fresh = queue.claim(lease_seconds=10)
    assert fresh.generation == stale.generation + 1
    # The stale worker wakes up inside the new lease: only the generation tells.
    with pytest.raises(LeaseLost, match="generation 1 is stale"):
        WAYS[way](queue, stale)
    assert orders(db) == []
    assert row(queue) == ("leased", 2, 2, 1000, 1012, None, None)
    assert WAYS[way](queue, fresh).outcome is Outcome.DONE
    assert orders(db) == [("E0001", "book", 100)]


def test_an_own_insert_before_complete_tx_with_a_stale_generation_rolls_back(queue: Store, db: Path,
                                                                              clock: ModelClock) -> None:
    # A reader who writes first and lets complete_tx do the only check: its re-check
    # refuses the stale generation, and the reader's row leaves with the transaction.
    queue.enqueue(line("E0001"))
    stale = queue.claim(lease_seconds=2)
    clock.set(1002)
    queue.claim(lease_seconds=10)
    with pytest.raises(LeaseLost, match="stale"):
        with queue.transaction() as tx:
            tx.execute("INSERT INTO orders VALUES ('E0001', 'book', 100)")
            queue.complete_tx(tx, stale)
    assert orders(db) == []
    assert queue.message("E0001").state == "leased"


@pytest.mark.parametrize("way", list(WAYS))
def test_a_lease_that_ended_during_the_work_rolls_back_the_readers_row(queue: Store, db: Path,
                                                                       clock: ModelClock, way: str) -> None:
    queue.enqueue(line("E0001"))
    lease = queue.claim(lease_seconds=5)
    with pytest.raises(LeaseLost, match="ended at 1005"):
        WAYS[way](queue, lease, during=lambda: clock.advance(5))  # the row is written, then time runs out
    assert orders(db) == []
    assert row(queue) == ("leased", 1, 1, 1000, 1005, None, None)  # nothing recorded: the claim stands
    again = queue.claim(lease_seconds=5)
    assert (again.generation, again.attempt) == (2, 2)
    assert WAYS[way](queue, again).outcome is Outcome.DONE
    assert orders(db) == [("E0001", "book", 100)]


@pytest.mark.parametrize("way", list(WAYS))
def test_a_lease_that_had_ended_before_completion_is_refused(queue: Store, db: Path, clock: ModelClock,
                                                             way: str) -> None:
    queue.enqueue(line("E0001"))
    lease = queue.claim(lease_seconds=5)
    clock.advance(5)  # now == lease_until: the lease has ended
    with pytest.raises(LeaseLost, match=r"ended at 1005 \(now 1005\)"):
        WAYS[way](queue, lease)
    assert orders(db) == []
    assert queue.message("E0001").state == "leased"


# ----------------------------------------------- refusals and a savepoint

@pytest.mark.parametrize("attempt", [1, 2])
def test_a_temporary_refusal_after_writing_leaves_no_row_and_retries_after_the_backoff(
    queue: Store, db: Path, clock: ModelClock, attempt: int
) -> None:
    queue.enqueue(line("E0001"))
    for _ in range(attempt - 1):  # earlier attempts died silently
        queue.claim(lease_seconds=3)
        clock.advance(3)
    lease = queue.claim(lease_seconds=30)
    assert lease.attempt == attempt
    clock.advance(7)  # the handler works a while before it refuses: the backoff counts from then

    def refuses(tx: Tx, message: Message) -> None:
        write_order(tx, message)
        raise TemporaryFailure("warehouse_offline", "the warehouse API answered 503")

    completion = queue.complete(lease, refuses)
    now = 1000 + 3 * (attempt - 1) + 7
    expected_at = now + backoff_seconds(attempt)
    assert (completion.outcome, completion.error, completion.available_at) == (Outcome.RETRY, "warehouse_offline",
                                                                               expected_at)
    assert completion.detail == "the warehouse API answered 503"
    assert orders(db) == []
    assert row(queue) == ("ready", attempt, attempt, expected_at, None, "warehouse_offline",
                          "the warehouse API answered 503")
    clock.set(expected_at - 1)
    assert queue.claim() is None  # not before the backoff is over
    clock.set(expected_at)
    assert queue.claim().event_id == "E0001"


def test_a_temporary_refusal_on_the_last_attempt_is_dead(queue: Store, db: Path, clock: ModelClock) -> None:
    queue.enqueue(line("E0001"))
    for _ in range(MAX_ATTEMPTS - 1):
        queue.claim(lease_seconds=3)
        clock.advance(3)
    lease = queue.claim()
    assert lease.attempt == MAX_ATTEMPTS

    def refuses(tx: Tx, message: Message) -> None:
        write_order(tx, message)
        raise TemporaryFailure("warehouse_offline")

    completion = queue.complete(lease, refuses)
    assert (completion.outcome, completion.error) == (Outcome.DEAD, "warehouse_offline")
    assert orders(db) == []
    assert row(queue)[0] == "dead"


def test_a_permanent_refusal_after_writing_leaves_no_row_and_is_dead(queue: Store, db: Path) -> None:
    queue.enqueue(line("E0001", "toy", 3000))

    def refuses(tx: Tx, message: Message) -> None:
        write_order(tx, message)
        raise PermanentFailure("unknown_item", f"no item {message.payload_object['category']!r} in the catalogue")

    completion = queue.complete(queue.claim(), refuses)
    assert (completion.outcome, completion.error) == (Outcome.DEAD, "unknown_item")
    assert orders(db) == []
    assert row(queue) == ("dead", 1, 1, 1000, None, "unknown_item", "no item 'toy' in the catalogue")
    assert [m.event_id for m in queue.dead_letters()] == ["E0001"]


def test_only_the_handlers_writes_are_undone_by_its_refusal(queue: Store, db: Path) -> None:
    # The savepoint covers the handler alone: the refusal itself is recorded, and a
    # second message's committed row is untouched.
    queue.enqueue(batch(line("E0001"), line("E0002")))
    assert complete_by_handler(queue, queue.claim()).outcome is Outcome.DONE

    def two_rows_then_refuse(tx: Tx, message: Message) -> None:
        write_order(tx, message)
        tx.execute("UPDATE orders SET cents = 0")  # even a change to another message's row
        raise PermanentFailure("refused")

    assert queue.complete(queue.claim(), two_rows_then_refuse).outcome is Outcome.DEAD
    assert orders(db) == [("E0001", "book", 100)]


# -------------------------------------------------- unexpected exceptions

def keyerror_handler(tx: Tx, message: Message) -> None:
    write_order(tx, message)
    raise KeyError("sku")


def test_an_unexpected_exception_does_not_escape_work(queue: Store, db: Path, clock: ModelClock) -> None:
    queue.enqueue(line("E0001"))
    summary = work(queue, keyerror_handler)
    assert (summary.claimed, summary.retried, summary.dead) == (1, 1, 0)
    assert orders(db) == []
    assert row(queue) == ("ready", 1, 1, 1001, None, HANDLER_ERROR, "KeyError: 'sku'")


def test_an_unexpected_exception_is_retried_then_dead_after_the_third_claim(queue: Store, db: Path,
                                                                             clock: ModelClock) -> None:
    queue.enqueue(line("E0001"))
    claims = 0
    for attempt in range(1, MAX_ATTEMPTS + 1):
        summary = work(queue, keyerror_handler)
        claims += summary.claimed
        m = queue.message("E0001")
        assert (m.attempts, m.last_error, m.last_detail) == (attempt, HANDLER_ERROR, "KeyError: 'sku'")
        if attempt < MAX_ATTEMPTS:
            assert (summary.retried, m.state, m.available_at) == (1, "ready", clock.now() + backoff_seconds(attempt))
            assert work(queue, keyerror_handler).claimed == 0  # the backoff is not over yet
            clock.set(m.available_at)
        else:
            assert (summary.dead, m.state) == (1, "dead")
    assert claims == MAX_ATTEMPTS
    assert orders(db) == []
    assert work(queue, keyerror_handler).claimed == 0


@pytest.mark.parametrize("make_error, detail", [
    (lambda: ZeroDivisionError("division by zero"), "ZeroDivisionError: division by zero"),
    (lambda: sqlite3.IntegrityError("UNIQUE constraint failed: orders.event_id"),
     "IntegrityError: UNIQUE constraint failed: orders.event_id"),
    (lambda: AttributeError("'NoneType' object has no attribute 'category'"),
     "AttributeError: 'NoneType' object has no attribute 'category'"),
])
def test_the_detail_names_the_exception(queue: Store, db: Path, make_error: Callable[[], Exception],
                                        detail: str) -> None:
    queue.enqueue(line("E0001"))

    def buggy(tx: Tx, message: Message) -> None:
        write_order(tx, message)
        raise make_error()

    completion = queue.complete(queue.claim(), buggy)
    assert (completion.outcome, completion.error, completion.detail) == (Outcome.RETRY, HANDLER_ERROR, detail)
    assert orders(db) == []


def test_a_unique_clash_in_the_readers_insert_ends_dead_with_handler_error(queue: Store, db: Path,
                                                                           clock: ModelClock) -> None:
    # Before issue 8 this escaped work() and the lease expired (lease_expired);
    # now it is a recorded handler_error, retried, and dead after the budget.
    with queue.transaction() as tx:
        tx.execute("INSERT INTO orders VALUES ('E0001', 'book', 1)")  # a row that is already there
    queue.enqueue(line("E0001"))
    for _ in range(MAX_ATTEMPTS):
        work(queue, write_order)
        clock.advance(60)
    m = queue.message("E0001")
    assert (m.state, m.attempts, m.last_error) == ("dead", MAX_ATTEMPTS, HANDLER_ERROR)
    assert m.last_detail == "IntegrityError: UNIQUE constraint failed: orders.event_id"
    assert orders(db) == [("E0001", "book", 1)]


def test_an_old_style_payload_handler_is_refused_by_work_and_recorded_by_complete(queue: Store) -> None:
    # A handler(payload) -> Effect of the old API, given to the new one.
    queue.enqueue(line("E0001"))

    def old_style(payload):  # type: ignore[no-untyped-def]
        return payload

    # work checks the handler's shape before any claim (queue_core/handlers.py)
    with pytest.raises(TypeError, match=r"cannot be called as \(tx, message\)"):
        work(queue, old_style)  # type: ignore[arg-type]
    assert (queue.message("E0001").state, queue.message("E0001").attempts) == ("ready", 0)
    # complete checks nothing more than callable: the failed call is recorded
    queue.complete(queue.claim(), old_style)  # type: ignore[arg-type]
    m = queue.message("E0001")
    assert m.last_error == HANDLER_ERROR
    assert m.last_detail is not None and m.last_detail.startswith("TypeError: ")


@pytest.mark.parametrize("way", ["complete", "work"])
def test_keyboard_interrupt_propagates_and_rolls_back(queue: Store, db: Path, way: str) -> None:
    queue.enqueue(line("E0001"))

    def interrupted(tx: Tx, message: Message) -> None:
        write_order(tx, message)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        if way == "complete":
            queue.complete(queue.claim(), interrupted)
        else:
            work(queue, interrupted)
    assert orders(db) == []
    if way == "complete":
        # Nothing was recorded: the claim stands, and its lease will expire as after a crash.
        assert row(queue) == ("leased", 1, 1, 1000, 1030, None, None)
    else:
        # work() gives the lease in hand back (WorkInterrupted): ready, the claim not counted
        assert row(queue) == ("ready", 0, 1, 1000, None, None, None)
    with closing(sqlite3.connect(db)) as conn:  # no transaction was left open on the file
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("ROLLBACK")


# -------------------------------------------------- the store knows no business

def imports_of(source: str, package: str = "queue_core") -> set[str]:
    """Every module a source file imports (relative imports resolved), read with ast."""
    imported: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against the package (store.py sits at its top)
                base = ".".join([package, *([node.module] if node.module else [])])
            else:
                base = node.module or ""
            imported.add(base)
            # "from . import ledger" imports the module queue_core.ledger
            imported.update(f"{base}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) in (
                "import_module", "__import__"):
            imported.add("<dynamic import>")
    return imported


FORBIDDEN = ("queue_core.app", "queue_core.ledger", "queue_core.receipts", "queue_core.handler",
             "queue_core.testing")


def forbidden_in(imported: set[str]) -> set[str]:
    return {name for name in imported if any(name == f or name.startswith(f + ".") for f in FORBIDDEN)}


@pytest.mark.parametrize("source", [
    "from . import ledger", "from .receipts import ReceiptHandler", "import queue_core.ledger",
    "from queue_core import receipts", "from .testing.faults import FaultPlan", "from . import database, ledger",
    "def f():\n    from .ledger import Effect\n",
])
def test_the_import_check_sees_a_forbidden_import(source: str) -> None:  # negative control
    assert forbidden_in(imports_of(source))


PROTOCOL_MODULES = ("store", "completion", "reads", "transactions", "rules", "enqueues")


@pytest.mark.parametrize("module", PROTOCOL_MODULES)
def test_the_protocol_modules_import_neither_ledger_nor_receipts(module: str) -> None:
    path = Path(queue_core.store.__file__).with_name(f"{module}.py")
    imported = imports_of(path.read_text(encoding="utf-8"))
    assert forbidden_in(imported) == set()
    assert "<dynamic import>" not in imported


def test_the_protocols_statements_name_only_the_messages_table() -> None:
    from queue_core.engines import postgres, sqlite

    for engine in (sqlite.OPERATIONS, postgres.OPERATIONS):
        texts = {name: query.sql for name, query in engine.queries.items()}
        protocol = {name: text for name, text in texts.items()
                    if not name.startswith("receipt")}
        assert len(protocol) >= 25, "the statements were not found"
        for name, text in protocol.items():
            assert "effects" not in text and "receipts" not in text, (name, text)
        # receipts have statements of their own, for their own table only
        for name in ("receipt_lookup", "receipt_insert", "receipt_all"):
            assert "receipts" in texts[name] and "messages" not in texts[name]
