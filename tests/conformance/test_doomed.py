"""A transaction in which a fence refused, or a statement failed, cannot commit.

The hole this closes: inside ``store.transaction()``, a caller writes the
effect, calls ``complete_tx`` with a lease that was taken over, catches the
``LeaseLost`` and lets the block end. Before, the block committed the stale
attempt's effect, and the worker holding the current lease completed too: two
effects behind one ``done``. Now the refusal dooms the transaction: caught or
not, its COMMIT raises ``LeaseLost`` and nothing of it is written. A refused
``*_tx`` operation that may have written part of its work dooms it the same
way, and a statement that would end the transaction is refused before it runs.
Runs on both engines (tests/conformance/conftest.py).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from queue_core import (
    LeaseLost,
    Message,
    ModelClock,
    NotDead,
    Outcome,
    StatementFailed,
    StatementRefused,
    Store,
    Tx,
    ledger,
)
from queue_core.transactions import Tx as TxClass


def line(event_id: str, cents: int = 100) -> str:
    payload = {"category": "book", "amount_cents": cents}
    return json.dumps({"event_id": event_id, "payload": payload}) + "\n"


def effects(store: Store) -> list[Any]:
    return list(ledger.effects(store))


def taken_over(store: Store, clock: ModelClock) -> tuple[Any, Any]:
    """A stale lease of E0001 and the current one, claimed after the first ran out."""
    ledger.install(store)
    store.enqueue(line("E0001"))
    stale = store.claim(lease_seconds=2)
    clock.advance(3)
    fresh = store.claim(lease_seconds=2)
    assert stale is not None and fresh is not None
    return stale, fresh


def own_table(store: Store) -> None:
    """The caller's own effects, with no unique key: nothing but the protocol stops a double."""
    with store.transaction() as tx:
        tx.execute("CREATE TABLE charges (event_id TEXT NOT NULL, generation INTEGER NOT NULL)")


def charges(store: Store) -> list[tuple[Any, ...]]:
    return store.read(lambda view: [tuple(r) for r in view.execute(
        "SELECT event_id, generation FROM charges ORDER BY generation")])


def attempt(store: Store, lease: Any, *, swallow: bool) -> list[str]:
    """The caller's own form: the effect, then complete_tx; a refusal caught or not."""
    caught: list[str] = []
    with store.transaction() as tx:
        tx.execute("INSERT INTO charges VALUES (?, ?)", (lease.event_id, lease.generation))
        try:
            store.complete_tx(tx, lease)
        except LeaseLost as lost:
            if not swallow:
                raise
            caught.append(lost.code)
    return caught


def test_a_swallowed_lease_lost_commits_nothing(store: Store, clock: ModelClock) -> None:
    stale, fresh = taken_over(store, clock)
    own_table(store)
    with pytest.raises(LeaseLost) as at_commit:
        attempt(store, stale, swallow=True)
    assert at_commit.value.code == "lease_lost"
    assert "cannot commit" in at_commit.value.message
    assert charges(store) == [], "the stale attempt's effect committed"
    attempt(store, fresh, swallow=False)
    assert store.message("E0001").state == "done"
    assert charges(store) == [("E0001", 2)]


@pytest.mark.one_engine
def test_without_the_doom_a_swallowed_lease_lost_makes_two_effects(
        store: Store, clock: ModelClock, monkeypatch: pytest.MonkeyPatch) -> None:
    # The negative control: the doom switched off, the stale attempt commits its
    # effect and the current worker commits its own: two effects behind one done.
    monkeypatch.setattr(TxClass, "raise_if_doomed", lambda self: None)
    stale, fresh = taken_over(store, clock)
    own_table(store)
    assert attempt(store, stale, swallow=True) == ["lease_lost"]
    attempt(store, fresh, swallow=False)
    assert store.message("E0001").state == "done"
    assert charges(store) == [("E0001", 1), ("E0001", 2)]


@pytest.mark.parametrize("refused", ["leased_tx", "extend_tx", "release_tx", "fail_tx", "ack_tx"])
def test_every_fenced_operation_dooms_the_callers_transaction(
        store: Store, clock: ModelClock, refused: str) -> None:
    stale, _ = taken_over(store, clock)
    store.enqueue(line("E0002"))
    calls = {
        "leased_tx": lambda tx: store.leased_tx(tx, stale),
        "extend_tx": lambda tx: store.extend_tx(tx, stale, 30),
        "release_tx": lambda tx: store.release_tx(tx, stale),
        "fail_tx": lambda tx: store.fail_tx(tx, stale, "flaky"),
        "ack_tx": lambda tx: store.ack_tx(tx, stale),
    }
    with pytest.raises(LeaseLost):
        with store.transaction() as tx:
            tx.execute("UPDATE messages SET priority = 5 WHERE event_id = 'E0002'")
            try:
                calls[refused](tx)
            except LeaseLost:
                pass
            assert tx.doomed
    assert store.read(lambda view: view.execute(
        "SELECT priority FROM messages WHERE event_id = 'E0002'").fetchone()[0]) == 0


def test_a_lease_lost_caught_inside_a_handler_refuses_its_ack(store: Store, clock: ModelClock) -> None:
    stale, fresh = taken_over(store, clock)
    store.enqueue(line("E0002"))
    other = store.claim()
    assert other is not None and other.event_id == "E0002"

    def meddles(tx: Tx, message: Message) -> None:
        ledger.Handler()(tx, message)
        try:
            store.complete_tx(tx, stale)  # another message's stale lease
        except LeaseLost:
            pass

    completion = store.complete(other, meddles)
    assert completion.outcome is Outcome.RETRY
    assert store.message("E0002").state == "ready"
    assert effects(store) == []


def test_a_refused_redrive_writes_nothing_even_when_caught(store: Store, clock: ModelClock) -> None:
    ledger.install(store)
    store.enqueue(line("E0001") + line("E0002"))
    for _ in range(2):
        lease = store.claim()
        assert lease is not None
        store.fail(lease, "broken", permanent=True)
    store.enqueue(line("E0003"))
    with store.transaction() as tx:
        try:
            store.redrive_tx(tx, ["E0001", "E0003", "E0002"])  # E0003 is ready: all or none
        except NotDead:
            pass
        assert not tx.doomed  # refused before it wrote: the caller may go on
    assert [store.message(e).state for e in ("E0001", "E0002")] == ["dead", "dead"]


def test_a_failed_statement_dooms_the_callers_own_transaction(store: Store) -> None:
    ledger.install(store)
    store.enqueue(line("E0001"))
    with pytest.raises(StatementFailed) as at_commit:
        with store.transaction() as tx:
            tx.execute("UPDATE messages SET priority = 5")
            tx.execute("SAVEPOINT undo")
            try:
                tx.execute("INSERT INTO no_such_table VALUES (1)")
            except Exception:
                pass
            tx.execute("ROLLBACK TO undo")  # the recovery PostgreSQL allows: not here
    assert at_commit.value.code == "statement_failed"
    assert store.message("E0001").priority == 0


@pytest.mark.parametrize("sql", [
    "COMMIT", "commit", "END", "ROLLBACK", "rollback transaction", "BEGIN",
    "  -- a comment first\n COMMIT", "/* a comment */ COMMIT",
])
def test_a_statement_that_would_end_the_transaction_is_refused_before_it_runs(
        store: Store, sql: str) -> None:
    ledger.install(store)
    store.enqueue(line("E0001"))
    lease = store.claim()
    assert lease is not None

    def commits_early(tx: Tx, message: Message) -> None:
        ledger.Handler()(tx, message)
        tx.execute(sql)

    completion = store.complete(lease, commits_early)
    assert (completion.outcome, completion.error) == (Outcome.RETRY, "transaction_control")
    assert effects(store) == [], "the effect committed without its ACK"
    with pytest.raises(StatementFailed) as at_commit:
        with store.transaction() as tx:
            with pytest.raises(StatementRefused) as refused:
                tx.execute(sql)
            assert refused.value.code == "transaction_control"
    assert at_commit.value.code == "transaction_control"


def test_rollback_to_and_savepoints_are_the_callers(store: Store) -> None:
    ledger.install(store)
    store.enqueue(line("E0001"))
    lease = store.claim()
    assert lease is not None

    def careful(tx: Tx, message: Message) -> None:
        tx.execute("SAVEPOINT mine")
        tx.execute("UPDATE messages SET priority = 9 WHERE event_id = ?", (message.event_id,))
        tx.execute("ROLLBACK TO SAVEPOINT mine")
        tx.execute("RELEASE SAVEPOINT mine")
        ledger.Handler()(tx, message)

    assert store.complete(lease, careful).outcome is Outcome.DONE
    assert store.message("E0001").priority == 0 and len(effects(store)) == 1


def test_two_statements_in_one_call_are_refused(store: Store) -> None:
    ledger.install(store)
    store.enqueue(line("E0001"))
    with pytest.raises(StatementFailed):
        with store.transaction() as tx:
            try:  # sqlite3 refuses it itself; on PostgreSQL the store does
                tx.execute("UPDATE messages SET priority = 1; COMMIT")
            except Exception:
                pass
    assert store.message("E0001").priority == 0
    with store.transaction() as tx:  # a trailing ';' alone is one statement
        tx.execute("SELECT 1;")
        tx.execute("SELECT ';' -- ; a comment\n")


@pytest.mark.one_engine
def test_without_the_check_a_commit_in_the_handler_keeps_the_effect_alone(
        store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    # The negative control: statements passed as they are, the handler's COMMIT
    # makes its effect durable on its own, whatever becomes of the ACK.
    monkeypatch.setattr(type(store.engine), "caller_sql", lambda self, sql: sql)
    ledger.install(store)
    store.enqueue(line("E0001"))
    lease = store.claim()
    assert lease is not None

    def commits_early(tx: Tx, message: Message) -> None:
        ledger.Handler()(tx, message)
        tx.execute("COMMIT")
        raise RuntimeError("the handler fails after its COMMIT")

    with pytest.raises(RuntimeError):
        store.complete(lease, commits_early)
    assert store.message("E0001").state != "done"
    assert len(effects(store)) == 1, "an effect without its ACK"


def caller_row_then_batch(store: Store, claimed: list[Any]) -> list[Any]:
    """The caller's own write, then complete_many_tx of a batch; the outcomes."""
    with store.transaction() as tx:
        tx.execute("INSERT INTO charges VALUES ('batch', 0)")
        return store.complete_many_tx(tx, claimed, ledger.Handler())


def batch_with_a_lost_lease(store: Store, clock: ModelClock) -> list[Any]:
    ledger.install(store)
    own_table(store)
    store.enqueue(line("E0001") + line("E0002"))
    claimed = store.claim_messages(2, 2)
    clock.advance(3)
    assert store.claim_message(2) is not None  # E0001 taken over
    return claimed


def test_a_lease_lost_in_the_callers_batch_dooms_the_callers_transaction(
        store: Store, clock: ModelClock) -> None:
    claimed = batch_with_a_lost_lease(store, clock)
    with pytest.raises(LeaseLost):
        caller_row_then_batch(store, claimed)
    assert charges(store) == [], "the caller's write committed with no ACK"
    assert effects(store) == []


@pytest.mark.one_engine
def test_without_the_doom_the_callers_batch_commits_a_write_with_no_ack(
        store: Store, clock: ModelClock, monkeypatch: pytest.MonkeyPatch) -> None:
    # The negative control: the lost lease only reported as an outcome.
    monkeypatch.setattr(Store, "complete_many_tx",
                        lambda self, tx, leases, handler: self._complete_many_in(tx, list(leases), handler))
    claimed = batch_with_a_lost_lease(store, clock)
    outcomes = [r.outcome for r in caller_row_then_batch(store, claimed)]
    assert Outcome.LEASE_LOST in outcomes
    assert charges(store) == [("batch", 0)]


def rolls_back_the_batch(tx: Tx, message: Message) -> None:
    """Writes its effect; the second message's handler rolls back to the store's savepoints:
    the one around it alone (``queue_core_handler``), and the batch's."""
    ledger.Handler()(tx, message)
    if message.event_id == "E0002":
        for savepoint in ("queue_core_handler", "queue_core_batch"):
            try:
                tx.execute(f"ROLLBACK TO {savepoint}")
                return
            except Exception:
                pass


def test_a_handler_cannot_name_the_stores_own_savepoints(store: Store) -> None:
    ledger.install(store)
    store.enqueue(line("E0001") + line("E0002"))
    results = store.complete_many(store.claim_messages(2), rolls_back_the_batch)
    done = {r.event_id for r in results if r.outcome is Outcome.DONE}
    assert done == {"E0001"}, results
    assert [e[0] for e in effects(store)] == ["E0001"]
    with pytest.raises(StatementFailed):
        with store.transaction() as tx:
            with pytest.raises(StatementRefused) as refused:
                tx.execute('RELEASE "queue_core_message"')
            assert refused.value.code == "reserved_savepoint"


@pytest.mark.one_engine
def test_without_the_reserved_names_a_handler_undoes_the_batchs_effects(
        store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    # The negative control: statements passed as they are, the handler's ROLLBACK
    # TO the store's savepoint around it undoes its own effect, and both end done.
    monkeypatch.setattr(type(store.engine), "caller_sql", lambda self, sql: sql)
    ledger.install(store)
    store.enqueue(line("E0001") + line("E0002"))
    results = store.complete_many(store.claim_messages(2), rolls_back_the_batch)
    assert all(r.outcome is Outcome.DONE for r in results)
    assert [e[0] for e in effects(store)] == ["E0001"], "E0002 done, with no effect behind it"
