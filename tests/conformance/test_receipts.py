"""Idempotency receipts on real SQLite files: alone, and composed with the queue.

The rules (SPEC, "Idempotency receipts"): within one transaction
``(tenant, operation) -> canonical payload`` plus the effect; a repeat with the
same payload reuses the effect and says so; the same key with another payload
is ``operation_conflict`` and changes nothing; tenants are separate
namespaces; a failure inside the transaction rolls back receipt and effect
together. With the queue: a message is ACKed only with a new effect or with a
receipt (and its effect row) proving the existing one, in the same transaction.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Iterator, Mapping
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

import pytest

from queue_core import (
    Handler,
    InvalidReceipt,
    LeaseLost,
    Message,
    ModelClock,
    OperationConflict,
    Outcome,
    QueueError,
    ReceiptHandler,
    Store,
    TemporaryFailure,
    Tx,
    ledger,
    receipts,
    work,
)
from queue_core.testing.faults import FaultPlan

from ..support import batch, money

NORTH, OP = "north", "order-7:charge"
SCOPE = "checkout"  # the scope of the charges recorded outside a queue


# ---------------------------------------------------------------- helpers

def own_ledger(store: Store) -> None:
    """A table of the caller's own effects (named ``ledger``), in the queue database."""
    with store.transaction() as tx:
        tx.execute("CREATE TABLE ledger (id INTEGER PRIMARY KEY, tenant TEXT, operation TEXT, cents INTEGER) STRICT")


def charge(tx: Any, tenant: str = NORTH, operation: str = OP, cents: int = 500,
           calls: list[int] | None = None) -> receipts.Recorded:
    """Record one charge under a receipt, inside ``tx``."""
    def write_effect() -> str:
        if calls is not None:
            calls.append(1)
        cursor = tx.execute("INSERT INTO ledger (tenant, operation, cents) VALUES (?, ?, ?)",
                            (tenant, operation, cents))
        return f"ledger/{cursor.lastrowid}"
    return receipts.record(tx, tenant, operation, {"cents": cents}, write_effect, scope=SCOPE)


def rows(db: Path, sql: str) -> list[tuple]:
    with closing(sqlite3.connect(db)) as conn:
        return conn.execute(sql).fetchall()


def counts(db: Path) -> tuple[int, int]:
    """(effects in the ledger, receipts)."""
    with closing(sqlite3.connect(db)) as conn:
        return (conn.execute("SELECT count(*) FROM ledger").fetchone()[0], len(receipts.all_receipts(conn)))


def event(event_id: str, **payload: Any) -> str:
    return json.dumps({"event_id": event_id, "payload": payload})


def order(event_id: str, operation: str = OP, tenant: str = NORTH, category: str = "book",
          amount_cents: int = 10000) -> str:
    return event(event_id, tenant=tenant, operation=operation, category=category, amount_cents=amount_cents)


def states(store: Store) -> dict[str, str]:
    return {m.event_id: m.state for m in store.messages()}


@contextmanager
def armed(store: Store, point: str, error: Exception) -> Iterator[Store]:
    """A second Store on the same file whose probe raises ``error`` at ``point``."""
    def boom() -> None:
        raise error
    plan = FaultPlan().arm(point, boom)
    try:
        yield Store(store.target, clock=store.clock, probe=plan)
    finally:
        plan.disarm_all()


# ------------------------------------------------------- the receipt alone

def test_first_record_writes_effect_and_receipt_together(store: Store, db: Path) -> None:
    own_ledger(store)
    calls: list[int] = []
    with store.transaction() as tx:
        recorded = charge(tx, calls=calls)
    assert (recorded.reused, recorded.effect, calls) == (False, "ledger/1", [1])
    assert recorded.receipt == receipts.Receipt(SCOPE, NORTH, OP, '{"cents":500}', "ledger/1", None)
    assert counts(db) == (1, 1)


def test_a_repeat_with_the_same_payload_reuses_the_effect_and_says_so(store: Store, db: Path) -> None:
    own_ledger(store)
    with store.transaction() as tx:
        first = charge(tx)
    calls: list[int] = []
    with store.transaction() as tx:
        # The same payload in another key order and spacing is the same canonical payload.
        again = receipts.record(tx, NORTH, OP, {"cents": 500}, lambda: calls.append(1) or "never", scope=SCOPE)
    assert again.reused is True
    assert again.receipt == first.receipt
    assert calls == []  # the effect was not written again
    assert counts(db) == (1, 1)


def test_the_same_key_with_another_payload_is_a_conflict_and_changes_nothing(store: Store, db: Path) -> None:
    own_ledger(store)
    with store.transaction() as tx:
        charge(tx, cents=500)
    before = rows(db, "SELECT * FROM receipts"), rows(db, "SELECT * FROM ledger")
    with pytest.raises(OperationConflict) as info:
        with store.transaction() as tx:
            charge(tx, cents=700)
    assert info.value.code == "operation_conflict"
    assert isinstance(info.value, QueueError) and info.value.exit_status == 2
    assert (rows(db, "SELECT * FROM receipts"), rows(db, "SELECT * FROM ledger")) == before
    # Even when the caller catches the conflict and commits, record wrote nothing.
    calls: list[int] = []
    with store.transaction() as tx:
        with pytest.raises(OperationConflict):
            charge(tx, cents=700, calls=calls)
    assert calls == []
    assert (rows(db, "SELECT * FROM receipts"), rows(db, "SELECT * FROM ledger")) == before


def test_tenants_are_separate_namespaces(store: Store, db: Path) -> None:
    own_ledger(store)
    with store.transaction() as tx:
        north = charge(tx, tenant="north", cents=500)
        south = charge(tx, tenant="south", cents=700)  # same operation name, another tenant
    assert (north.reused, south.reused) == (False, False)
    assert counts(db) == (2, 2)
    with store.transaction() as tx:
        assert charge(tx, tenant="south", cents=700).reused is True
        with pytest.raises(OperationConflict):
            charge(tx, tenant="north", cents=700)  # south's payload is not north's
    assert counts(db) == (2, 2)
    with store.transaction() as tx:
        assert receipts.lookup(tx, "south", OP, scope=SCOPE) == south.receipt
        assert receipts.lookup(tx, "west", OP, scope=SCOPE) is None


def test_a_failure_inside_the_transaction_rolls_back_receipt_and_effect(store: Store, db: Path) -> None:
    own_ledger(store)
    with pytest.raises(RuntimeError, match="after the receipt"):
        with store.transaction() as tx:
            charge(tx)
            raise RuntimeError("interrupted after the receipt")
    assert counts(db) == (0, 0)
    with store.transaction() as tx:  # nothing was left half-done: a new try writes both
        assert charge(tx).reused is False
    assert counts(db) == (1, 1)


def test_a_failing_effect_writes_no_receipt(store: Store, db: Path) -> None:
    own_ledger(store)

    def broken() -> str:
        raise RuntimeError("the effect failed")

    with pytest.raises(RuntimeError):
        with store.transaction() as tx:
            receipts.record(tx, NORTH, OP, {"cents": 500}, broken, scope=SCOPE)
    assert counts(db) == (0, 0)


def test_the_effect_must_name_itself(store: Store, db: Path) -> None:
    own_ledger(store)
    with pytest.raises(TypeError, match="reference"):
        with store.transaction() as tx:
            receipts.record(tx, NORTH, OP, {"cents": 500}, lambda: 7, scope=SCOPE)  # type: ignore[arg-type, return-value]
    assert receipts.stored(store) == []


def test_a_plain_sqlite_connection_inside_begin_works_too(tmp_path: Path) -> None:
    db = tmp_path / "app.sqlite3"
    with closing(sqlite3.connect(db, isolation_level=None)) as conn:
        conn.execute("CREATE TABLE ledger (id INTEGER PRIMARY KEY, tenant TEXT, operation TEXT, cents INTEGER)")
        # Not a queue database: the receipts table is created once, inside a transaction.
        with pytest.raises(ValueError, match="inside the caller's transaction"):
            receipts.create_table(conn)
        conn.execute("BEGIN IMMEDIATE")
        receipts.create_table(conn)
        receipts.create_table(conn)  # idempotent
        conn.execute("COMMIT")
        for expected in (False, True):
            conn.execute("BEGIN IMMEDIATE")
            assert charge(conn).reused is expected
            conn.execute("COMMIT")
    assert counts(db) == (1, 1)


def test_recording_outside_a_transaction_is_refused_before_any_write(tmp_path: Path) -> None:
    db = tmp_path / "app.sqlite3"
    with closing(sqlite3.connect(db, isolation_level=None)) as conn:
        conn.execute("CREATE TABLE ledger (id INTEGER PRIMARY KEY, tenant TEXT, operation TEXT, cents INTEGER)")
        with pytest.raises(ValueError, match="inside the caller's transaction"):
            charge(conn)
        assert receipts.lookup(conn, NORTH, OP, scope=SCOPE) is None
    assert rows(db, "SELECT name FROM sqlite_master WHERE name = 'receipts'") == []
    with pytest.raises(TypeError):
        receipts.record("not a transaction", NORTH, OP, {}, lambda: "x", scope=SCOPE)  # type: ignore[arg-type]


@pytest.mark.one_engine  # refused before any statement: nothing of the engine to prove
@pytest.mark.parametrize(
    "tenant, operation",
    [("", OP), (NORTH, ""), (None, OP), (NORTH, 7), ("x" * 201, OP), (NORTH, "\ud800")],
    ids=["empty-tenant", "empty-operation", "none-tenant", "int-operation", "long-tenant", "lone-surrogate"],
)
def test_an_unusable_key_is_refused_with_a_code(store: Store, tenant: Any, operation: Any) -> None:
    with pytest.raises(InvalidReceipt) as info:
        with store.transaction() as tx:
            receipts.record(tx, tenant, operation, {}, lambda: "never", scope=SCOPE)
    assert info.value.code == "invalid_receipt_key"
    assert receipts.stored(store) == []


@pytest.mark.one_engine  # refused before any statement: nothing of the engine to prove
@pytest.mark.parametrize(
    "payload",
    [float("nan"), {"x": float("inf")}, {"x": {1, 2}}, {"x": "y" * 10_001}, "\udc00"],
    ids=["nan", "inf", "set", "too-large", "lone-surrogate"],
)
def test_a_payload_without_a_canonical_form_is_refused_with_a_code(store: Store, payload: Any) -> None:
    with pytest.raises(InvalidReceipt) as info:
        with store.transaction() as tx:
            receipts.record(tx, NORTH, OP, payload, lambda: "never", scope=SCOPE)
    assert info.value.code == "invalid_receipt_payload"


def test_the_canonical_payload_keeps_types(store: Store, db: Path) -> None:
    own_ledger(store)
    with store.transaction() as tx:
        receipts.record(tx, NORTH, "a", {"b": 1, "a": [1, "x"]}, lambda: "e1", scope=SCOPE)
        with pytest.raises(OperationConflict):
            receipts.record(tx, NORTH, "a", {"a": [1, "x"], "b": 1.0}, lambda: "e2", scope=SCOPE)  # 1.0 is not 1
        assert receipts.record(tx, NORTH, "a", {"a": [1, "x"], "b": 1}, lambda: "e3", scope=SCOPE).reused
    assert [r.payload for r in receipts.stored(store)] == ['{"a":[1,"x"],"b":1}']


def test_receipts_table_is_strict_with_a_scope_tenant_operation_key(store: Store, db: Path) -> None:
    # Since schema version 2 the table is part of every queue database from its creation
    # (before, the first record created it lazily and reading found none); version 10
    # put the scope first in its key.
    assert rows(db, "SELECT name FROM sqlite_master WHERE name = 'receipts'") == [("receipts",)]
    assert receipts.stored(store) == []
    own_ledger(store)
    with store.transaction() as tx:
        charge(tx)
    assert rows(db, "SELECT strict FROM pragma_table_list WHERE name = 'receipts'") == [(1,)]
    key = [(r[1], r[5]) for r in rows(db, "PRAGMA table_info(receipts)") if r[5]]
    assert sorted(key, key=lambda c: c[1]) == [("scope", 1), ("tenant", 2), ("operation", 3)]
    columns = "(tenant, operation, payload, effect, scope, effect_queue)"
    with closing(sqlite3.connect(db)) as conn:
        conn.execute(f"INSERT INTO receipts {columns} VALUES ('{NORTH}', '{OP}', '{{}}', 'e', 'other', NULL)")
        for sql in (
            f"INSERT INTO receipts {columns} VALUES ('{NORTH}', '{OP}', '{{}}', 'again', '{SCOPE}', NULL)",
            f"INSERT INTO receipts {columns} VALUES ('', 'op', '{{}}', 'e', 's', NULL)",
            f"INSERT INTO receipts {columns} VALUES ('t', 'op', 'not json', 'e', 's', NULL)",
            f"INSERT INTO receipts {columns} VALUES ('t', 'op', '{{}}', '', 's', NULL)",
            f"INSERT INTO receipts {columns} VALUES ('t', X'6f70', '{{}}', 'e', 's', NULL)",  # STRICT
            f"INSERT INTO receipts {columns} VALUES ('t', 'op', '{{}}', 'e', '', NULL)",
            f"INSERT INTO receipts {columns} VALUES ('t', 'op', '{{}}', 'e', NULL, NULL)",
            f"INSERT INTO receipts {columns} VALUES ('t', 'op', '{{}}', 'e', 's', '')",
        ):
            with pytest.raises(sqlite3.IntegrityError):
                conn.execute(sql)


CRASHING_RECORD = textwrap.dedent("""
    import os, sys
    from queue_core import ModelClock, Store, receipts
    store = Store(sys.argv[1], clock=ModelClock(1000), create=False)
    with store.transaction() as tx:
        def write_effect():
            tx.execute("INSERT INTO ledger (tenant, operation, cents) VALUES ('north', 'op', 500)")
            return "ledger/1"
        receipts.record(tx, "north", "op", {"cents": 500}, write_effect, scope="checkout")
        os._exit(86)  # a real process death after receipt and effect, before COMMIT
""")


def test_a_process_dying_before_commit_leaves_neither_receipt_nor_effect(store: Store, db: Path) -> None:
    own_ledger(store)
    result = subprocess.run([sys.executable, "-c", CRASHING_RECORD, str(db)], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 86, result.stderr
    assert counts(db) == (0, 0)
    with store.transaction() as tx:
        assert receipts.record(tx, "north", "op", {"cents": 500},
                               lambda: str(tx.execute("INSERT INTO ledger (cents) VALUES (500)").lastrowid), scope=SCOPE).reused \
            is False


RACING_RECORD = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from queue_core import ModelClock, Store, receipts
    store = Store(sys.argv[1], clock=ModelClock(1000), create=False)
    start = Path(sys.argv[2])
    while not start.exists():
        time.sleep(0.001)
    with store.transaction() as tx:
        def write_effect():
            return "ledger/%d" % tx.execute(
                "INSERT INTO ledger (tenant, operation, cents) VALUES ('north', 'op', 500)").lastrowid
        print("reused" if receipts.record(tx, "north", "op", {"cents": 500}, write_effect, scope="checkout").reused else "created")
""")


def test_two_processes_racing_on_one_operation_make_one_effect(store: Store, db: Path, tmp_path: Path) -> None:
    own_ledger(store)
    start = tmp_path / "go"
    racers = [subprocess.Popen([sys.executable, "-c", RACING_RECORD, str(db), str(start)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(4)]
    start.touch()
    said = []
    for racer in racers:
        out, err = racer.communicate(timeout=120)
        assert racer.returncode == 0, err
        said.append(out.strip())
    assert sorted(said) == ["created", "reused", "reused", "reused"]
    assert counts(db) == (1, 1)


# ---------------------------------------------------- composed with the queue

def test_one_operation_under_two_event_ids_without_a_receipt_doubles(store: Store) -> None:
    store.enqueue(batch(order("E0001"), order("E0002")))  # two ids, one operation
    work(store, Handler())
    assert money(store) == (2, 20000)
    assert receipts.stored(store) == []


def test_one_operation_under_two_event_ids_with_a_receipt_makes_one_effect(store: Store) -> None:
    store.enqueue(batch(order("E0001"), order("E0002")))
    summary = work(store, ReceiptHandler(Handler()))
    assert (summary.claimed, summary.done) == (2, 2)
    assert states(store) == {"E0001": "done", "E0002": "done"}
    assert money(store) == (1, 10000)
    assert ledger.effects(store) == [("E0001", "book", 10000)]
    [receipt] = receipts.stored(store)
    assert (receipt.tenant, receipt.operation, receipt.effect) == (NORTH, OP, "E0001")


def test_the_repeat_is_acked_on_the_proof_of_the_receipt(store: Store) -> None:
    store.enqueue(batch(order("E0001"), order("E0002")))
    handler = ReceiptHandler(Handler())
    first = store.complete(store.claim(), handler)
    seen: list[Mapping[str, Any]] = []

    def spy(tx: Tx, message: Message) -> None:
        seen.append(message.payload_object)
        Handler()(tx, message)

    second = store.complete(store.claim(), ReceiptHandler(spy))
    assert (first.outcome, second.outcome) == (Outcome.DONE, Outcome.DONE)
    assert seen == []  # the business handler is not asked again for a known operation
    assert money(store) == (1, 10000)


def test_a_conflicting_operation_becomes_a_dead_letter_and_changes_nothing(store: Store) -> None:
    store.enqueue(batch(order("E0001", amount_cents=10000), order("E0002", amount_cents=7000)))
    summary = work(store, ReceiptHandler(Handler()))
    assert (summary.done, summary.dead) == (1, 1)
    dead = store.message("E0002")
    assert (dead.state, dead.last_error) == ("dead", "operation_conflict")
    assert money(store) == (1, 10000)
    [receipt] = receipts.stored(store)
    assert (receipt.effect, receipt.payload) == ("E0001", store.message("E0001").payload)
    store.redrive(["E0002"])  # redriving without a fix (a new operation key) ends in dead again
    work(store, ReceiptHandler(Handler()))
    assert store.message("E0002").last_error == "operation_conflict"
    assert money(store) == (1, 10000)


def test_tenants_are_separate_in_the_queue_too(store: Store) -> None:
    store.enqueue(batch(order("E0001", tenant="north"), order("E0002", tenant="south")))
    work(store, ReceiptHandler(Handler()))
    assert money(store) == (2, 20000)
    assert [(r.tenant, r.effect) for r in receipts.stored(store)] == [("north", "E0001"), ("south", "E0002")]


def test_a_payload_without_a_key_is_a_dead_letter(store: Store) -> None:
    store.enqueue(event("E0001", category="book", amount_cents=100))  # no tenant, no operation
    work(store, ReceiptHandler(Handler()))
    dead = store.message("E0001")
    # One key validation, one code (before issue 8 this case was "invalid_payload").
    assert (dead.state, dead.last_error) == ("dead", "invalid_receipt_key")
    assert dead.last_detail is not None and "tenant" in dead.last_detail
    assert money(store) == (0, 0) and receipts.stored(store) == []


def test_a_custom_key_function(store: Store) -> None:
    store.enqueue(batch(event("E0001", invoice="INV-1", category="pen", amount_cents=200),
                        event("E0002", invoice="INV-1", category="pen", amount_cents=200)))
    work(store, ReceiptHandler(Handler(), key=lambda payload: ("shop", payload["invoice"])))
    assert money(store) == (1, 200)
    assert [(r.tenant, r.operation) for r in receipts.stored(store)] == [("shop", "INV-1")]


def test_handler_failures_under_a_receipt_write_no_receipt(store: Store) -> None:
    store.enqueue(batch(order("E0001", category="toy"), order("E0002", operation="other")))
    handler = ReceiptHandler(Handler())
    toy = store.complete(store.claim(), handler)
    assert (toy.outcome, toy.error) == (Outcome.DEAD, "invalid_payload")

    def unavailable(tx: Tx, message: Message) -> None:
        raise TemporaryFailure("downstream_unavailable")

    retry = store.complete(store.claim(), ReceiptHandler(unavailable))
    assert (retry.outcome, retry.error) == (Outcome.RETRY, "downstream_unavailable")
    assert money(store) == (0, 0) and receipts.stored(store) == []


def test_fencing_still_refuses_a_stale_worker_under_a_receipt(store: Store, clock: ModelClock) -> None:
    store.enqueue(order("E0001"))
    stale = store.claim(lease_seconds=2)
    clock.set(1002)
    fresh = store.claim(lease_seconds=2)
    with pytest.raises(LeaseLost, match="stale"):
        store.complete(stale, ReceiptHandler(Handler()))
    assert receipts.stored(store) == [] and money(store) == (0, 0)
    assert store.complete(fresh, ReceiptHandler(Handler())).outcome is Outcome.DONE
    assert money(store) == (1, 10000)


def test_a_lease_lost_during_the_work_rolls_back_receipt_and_effect(store: Store, clock: ModelClock) -> None:
    store.enqueue(order("E0001"))
    lease = store.claim(lease_seconds=2)

    def slow(tx: Tx, message: Message) -> None:
        Handler()(tx, message)
        clock.set(1002)  # the work took until the lease ended

    with pytest.raises(LeaseLost, match="ended at 1002"):
        store.complete(lease, ReceiptHandler(slow))
    assert receipts.stored(store) == [] and money(store) == (0, 0)
    assert store.message("E0001").state == "leased"


# "complete.after_effect" (after the handler's writes) was "complete.after_insert" before issue 8.
@pytest.mark.parametrize("point", ["complete.after_effect", "complete.after_recheck", "complete.after_update",
                                   "complete.before_commit"])
def test_a_failure_anywhere_in_the_completion_rolls_back_receipt_effect_and_ack(store: Store, point: str) -> None:
    store.enqueue(order("E0001"))
    lease = store.claim()
    with armed(store, point, RuntimeError(f"boom at {point}")) as faulty:
        with pytest.raises(RuntimeError, match="boom"):
            faulty.complete(lease, ReceiptHandler(Handler()))
    assert receipts.stored(store) == [] and money(store) == (0, 0)
    assert store.message("E0001").state == "leased"
    assert store.complete(lease, ReceiptHandler(Handler())).outcome is Outcome.DONE
    assert money(store) == (1, 10000) and len(receipts.stored(store)) == 1


def foreign_receipt(store: Store) -> None:
    """A receipt written by other code in the queue's scope (on purpose), naming an effect not in ``effects``."""
    with store.transaction() as tx:
        receipts.record(tx, NORTH, OP, {"tenant": NORTH, "operation": OP, "category": "book",
                                         "amount_cents": 10000}, lambda: "somewhere-else/1", scope=store.queue)


def test_no_ack_without_an_effect_row_behind_the_receipt(store: Store, db: Path) -> None:
    # With an effect check the receipt must name an existing effect: otherwise it
    # proves nothing to the queue and the message is not ACKed. (Before issue 8
    # the store always checked the ledger; now the check is given to the wrapper.)
    foreign_receipt(store)
    store.enqueue(order("E0001"))
    completion = store.complete(store.claim(), ReceiptHandler(Handler(), effect_exists=ledger.has_effect))
    assert (completion.outcome, completion.error) == (Outcome.DEAD, "receipt_without_effect")
    assert "somewhere-else/1" in completion.detail
    assert money(store) == (0, 0)


def test_without_an_effect_check_the_receipt_alone_is_the_proof(store: Store, db: Path) -> None:
    foreign_receipt(store)
    store.enqueue(order("E0001"))
    completion = store.complete(store.claim(), ReceiptHandler(Handler()))
    assert completion.outcome is Outcome.DONE
    assert money(store) == (0, 0)  # the known operation's effect is not written a second time
    assert [r.effect for r in receipts.stored(store)] == ["somewhere-else/1"]


def test_the_effect_check_passes_for_a_receipt_of_the_queue(store: Store) -> None:
    store.enqueue(batch(order("E0001"), order("E0002")))
    summary = work(store, ReceiptHandler(Handler(), effect_exists=ledger.has_effect))
    assert (summary.done, summary.dead) == (2, 0)
    assert money(store) == (1, 10000)


def test_caller_writes_join_a_completion_under_a_receipt(store: Store, db: Path) -> None:
    own_ledger(store)
    store.enqueue(order("E0001"))
    lease = store.claim()
    # The explicit form: fenced check, the receipt handler and the caller's own SQL, then complete_tx.
    with pytest.raises(RuntimeError):
        with store.transaction() as tx:
            message = store.leased_tx(tx, lease)
            ReceiptHandler(Handler())(tx, message)
            tx.execute("INSERT INTO ledger (tenant, operation, cents) VALUES (?, ?, ?)", (NORTH, OP, 1))
            store.complete_tx(tx, lease)
            raise RuntimeError("the caller changes its mind")
    assert receipts.stored(store) == [] and money(store) == (0, 0)
    assert rows(db, "SELECT count(*) FROM ledger") == [(0,)]
    assert store.message("E0001").state == "leased"
    with store.transaction() as tx:
        message = store.leased_tx(tx, lease)
        ReceiptHandler(Handler())(tx, message)
        tx.execute("INSERT INTO ledger (tenant, operation, cents) VALUES (?, ?, ?)", (NORTH, OP, 1))
        assert store.complete_tx(tx, lease).outcome is Outcome.DONE
    assert money(store) == (1, 10000) and len(receipts.stored(store)) == 1
    assert rows(db, "SELECT count(*) FROM ledger") == [(1,)]


def test_a_receipt_handler_is_a_hook_not_a_payload_rule() -> None:
    # Before issue 8 a ReceiptHandler refused to be called with a payload, pointing to
    # Store.complete; now it is a hook handler(tx, message) like any other, and the
    # old one-argument call is a plain TypeError.
    with pytest.raises(TypeError, match="message"):
        ReceiptHandler(Handler())({"category": "book", "amount_cents": 1})  # type: ignore[call-arg]


def test_a_plain_queue_has_an_empty_receipts_table_from_the_start(store: Store, db: Path) -> None:
    # Before issue 8 the table appeared with the first receipt; now it is part of the
    # queue's versioned schema (schema.sql + receipts.sql) from the file's creation.
    assert rows(db, "SELECT strict FROM pragma_table_list WHERE name = 'receipts'") == [(1,)]
    store.enqueue(order("E0001"))
    work(store, Handler())
    assert receipts.stored(store) == []
    store.enqueue(order("E0002", operation="op-2"))
    work(store, ReceiptHandler(Handler()))
    assert [r.effect for r in receipts.stored(store)] == ["E0002"]
    assert Store(db, create=False).status().messages == {"ready": 0, "leased": 0, "done": 2, "dead": 0}  # still a valid queue database
