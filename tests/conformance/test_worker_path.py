"""The worker's path: ``claim_message`` and ``complete_message`` (what ``work()`` runs).

Runs on both engines (tests/conformance/conftest.py). The claim is one
statement that must lease exactly what ``claim`` leases, in the same order,
with the same rule for a lease that ran out for the last time; the completion
has no read before the effect, so its fence is the ACK alone, and a refusal
is recorded in a second transaction. A real process killed with SIGKILL
between the effect and COMMIT leaves no effect behind.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from queue_core import (
    Handler,
    LeaseLost,
    ModelClock,
    Outcome,
    PermanentFailure,
    Store,
    TemporaryFailure,
    ledger,
    work,
)
from queue_core.testing.faults import Tracer
from queue_core.values import Claimed, Lease


def line(event_id: str, category: str = "book", cents: int = 100) -> str:
    return json.dumps({"event_id": event_id, "payload": {"category": category, "amount_cents": cents}})


def fill(store: Store, *ids: str) -> None:
    store.enqueue("\n".join(line(event_id) for event_id in ids) + "\n")
    ledger.install(store)


def test_claim_message_leases_what_claim_leases_in_the_same_order(store: Store, tmp_path: Path,
                                                                  clock: ModelClock) -> None:
    # A twin queue (always SQLite) holds the same messages; claim runs on it,
    # claim_message on the store under test, through expiries and a spent lease.
    twin = Store(tmp_path / "twin.sqlite3", clock=clock)
    try:
        for queue in (store, twin):
            queue.enqueue("\n".join(line(f"E{n:04d}") for n in (5, 3, 9, 1)) + "\n")
        seen_claim, seen_message = [], []
        for _ in range(14):  # 4 messages, 3 claims each, then nothing
            lease = twin.claim(10)
            claimed = store.claim_message(10)
            seen_claim.append(lease)
            seen_message.append(None if claimed is None else claimed.lease)
            if claimed is not None:
                assert claimed.message == store.message(claimed.lease.event_id)  # as stored now
            clock.advance(11)  # every lease runs out
        assert seen_message == seen_claim
        # claim order (available_at, event_id): an expired lease is taken again
        # first, and a spent one goes to dead inside the claim that finds it
        assert seen_claim[:4] == [Lease("E0001", 1, 1, 1010), Lease("E0001", 2, 2, 1021),
                                  Lease("E0001", 3, 3, 1032), Lease("E0003", 1, 1, 1043)]
        assert sum(lease is not None for lease in seen_claim) == 12 and seen_claim[-2:] == [None, None]
        # the spent leases went to dead with the same words and counts
        assert store.claim_message(10) is None and twin.claim(10) is None
        assert store.messages() == twin.messages()
        assert {m.state for m in store.messages()} == {"dead"}
    finally:
        twin.close()


def test_claim_message_takes_no_message_before_its_time(store: Store, clock: ModelClock) -> None:
    fill(store, "E0001")
    claimed = store.claim_message(30)
    assert claimed is not None
    assert store.claim_message(30) is None  # leased, not yet expired
    clock.advance(29)
    assert store.claim_message(30) is None
    clock.advance(1)
    again = store.claim_message(30)
    assert again is not None and again.lease.generation == 2 and again.message.expired_leases == 1


def test_complete_message_writes_the_effect_and_the_ack(store: Store) -> None:
    fill(store, "E0001")
    claimed = store.claim_message(30)
    assert claimed is not None
    assert store.complete_message(claimed, Handler()).outcome is Outcome.DONE
    assert store.message("E0001").state == "done" and ledger.totals(store).count == 1


def test_a_stale_generation_is_fenced_at_the_ack_and_its_effect_rolled_back(store: Store,
                                                                           clock: ModelClock) -> None:
    fill(store, "E0001")
    first = store.claim_message(10)
    clock.advance(10)  # its lease runs out; another worker takes the message
    second = store.claim_message(10)
    assert first is not None and second is not None
    with pytest.raises(LeaseLost, match="generation 1 is stale"):
        store.complete_message(first, Handler())
    assert ledger.totals(store).count == 0  # the late effect was rolled back with the refused ACK
    assert store.complete_message(second, Handler()).outcome is Outcome.DONE
    assert ledger.totals(store).count == 1


def test_an_expired_lease_is_fenced_even_when_no_one_claimed_again(store: Store, clock: ModelClock) -> None:
    fill(store, "E0001")
    claimed = store.claim_message(10)
    assert claimed is not None
    clock.advance(10)
    with pytest.raises(LeaseLost, match="the lease ended at 1010"):
        store.complete_message(claimed, Handler())
    assert ledger.totals(store).count == 0 and store.message("E0001").state == "leased"


@pytest.mark.parametrize("error, state, code", [
    (PermanentFailure("no_such_sku", "unknown"), "dead", "no_such_sku"),
    (TemporaryFailure("upstream_down", "later"), "ready", "upstream_down"),
    (KeyError("oops"), "ready", "handler_error"),
])
def test_a_refusal_undoes_the_handlers_writes_and_is_recorded(store: Store, error: Exception, state: str,
                                                               code: str) -> None:
    fill(store, "E0001")
    claimed = store.claim_message(30)
    assert claimed is not None

    def refusing(tx: Any, message: Any) -> None:
        Handler()(tx, message)  # a partial effect, then the refusal
        raise error

    completion = store.complete_message(claimed, refusing)
    assert (completion.outcome.value, completion.error) == ({"dead": "dead", "ready": "retry"}[state], code)
    stored = store.message("E0001")
    assert (stored.state, stored.last_error) == (state, code)
    assert ledger.totals(store).count == 0


def test_a_refusal_after_the_lease_was_lost_changes_nothing(store: Store, clock: ModelClock) -> None:
    fill(store, "E0001")
    first = store.claim_message(10)
    clock.advance(10)
    assert first is not None and store.claim_message(10) is not None

    def refusing(tx: Any, message: Any) -> None:
        raise PermanentFailure("bad", "refused late")

    with pytest.raises(LeaseLost):
        store.complete_message(first, refusing)
    assert store.message("E0001").state == "leased"  # the second lease is untouched


def test_wrong_arguments_are_refused_before_any_transaction(store: Store) -> None:
    with pytest.raises(TypeError, match="takes what claim_message returned, got Lease"):
        store.complete_message(Lease("E0001", 1, 1, 2000), Handler())  # type: ignore[arg-type]
    fill(store, "E0001")
    claimed = store.claim_message(30)
    assert isinstance(claimed, Claimed)
    with pytest.raises(TypeError, match="handler must be callable"):
        store.complete_message(claimed, "ledger")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="lease_seconds must be 1"):
        store.claim_message(0)


def test_the_worker_path_with_the_engines_own_clock(store: Store) -> None:
    # No clock given: on PostgreSQL the statements read the server's clock
    # themselves; on SQLite it is this host's clock.
    fill(store, "E0001", "E0002")
    with Store(store.target) as real_time:
        claimed = real_time.claim_message(60)
        assert claimed is not None and claimed.lease.lease_until > 1_700_000_000
        assert real_time.complete_message(claimed, Handler()).outcome is Outcome.DONE
        assert real_time.message("E0001").done_at is not None
        assert work(real_time, Handler()).done == 1
    assert ledger.totals(store).count == 2


CRASHING_WORKER = """
import os, signal, sys
from queue_core import Handler, ModelClock, Store, work
from queue_core.testing.faults import FaultPlan
plan = FaultPlan().arm("complete.after_effect", lambda: os.kill(os.getpid(), signal.SIGKILL))
store = Store(sys.argv[1], clock=ModelClock(1000), probe=plan)
work(store, Handler(), lease_seconds=30)
"""


@pytest.mark.timeout(60)
def test_a_worker_killed_between_effect_and_commit_leaves_no_effect(store: Store, clock: ModelClock) -> None:
    fill(store, "E0001")
    child = subprocess.run([sys.executable, "-c", CRASHING_WORKER, str(store.target)],
                           capture_output=True, text=True, timeout=50)
    assert child.returncode == -9, child.stderr  # SIGKILL, after the effect was written
    assert ledger.totals(store).count == 0  # never committed
    stored = store.message("E0001")
    assert (stored.state, stored.attempts, stored.generation) == ("leased", 1, 1)  # the claim had committed
    clock.advance(30)  # its lease runs out; a fresh worker finishes it, once
    assert work(store, Handler()).done == 1
    assert ledger.totals(store).count == 1 and store.message("E0001").expired_leases == 1


CRASHING_BATCH_WORKER = """
import os, signal, sys
from queue_core import Handler, ModelClock, Store, work
from queue_core.testing.faults import FaultPlan
effects = []
def second_effect_kills():
    effects.append(1)
    if len(effects) == 2:
        os.kill(os.getpid(), signal.SIGKILL)
plan = FaultPlan().arm("complete.after_effect", second_effect_kills)
store = Store(sys.argv[1], clock=ModelClock(1000), probe=plan)
work(store, Handler(), lease_seconds=30, batch=3)
"""


@pytest.mark.timeout(60)
def test_a_worker_killed_inside_a_batch_leaves_no_effect_of_it(store: Store, clock: ModelClock) -> None:
    # Killed with two effects sent (on PostgreSQL perhaps not yet answered)
    # and the batch's ACK not: nothing of the batch is kept.
    fill(store, "E0001", "E0002", "E0003")
    child = subprocess.run([sys.executable, "-c", CRASHING_BATCH_WORKER, str(store.target)],
                           capture_output=True, text=True, timeout=50)
    assert child.returncode == -9, child.stderr
    assert ledger.totals(store).count == 0
    assert {(m.state, m.generation) for m in store.messages()} == {("leased", 1)}
    clock.advance(30)
    assert work(store, Handler(), batch=3).done == 3
    assert [e[0] for e in ledger.effects(store)] == ["E0001", "E0002", "E0003"]


# ------------------------------------------------------- the batched path

def test_claim_messages_leases_what_claim_many_leases(store: Store, tmp_path: Path, clock: ModelClock) -> None:
    twin = Store(tmp_path / "twin.sqlite3", clock=clock)
    try:
        for queue in (store, twin):
            queue.enqueue("\n".join(line(f"E{n:04d}") for n in range(1, 8)) + "\n")
        for _ in range(5):
            many = twin.claim_many(3, 10)
            batch = store.claim_messages(3, 10)
            assert [claimed.lease for claimed in batch] == many
            clock.advance(11)
        assert store.messages() == twin.messages()
    finally:
        twin.close()


def test_complete_many_with_claimed_messages_keeps_each_message_to_itself(store: Store,
                                                                          clock: ModelClock) -> None:
    fill(store, "E0001", "E0002", "E0003")
    store.enqueue(line("E0004", category="toy") + "\n")  # the ledger refuses toys: dead
    batch = store.claim_messages(4, 10)
    assert [claimed.lease.event_id for claimed in batch] == ["E0001", "E0002", "E0003", "E0004"]
    # as if E0001's lease had been taken over by another claim meanwhile
    store.write(lambda tx: tx.execute("UPDATE messages SET generation = generation + 1 WHERE event_id = ?",
                                      ("E0001",)))
    outcomes = [c.outcome for c in store.complete_many(batch, Handler())]
    assert outcomes == [Outcome.LEASE_LOST, Outcome.DONE, Outcome.DONE, Outcome.DEAD]
    assert [e[0] for e in ledger.effects(store)] == ["E0002", "E0003"]
    assert store.message("E0004").last_error == "invalid_payload"


def test_a_usual_batch_writes_every_effect_then_one_ack_for_all(store: Store) -> None:
    # The usual case goes out together (one round trip on PostgreSQL): every
    # effect, then one fenced ACK; the points show the order, unlike the
    # one-at-a-time path's effect, ACK, effect, ACK.
    fill(store, "E0001", "E0002", "E0003")
    tracer = Tracer()
    with Store(store.target, clock=ModelClock(1000), probe=tracer) as traced:
        outcomes = [c.outcome for c in traced.complete_many(traced.claim_messages(3, 10), Handler())]
    assert outcomes == [Outcome.DONE] * 3
    assert [p for p in tracer.reached if p.startswith("complete.")] == (
        ["complete.after_effect"] * 3 + ["complete.after_update"] * 3)
    assert [e[0] for e in ledger.effects(store)] == ["E0001", "E0002", "E0003"]
    assert {(m.state, m.done_at) for m in store.messages()} == {("done", 1000)}


def test_a_handler_reading_inside_a_batch_sees_the_effects_before_its_own(store: Store) -> None:
    # On PostgreSQL a read waits for the answers to what was sent before it.
    fill(store, "E0001", "E0002", "E0003")
    seen: list[int] = []

    def counting(tx: Any, message: Any) -> None:
        seen.append(tx.execute("SELECT count(*) FROM effects").fetchone()[0])
        Handler()(tx, message)

    outcomes = [c.outcome for c in store.complete_many(store.claim_messages(3, 10), counting)]
    assert outcomes == [Outcome.DONE] * 3 and seen == [0, 1, 2]


def test_a_statement_failing_in_a_batch_is_that_messages_refusal_only(store: Store) -> None:
    # E0002's effect row is there already: the handler's INSERT fails at the
    # server (on PostgreSQL only when the batch's answers come back). The batch
    # is done again one message at a time, which records it as E0002's refusal.
    fill(store, "E0001", "E0002", "E0003")
    store.write(lambda tx: tx.execute(
        "INSERT INTO effects (event_id, category, amount_cents) VALUES ('E0002', 'book', 1)"))
    tracer = Tracer()
    with Store(store.target, clock=ModelClock(1000), probe=tracer) as traced:
        completions = traced.complete_many(traced.claim_messages(3, 10), Handler())
    assert [c.outcome for c in completions] == [Outcome.DONE, Outcome.RETRY, Outcome.DONE]
    assert completions[1].error == "handler_error" and "constraint" in (completions[1].detail or "")
    assert sorted((e[0], e[2]) for e in ledger.effects(store)) == [("E0001", 100), ("E0002", 1), ("E0003", 100)]
    assert "complete.after_update" in tracer.reached  # the one-at-a-time path recorded it


def test_a_probe_raising_inside_a_batch_rolls_the_whole_transaction_back(store: Store) -> None:
    fill(store, "E0001", "E0002", "E0003")
    hits: list[str] = []

    def second_effect_fails(point: str) -> None:
        if point == "complete.after_effect":
            hits.append(point)
            if len(hits) == 2:
                raise RuntimeError("injected at the second effect")

    with Store(store.target, clock=ModelClock(1000), probe=second_effect_fails) as faulty:
        batch = faulty.claim_messages(3, 10)
        with pytest.raises(RuntimeError, match="injected"):
            faulty.complete_many(batch, Handler())
    assert len(hits) == 2  # raised, not taken for a refusal and tried again
    assert ledger.effects(store) == []
    assert {m.state for m in store.messages()} == {"leased"}


# ------------------------------------------------------------- release

def test_release_gives_the_message_back_ready_at_its_place_without_spending_the_attempt(
        store: Store, clock: ModelClock) -> None:
    fill(store, "E0001", "E0002")
    claimed = store.claim_message(30)
    assert claimed is not None and claimed.lease.event_id == "E0001"
    assert store.release(claimed.lease).outcome is Outcome.RELEASED
    stored = store.message("E0001")
    assert (stored.state, stored.attempts, stored.generation, stored.lease_until) == ("ready", 0, 1, None)
    with pytest.raises(LeaseLost, match="E0001 is ready, not leased"):
        store.complete_message(claimed, Handler())  # the released lease is fenced
    again = store.claim_message(30)  # first in the claim order still
    assert again is not None and again.lease == Lease("E0001", 2, 1, 1030)
    assert store.complete_message(again, Handler()).outcome is Outcome.DONE
    assert [e[0] for e in ledger.effects(store)] == ["E0001"]


def test_release_is_fenced_like_a_completion(store: Store, clock: ModelClock) -> None:
    fill(store, "E0001")
    claimed = store.claim_message(30)
    assert claimed is not None
    clock.advance(30)  # the lease ran out
    with pytest.raises(LeaseLost, match="the lease ended at 1030"):
        store.release(claimed.lease)
    taken = store.claim_message(30)
    assert taken is not None and taken.lease.generation == 2
    with pytest.raises(LeaseLost, match="generation 1 is stale"):
        store.release(claimed.lease)
    assert store.message("E0001").state == "leased" and store.message("E0001").generation == 2
    with pytest.raises(TypeError):
        store.release("E0001")  # type: ignore[arg-type]


@pytest.mark.parametrize("wanted", [1, 2, 3])
def test_a_claim_takes_exactly_what_it_asks_for(store: Store, wanted: int) -> None:
    # On PostgreSQL the claim's locking subquery must run once: rescanned (as a nested
    # loop may rescan an IN subquery) it locked and leased 4 of 4 when asked for 1.
    store.enqueue("\n".join(line(f"E000{n}") for n in range(1, 7)))
    taken = store.claim_messages(wanted) if wanted > 1 else [store.claim_message()]
    assert len(taken) == wanted
    assert store.status().to_dict()["messages"] == {"ready": 6 - wanted, "leased": wanted, "done": 0, "dead": 0}
