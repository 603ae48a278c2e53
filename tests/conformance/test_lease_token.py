"""The lease token: a claim the database forgot cannot be completed by the lease it issued.

A database that loses a claim (a failover to a standby that lagged, a
restored backup) issues the same generation again. Here the loss is made
with SQL: the row is put back exactly as it was before the claim, which is
what the standby or the backup holds. Runs on both engines
(tests/conformance/conftest.py). Without the token these tests fail: the old lease matches the
new claim's generation and deadline, and completes it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from queue_core import Claimed, Handler, LeaseLost, ModelClock, Outcome, Store, ledger
from queue_core.app.crash_child import lease_argument, parse_lease_argument
from queue_core.values import Lease

LINE = '{"event_id": "%s", "payload": {"category": "book", "amount_cents": 100}}\n'
# the row as it was before the claim: what a database that lost the claim holds
FORGET = ("UPDATE messages SET state = 'ready', attempts = attempts - 1, "
          "generation = generation - 1, lease_until = NULL, lease_token = 0 "
          "WHERE queue = 'default' AND event_id = ?")


def row(store: Store, event_id: str = "E0001") -> tuple[Any, ...]:
    with store.transaction() as tx:
        found = tx.execute("SELECT state, attempts, generation, lease_until, lease_token "
                           "FROM messages WHERE event_id = ?", (event_id,)).fetchone()
    assert found is not None
    return tuple(found)


def forget_the_claim(store: Store, event_id: str = "E0001") -> None:
    with store.transaction() as tx:
        tx.execute(FORGET, (event_id,))


def test_each_claim_draws_a_token_and_stores_it_with_the_lease(store: Store, clock: ModelClock) -> None:
    store.enqueue(LINE % "E0001" + LINE % "E0002" + LINE % "E0003")
    first = store.claim()
    assert first is not None and 0 < first.token < 2**63
    assert row(store)[4] == first.token
    [claimed] = store.claim_messages(1)  # the worker's path stores it too
    assert claimed.lease.token == row(store, "E0002")[4] != first.token
    many = store.claim_many(1)
    assert many[0].token == row(store, "E0003")[4] not in (0, first.token)
    # neither printed nor compared: it is random
    assert "token" not in repr(first)
    assert first == Lease(first.event_id, first.generation, first.attempt, first.lease_until)


def test_the_same_generation_issued_again_refuses_the_old_lease_everywhere(
        store: Store, clock: ModelClock) -> None:
    store.enqueue(LINE % "E0001")
    old = store.claim(lease_seconds=30)
    assert old is not None
    forget_the_claim(store)
    new = store.claim(lease_seconds=30)
    assert new is not None
    # the bug the token closes: the same event, generation, attempt and deadline
    assert (new.event_id, new.generation, new.attempt, new.lease_until) == (
        old.event_id, old.generation, old.attempt, old.lease_until)
    before = row(store)
    attempts: dict[str, Callable[[], object]] = {
        "complete": lambda: store.complete(old, Handler()),
        "complete_message": lambda: store.complete_message(
            Claimed(old, store.message("E0001")), Handler()),
        "extend": lambda: store.extend(old, 60),
        "fail": lambda: store.fail(old, "handler_error", detail="stale"),
        "release": lambda: store.release(old),
    }
    for name, attempt in attempts.items():
        with pytest.raises(LeaseLost, match="token differs|no longer the current lease"):
            attempt()
        assert row(store) == before, name  # nothing changed
    refused = store.complete_many([old], Handler())  # one lease of a batch: refused alone
    assert [c.outcome for c in refused] == [Outcome.LEASE_LOST]
    assert row(store) == before and ledger.effects(store) == []
    # the claim made after the loss is the message's lease
    assert store.complete(new, Handler()).outcome is Outcome.DONE
    assert ledger.effects(store) == [("E0001", "book", 100)]


def test_the_message_says_why_a_reissued_generation_is_refused(store: Store) -> None:
    store.enqueue(LINE % "E0001")
    old = store.claim()
    assert old is not None
    forget_the_claim(store)
    assert store.claim() is not None
    with pytest.raises(LeaseLost) as refused:
        store.fail(old, "handler_error")
    assert refused.value.message == (
        "E0001: generation 1 was issued again "
        "(the claim token differs: its claim was lost)")


def test_a_batch_whose_claim_was_forgotten_acks_nothing(store: Store) -> None:
    store.enqueue(LINE % "E0001" + LINE % "E0002")
    old = store.claim_messages(2)
    forget_the_claim(store, "E0002")
    again = store.claim_messages(1)
    assert [c.lease.event_id for c in again] == ["E0002"]
    done = store.complete_many([c.lease for c in old], Handler())
    assert [(c.event_id, c.outcome) for c in done] == [
        ("E0001", Outcome.DONE), ("E0002", Outcome.LEASE_LOST)]
    assert store.complete_message(again[0], Handler()).outcome is Outcome.DONE
    assert sorted(ledger.effects(store)) == [("E0001", "book", 100), ("E0002", "book", 100)]


@pytest.mark.one_engine
def test_a_lease_passed_to_a_child_process_keeps_its_token() -> None:
    lease = Lease("E0001", 3, 2, 1030, 2**63 - 1)
    again = parse_lease_argument(lease_argument(lease))
    assert (again, again.token) == (lease, lease.token)
