"""A statement of the handler's that failed refuses the ACK, even if the handler caught it.

Nor does a ``ROLLBACK TO`` lift it, to a savepoint opened before the failure
or after it: the transaction is doomed (tests/conformance/test_doomed.py).

SQLite keeps a transaction usable after a failed statement, so without this
rule a handler that catches the failure of its only INSERT would end ``done``
with no effect; PostgreSQL aborts the transaction instead, and its ACK would
fail for another reason. queue_core refuses the ACK on both engines, the same
way: the message is refused like a handler that raised (``statement_failed``,
temporary), and nothing the handler wrote commits. Runs on both engines
(tests/conformance/conftest.py).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from queue_core import (
    Message,
    ModelClock,
    Outcome,
    StatementFailed,
    Store,
    Tx,
    ledger,
    work,
)
from queue_core.transactions import Tx as TxClass

MISSING = "INSERT INTO no_such_table VALUES (1)"


def line(event_id: str) -> str:
    payload = {"category": "book", "amount_cents": 100}
    return json.dumps({"event_id": event_id, "payload": payload}) + "\n"


def effect_then_caught_failure(tx: Tx, message: Message) -> None:
    """Writes the effect, then swallows the failure of a second statement."""
    ledger.Handler()(tx, message)
    try:
        tx.execute(MISSING)
    except Exception:
        pass  # the mistake this rule is about


def only_a_caught_failure(tx: Tx, message: Message) -> None:
    """Its only statement fails, and it catches that: no effect at all."""
    try:
        tx.execute(MISSING)
    except Exception:
        pass


def effects(store: Store) -> list[Any]:
    return list(ledger.effects(store))


@pytest.mark.parametrize("handler", [effect_then_caught_failure, only_a_caught_failure])
def test_a_caught_failed_statement_refuses_the_ack(store: Store, handler: Any) -> None:
    store.enqueue(line("E0001"))
    lease = store.claim()
    assert lease is not None
    completion = store.complete(lease, handler)
    assert (completion.outcome, completion.error) == (Outcome.RETRY, "statement_failed"), (
        "a handler that swallowed a failed statement was acknowledged"
    )
    row = store.message("E0001")
    assert (row.state, row.last_error) == ("ready", "statement_failed")
    assert "no_such_table" in (row.last_detail or "")
    assert effects(store) == [], "the handler's writes committed without their statement"


def test_on_the_worker_path_too(store: Store) -> None:
    store.enqueue(line("E0001"))
    claimed = store.claim_message()
    assert claimed is not None
    completion = store.complete_message(claimed, effect_then_caught_failure)
    assert (completion.outcome, completion.error) == (Outcome.RETRY, "statement_failed")
    assert store.message("E0001").state == "ready"
    assert effects(store) == []


def test_in_a_batch_only_the_message_whose_statement_failed_is_refused(store: Store) -> None:
    store.enqueue("".join(line(f"E000{i}") for i in (1, 2, 3)))

    def second_fails(tx: Tx, message: Message) -> None:
        if message.event_id == "E0002":
            effect_then_caught_failure(tx, message)
        else:
            ledger.Handler()(tx, message)

    summary = work(store, second_fails, batch=3, max_messages=3)
    assert summary.done == 2
    states = {m: store.message(m).state for m in ("E0001", "E0002", "E0003")}
    assert states == {"E0001": "done", "E0002": "ready", "E0003": "done"}
    assert store.message("E0002").last_error == "statement_failed"
    assert [e[0] for e in effects(store)] == ["E0001", "E0003"]


def test_the_budget_still_ends_in_dead(store: Store, clock: ModelClock) -> None:
    store.enqueue(line("E0001"))
    for _ in range(store.max_attempts):
        lease = store.claim()
        assert lease is not None
        store.complete(lease, only_a_caught_failure)
        clock.advance(60)
    row = store.message("E0001")
    assert (row.state, row.last_error) == ("dead", "statement_failed")


def test_complete_tx_refuses_in_the_callers_own_transaction(store: Store) -> None:
    store.enqueue(line("E0001"))
    lease = store.claim()
    assert lease is not None
    with pytest.raises(StatementFailed) as raised:
        with store.transaction() as tx:
            message = store.leased_tx(tx, lease)
            ledger.Handler()(tx, message)
            try:
                tx.execute(MISSING)
            except Exception:
                pass
            store.complete_tx(tx, lease)
    assert raised.value.code == "statement_failed"
    assert store.message("E0001").state == "leased"
    assert effects(store) == []


def test_complete_many_tx_refuses_after_the_callers_own_caught_failure(store: Store) -> None:
    # A batch completed inside the caller's transaction must not forget a
    # statement of the caller's that failed before it (the effects would commit
    # past a write that did not happen).
    store.enqueue(line("E0001") + line("E0002"))
    claimed = store.claim_messages(2)
    assert len(claimed) == 2
    with pytest.raises(StatementFailed) as raised:
        with store.transaction() as tx:
            try:
                tx.execute(MISSING)
            except Exception:
                pass
            store.complete_many_tx(tx, claimed, ledger.Handler())
    assert raised.value.code == "statement_failed"
    assert [m.state for m in store.messages()] == ["leased", "leased"]
    assert effects(store) == []


@pytest.mark.parametrize("opened", ["before", "after"])
def test_no_rollback_to_a_savepoint_lifts_the_refusal(store: Store, opened: str) -> None:
    # A savepoint opened before the failure (the recovery PostgreSQL itself
    # allows) or after it: either way the transaction stays doomed, and the
    # message is refused, with nothing of the attempt kept.
    store.enqueue(line("E0001"))

    def careful(tx: Tx, message: Message) -> None:
        ledger.Handler()(tx, message)
        if opened == "before":
            tx.execute("SAVEPOINT attempt")
        try:
            tx.execute(MISSING)
        except Exception:
            pass
        if opened == "after":
            tx.execute("SAVEPOINT attempt")
        tx.execute("ROLLBACK TO attempt")
        tx.execute("RELEASE attempt")

    lease = store.claim()
    assert lease is not None
    completion = store.complete(lease, careful)
    assert (completion.outcome, completion.error) == (Outcome.RETRY, "statement_failed")
    assert store.message("E0001").state == "ready"
    assert effects(store) == []


def test_a_handler_that_writes_nothing_is_still_acknowledged(store: Store) -> None:
    # The promise's "possibly nothing": the ACK needs no effect, only no failure.
    store.enqueue(line("E0001"))
    lease = store.claim()
    assert lease is not None
    assert store.complete(lease, lambda tx, message: None).outcome is Outcome.DONE
    assert effects(store) == []


@pytest.mark.one_engine
def test_without_the_rule_sqlite_would_ack_with_no_effect(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A negative control: the check switched off, SQLite's transaction stays
    # usable and the message ends done without the write that failed.
    monkeypatch.setattr(TxClass, "raise_if_doomed", lambda self: None)
    store.enqueue(line("E0001"))
    lease = store.claim()
    assert lease is not None
    assert store.complete(lease, only_a_caught_failure).outcome is Outcome.DONE
    assert store.message("E0001").state == "done" and effects(store) == []


@pytest.mark.one_engine
def test_were_a_savepoint_after_the_failure_to_clear_it_sqlite_would_ack_with_no_effect(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A negative control of the savepoint test: the earlier rule, where any
    # ROLLBACK TO cleared a failure, lets a savepoint opened after the failure
    # wipe it, and the message ends done with no effect.
    execute = TxClass.execute

    def forgetful(self: TxClass, sql: str, params: Any = ()) -> Any:
        rows = execute(self, sql, params)
        if sql.startswith("ROLLBACK TO"):
            self._doomed = None
        return rows

    monkeypatch.setattr(TxClass, "execute", forgetful)
    store.enqueue(line("E0001"))

    def after(tx: Tx, message: Message) -> None:
        try:
            tx.execute("INSERT INTO no_such_table VALUES (1)")
        except Exception:
            pass
        tx.execute("SAVEPOINT later")
        tx.execute("ROLLBACK TO later")

    lease = store.claim()
    assert lease is not None
    assert store.complete(lease, after).outcome is Outcome.DONE
    assert store.message("E0001").state == "done" and effects(store) == []
