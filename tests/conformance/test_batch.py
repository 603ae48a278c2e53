"""The batched path: ``claim_many``, ``complete_many``, ``work(batch=k)`` and ``queue-core work --batch K``.

Real SQLite files and real processes; only the clock is modelled. The batched
path must be the simple path with fewer commits: every lease is the one
``claim`` would have given, every message's effect and ACK are kept or undone
together, and ``work(batch=k)`` leaves the same final state (money, effects,
states) as ``work()`` on the same input. A batch interrupted as a whole
(KeyboardInterrupt) commits nothing.

Files that are copied or compared here are first closed by every store that
wrote them (``with Store(...)``).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from queue_core import (
    Handler,
    Lease,
    Message,
    ModelClock,
    Outcome,
    PermanentFailure,
    Store,
    TemporaryFailure,
    Tx,
    WorkSummary,
    ledger,
    work,
)
from queue_core.store import HANDLER_ERROR, LEASE_EXPIRED, MAX_BATCH
from proof.invariants import check_invariants, read_file

from ..support import batch, line, money

ROOT = Path(__file__).resolve().parents[2]
DEMO_BATCH = ROOT / "snippets" / "demo.jsonl"
SUMMARY_KEYS = {"claimed", "done", "retried", "dead", "lease_lost"}
QUEUE_CORE = (sys.executable, "-m", "queue_core")


def leased(store: Store) -> list[tuple[str, int, int, int | None]]:
    """(event id, attempts, generation, lease_until) of every leased message."""
    return [(m.event_id, m.attempts, m.generation, m.lease_until) for m in store.messages("leased")]


def states(store: Store) -> dict[str, tuple[str, int, int, str | None]]:
    return {m.event_id: (m.state, m.attempts, m.generation, m.last_error) for m in store.messages()}


def five(store: Store) -> None:
    store.enqueue(batch(*(line(f"E000{n}", "pen", n) for n in range(1, 6))))


# ==================================================================== claim_many


def test_claim_many_leases_up_to_count_in_order_of_available_at_then_event_id(
    store: Store, clock: ModelClock
) -> None:
    store.enqueue(batch(line("E0005"), line("E0003")))  # available at 1000
    clock.set(1001)
    store.enqueue(batch(line("E0002"), line("E0001"), line("E0004")))  # available at 1001
    clock.set(1010)
    first = store.claim_many(3, lease_seconds=5)
    assert [lease.event_id for lease in first] == ["E0003", "E0005", "E0001"]
    assert all((lease.generation, lease.attempt, lease.lease_until) == (1, 1, 1015) for lease in first)
    second = store.claim_many(3, lease_seconds=5)
    assert [lease.event_id for lease in second] == ["E0002", "E0004"]  # fewer than count: what there is
    assert store.claim_many(3) == []
    assert [m[0] for m in leased(store)] == ["E0001", "E0002", "E0003", "E0004", "E0005"]


# The claim order is priority DESC, available_at, event_id: here each key
# decides once, and neither the ids nor the times alone give that order.
PRIORITY_ORDER = ["E0004", "E0003", "E0001", "E0005", "E0002"]
OLDEST_FIRST = ["E0001", "E0002", "E0004", "E0003", "E0005"]  # without priority


def five_priorities(store: Store, clock: ModelClock) -> None:
    store.enqueue(line("E0001"))  # priority 0, at 1000
    store.enqueue(line("E0002"), priority=-5)  # the lowest
    store.enqueue(line("E0004"), priority=5)  # the highest, the older of two
    clock.advance(1)
    store.enqueue(line("E0003"), priority=5)
    store.enqueue(line("E0005"))


def test_a_batch_comes_back_and_is_completed_in_the_claim_order_priority_first(
    store: Store, clock: ModelClock
) -> None:
    five_priorities(store, clock)
    leases = store.claim_many(5, lease_seconds=60)
    assert [lease.event_id for lease in leases] == PRIORITY_ORDER
    for lease in leases:  # given back: each keeps its place and its attempt
        store.release(lease)
    claimed = store.claim_messages(5, lease_seconds=60)
    assert [c.lease.event_id for c in claimed] == PRIORITY_ORDER
    seen: list[str] = []

    def record(tx: Tx, message: Message) -> None:
        seen.append(message.event_id)

    done = store.complete_many(claimed, record)
    assert seen == PRIORITY_ORDER  # each handler ran in the claim order
    assert [(c.event_id, c.outcome) for c in done] == [(e, Outcome.DONE) for e in PRIORITY_ORDER]


def test_a_worker_in_batches_completes_in_the_claim_order_priority_first(
    store: Store, clock: ModelClock
) -> None:
    five_priorities(store, clock)
    seen: list[str] = []

    def record(tx: Tx, message: Message) -> None:
        seen.append(message.event_id)

    assert work(store, record, batch=5, lease_seconds=60).done == 5
    assert seen == PRIORITY_ORDER


def test_the_batch_order_test_catches_a_sort_without_priority(
    store: Store, clock: ModelClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the negative control of the two tests above: the sort this test replaced
    from queue_core import claims

    def without_priority(claimed: Any) -> tuple[int, str]:
        return claimed.message.available_at, claimed.message.event_id

    monkeypatch.setattr(claims, "_claim_order", without_priority)
    five_priorities(store, clock)
    assert [lease.event_id for lease in store.claim_many(5, lease_seconds=60)] == OLDEST_FIRST


def test_each_lease_of_a_batch_has_its_own_generation_and_attempt(store: Store, clock: ModelClock) -> None:
    store.enqueue(batch(line("E0001"), line("E0002"), line("E0003")))
    once = store.claim(lease_seconds=2)  # E0001, generation 1: it will expire
    assert once is not None and once.event_id == "E0001"
    clock.set(1002)
    twice = store.claim_many(2, lease_seconds=2)  # E0001 again (expired) and E0002
    assert [(lease.event_id, lease.generation, lease.attempt) for lease in twice] == [
        ("E0001", 2, 2), ("E0002", 1, 1)]
    clock.set(1004)
    third = store.claim_many(5, lease_seconds=2)
    assert [(lease.event_id, lease.generation, lease.attempt, lease.lease_until) for lease in third] == [
        ("E0001", 3, 3, 1006), ("E0002", 2, 2, 1006), ("E0003", 1, 1, 1006)]
    assert leased(store) == [("E0001", 3, 3, 1006), ("E0002", 2, 2, 1006), ("E0003", 1, 1, 1006)]


def test_claim_many_skips_a_live_lease_and_a_backoff(store: Store, clock: ModelClock) -> None:
    five(store)
    live = store.claim(lease_seconds=100)  # E0001: leased until 1100
    backing_off = store.claim(lease_seconds=100)  # E0002: fails, available again at 1001
    assert live is not None and backing_off is not None
    assert store.fail(backing_off, "timeout").available_at == 1001
    got = store.claim_many(10, lease_seconds=5)
    assert [lease.event_id for lease in got] == ["E0003", "E0004", "E0005"]
    clock.set(1001)
    assert [(lease.event_id, lease.attempt) for lease in store.claim_many(10)] == [("E0002", 2)]
    assert store.claim_many(10) == []


def exhausted_template(folder: Path) -> Path:
    """E0001's three leases have all expired, E0002's first one has; E0003..E0005 are ready (now 1003)."""
    folder.mkdir(parents=True, exist_ok=True)
    db = folder / "template.sqlite3"
    clock = ModelClock(1000)
    with Store(db, clock=clock) as store:
        ledger.install(store)
        five(store)
        for now in (1000, 1001, 1002):
            clock.set(now)
            lease = store.claim(lease_seconds=1)
            assert lease is not None and lease.event_id == "E0001"
        lease = store.claim(lease_seconds=1)
        assert lease is not None and (lease.event_id, lease.lease_until) == ("E0002", 1003)
    return db


def twins(tmp_path: Path, template: Path) -> tuple[Path, Path]:
    one, many = tmp_path / "one.sqlite3", tmp_path / "many.sqlite3"
    shutil.copyfile(template, one)
    shutil.copyfile(template, many)
    return one, many


@pytest.mark.parametrize("count", [1, 2, 3, 10])
def test_claim_many_applies_expiry_and_dead_exactly_like_claim(tmp_path: Path, count: int) -> None:
    one, many = twins(tmp_path, exhausted_template(tmp_path / "template"))
    with Store(one, clock=ModelClock(1003), create=False) as store:
        by_claim: list[Lease] = []
        while len(by_claim) < count and (lease := store.claim(lease_seconds=4)) is not None:
            by_claim.append(lease)
    with Store(many, clock=ModelClock(1003), create=False) as store:
        by_batch = store.claim_many(count, lease_seconds=4)
        assert store.message("E0001").state == "dead"  # sent to dead inside the batch
        assert store.message("E0001").last_error == LEASE_EXPIRED
    assert by_batch == by_claim
    assert by_batch[0] == Lease("E0002", 2, 2, 1007)  # after E0001 went dead, the search went on
    assert len(by_batch) == min(count, 4)
    assert read_file(many).rows() == read_file(one).rows()
    assert check_invariants(many, finished=False) == []


def test_claim_many_returns_nothing_when_nothing_is_available(tmp_path: Path, store: Store,
                                                              clock: ModelClock) -> None:
    assert store.claim_many(5) == []  # an empty queue
    store.enqueue(line("E0001"))
    lease = store.claim(lease_seconds=10)
    assert lease is not None
    assert store.claim_many(5) == []  # its only message is leased
    store.fail(lease, "timeout")
    assert store.claim_many(5) == []  # backing off until 1001
    clock.set(1001)
    again = store.claim_many(5)
    assert [(lease.event_id, lease.attempt) for lease in again] == [("E0001", 2)]
    assert store.complete_many(again, Handler())[0].outcome is Outcome.DONE
    clock.set(9999)
    assert store.claim_many(MAX_BATCH) == []  # everything is done
    # Only a message whose last lease expired: like claim(), nothing is leased and it goes to dead.
    db = tmp_path / "only-exhausted.sqlite3"
    other_clock = ModelClock(1000)
    with Store(db, clock=other_clock) as other:
        other.enqueue(line("E0007"))
        for now in (1000, 1001, 1002):
            other_clock.set(now)
            assert other.claim(lease_seconds=1) is not None
        other_clock.set(1003)
        assert other.claim_many(3) == []
        dead = other.message("E0007")
        assert (dead.state, dead.attempts, dead.last_error) == ("dead", 3, LEASE_EXPIRED)


@pytest.mark.one_engine  # refused before any transaction: nothing of the engine to prove
@pytest.mark.parametrize("count, error", [
    ("3", TypeError), (3.0, TypeError), (True, TypeError), (None, TypeError),
    (0, ValueError), (-1, ValueError), (MAX_BATCH + 1, ValueError),
])
def test_claim_many_validates_its_count(store: Store, count: Any, error: type[Exception]) -> None:
    five(store)
    with pytest.raises(error, match="count"):
        store.claim_many(count)
    with pytest.raises(error, match="count"):
        with store.transaction() as tx:
            store.claim_many_tx(tx, count)
    assert leased(store) == []  # nothing was claimed
    with pytest.raises(ValueError, match="lease_seconds"):
        store.claim_many(2, lease_seconds=0)
    assert leased(store) == []
    assert len(store.claim_many(MAX_BATCH)) == 5  # the largest batch is allowed


# ================================================================= complete_many


def claimed(store: Store, count: int = 3, lease_seconds: int = 30) -> list[Lease]:
    leases = store.claim_many(count, lease_seconds=lease_seconds)
    assert len(leases) == count
    return leases


def test_complete_many_keeps_each_messages_effect_and_ack_together(store: Store) -> None:
    five(store)
    leases = claimed(store)
    results = store.complete_many(leases, Handler())
    assert [(r.event_id, r.outcome, r.error) for r in results] == [
        ("E0001", Outcome.DONE, None), ("E0002", Outcome.DONE, None), ("E0003", Outcome.DONE, None)]
    assert ledger.effects(store) == [("E0001", "pen", 1), ("E0002", "pen", 2), ("E0003", "pen", 3)]
    assert {e: s[0] for e, s in states(store).items()} == {
        "E0001": "done", "E0002": "done", "E0003": "done", "E0004": "ready", "E0005": "ready"}
    assert store.complete_many([], Handler()) == []


def test_a_stale_lease_in_a_batch_is_undone_alone_and_the_others_commit(store: Store, clock: ModelClock) -> None:
    five(store)
    stale = store.claim(lease_seconds=2)  # E0001, generation 1
    assert stale is not None
    clock.set(1002)
    current = store.claim(lease_seconds=30)  # E0001, generation 2: another worker's
    assert current is not None and (current.event_id, current.generation) == ("E0001", 2)
    others = claimed(store, 2)  # E0002, E0003
    results = store.complete_many([others[0], stale, others[1]], Handler())
    assert [(r.event_id, r.outcome, r.error) for r in results] == [
        ("E0002", Outcome.DONE, None), ("E0001", Outcome.LEASE_LOST, "lease_lost"), ("E0003", Outcome.DONE, None)]
    assert results[1].detail is not None and "generation 1 is stale" in results[1].detail
    assert ledger.effects(store) == [("E0002", "pen", 2), ("E0003", "pen", 3)]
    assert leased(store) == [("E0001", 2, 2, 1032)]  # the current lease is untouched
    assert store.complete(current, Handler()).outcome is Outcome.DONE  # and still completes


def test_a_lease_that_runs_out_during_the_batch_takes_only_its_own_effect_back(
    store: Store, clock: ModelClock
) -> None:
    five(store)
    short = store.claim_many(1, lease_seconds=2)  # E0001: until 1002
    long = store.claim_many(2, lease_seconds=100)  # E0002, E0003: until 1100
    base = Handler()

    def slow_on_e0001(tx: Tx, message: Message) -> None:
        base(tx, message)  # the effect is written ...
        if message.event_id == "E0001":
            clock.set(1005)  # ... and then the work took longer than E0001's lease

    results = store.complete_many(short + long, slow_on_e0001)
    assert [(r.event_id, r.outcome) for r in results] == [
        ("E0001", Outcome.LEASE_LOST), ("E0002", Outcome.DONE), ("E0003", Outcome.DONE)]
    assert ledger.effects(store) == [("E0002", "pen", 2), ("E0003", "pen", 3)]  # E0001's INSERT is undone
    assert states(store)["E0001"] == ("leased", 1, 1, None)
    again = store.claim_many(5, lease_seconds=5)  # its lease has ended: the next claim re-issues it
    assert [(lease.event_id, lease.generation) for lease in again] == [("E0001", 2), ("E0004", 1), ("E0005", 1)]


class Refusing:
    """Writes the ledger's effect, then refuses one message: its partial write must be undone."""

    def __init__(self, event_id: str, failure: BaseException) -> None:
        self.event_id, self.failure, self.base = event_id, failure, Handler()

    def __call__(self, tx: Tx, message: Message) -> None:
        self.base(tx, message)
        if message.event_id == self.event_id:
            raise self.failure


def test_a_permanent_refusal_rolls_back_its_own_writes_and_the_others_commit(store: Store) -> None:
    five(store)
    results = store.complete_many(claimed(store), Refusing("E0002", PermanentFailure("rejected", "no pens today")))
    assert [(r.event_id, r.outcome, r.error, r.detail) for r in results] == [
        ("E0001", Outcome.DONE, None, None), ("E0002", Outcome.DEAD, "rejected", "no pens today"),
        ("E0003", Outcome.DONE, None, None)]
    assert ledger.effects(store) == [("E0001", "pen", 1), ("E0003", "pen", 3)]
    dead = store.message("E0002")
    assert (dead.state, dead.last_error, dead.last_detail) == ("dead", "rejected", "no pens today")


def test_a_temporary_refusal_retries_that_message_only(store: Store) -> None:
    five(store)
    results = store.complete_many(claimed(store), Refusing("E0003", TemporaryFailure("timeout")))
    assert [(r.event_id, r.outcome, r.error, r.available_at) for r in results] == [
        ("E0001", Outcome.DONE, None, None), ("E0002", Outcome.DONE, None, None),
        ("E0003", Outcome.RETRY, "timeout", 1001)]
    assert ledger.effects(store) == [("E0001", "pen", 1), ("E0002", "pen", 2)]
    assert states(store)["E0003"] == ("ready", 1, 1, "timeout")


def test_an_unexpected_handler_exception_is_a_handler_error_of_that_message_only(store: Store) -> None:
    five(store)
    results = store.complete_many(claimed(store), Refusing("E0001", RuntimeError("disk on fire")))
    assert [(r.event_id, r.outcome, r.error) for r in results] == [
        ("E0001", Outcome.RETRY, HANDLER_ERROR), ("E0002", Outcome.DONE, None), ("E0003", Outcome.DONE, None)]
    assert results[0].detail == "RuntimeError: disk on fire"
    assert ledger.effects(store) == [("E0002", "pen", 2), ("E0003", "pen", 3)]
    failed = store.message("E0001")
    assert (failed.state, failed.last_error, failed.last_detail) == ("ready", HANDLER_ERROR,
                                                                     "RuntimeError: disk on fire")


def test_a_keyboard_interrupt_mid_batch_rolls_back_the_whole_batch(tmp_path: Path) -> None:
    db = tmp_path / "q.sqlite3"
    clock = ModelClock(1000)
    with Store(db, clock=clock) as store:
        ledger.install(store)
        five(store)
        leases = claimed(store, 3, lease_seconds=10)
        before = read_file(db).rows()
        with pytest.raises(KeyboardInterrupt):
            store.complete_many(leases, Refusing("E0002", KeyboardInterrupt()))
        # Nothing committed: not E0001's effect and ACK, which came before the interrupt.
        assert read_file(db).rows() == before
        assert ledger.effects(store) == []
        assert leased(store) == [("E0001", 1, 1, 1010), ("E0002", 1, 1, 1010), ("E0003", 1, 1, 1010)]
        assert store.claim_many(5, lease_seconds=10) == [Lease("E0004", 1, 1, 1010), Lease("E0005", 1, 1, 1010)]
        # The leases stay leased until they expire, then the next claim takes them with a new generation.
        clock.set(1010)
        again = store.claim_many(5, lease_seconds=10)
        assert [(lease.event_id, lease.generation, lease.attempt) for lease in again] == [
            ("E0001", 2, 2), ("E0002", 2, 2), ("E0003", 2, 2), ("E0004", 2, 2), ("E0005", 2, 2)]
        assert all(r.outcome is Outcome.DONE for r in store.complete_many(again, Handler()))
        assert money(store) == (5, 15)
    assert check_invariants(db, expected_total=15) == []


def test_complete_many_validates_before_it_writes(store: Store) -> None:
    five(store)
    leases = claimed(store)
    with pytest.raises(TypeError, match="nothing was available"):
        store.complete_many([leases[0], None], Handler())  # type: ignore[list-item]
    with pytest.raises(TypeError, match="handler must be callable"):
        store.complete_many(leases, "Handler")  # type: ignore[arg-type]
    too_many = leases * (MAX_BATCH // 3 + 1)
    with pytest.raises(ValueError, match=f"at most {MAX_BATCH}"):
        store.complete_many(too_many, Handler())
    assert ledger.effects(store) == []
    assert [m[0] for m in leased(store)] == ["E0001", "E0002", "E0003"]


# ====================================================================== work(batch=k)


class Flaky:
    """A deterministic handler with retries: it fails by the message's stored attempt, whatever the path.

    A ``flaky`` category fails temporarily on attempt 1 (done on 2); ``hat`` always fails temporarily
    (dead when the budget is spent); ``mug`` raises an unexpected error on attempt 1 (handler_error, then
    done); ``toy`` is refused by the ledger (dead at once). Everything else is the ledger's effect.
    """

    def __init__(self, flaky: str) -> None:
        self.flaky = flaky
        self.base = Handler.with_categories({"hat", "mug"})

    def __call__(self, tx: Tx, message: Message) -> None:
        category = message.payload_object.get("category")
        self.base(tx, message)  # written first: every refusal below must take it back
        if category == self.flaky and message.attempts < 2:
            raise TemporaryFailure("timeout", "the bag service is slow")
        if category == "hat":
            raise TemporaryFailure("hat_service_down")
        if category == "mug" and message.attempts < 2:
            raise RuntimeError("mug glitch")


def mixed_events(count: int) -> str:
    categories = ("book", "pen", "bag", "hat", "mug", "toy", "book", "pen")
    return batch(*(line(f"E{n:04d}", categories[n % len(categories)], n) for n in range(1, count + 1)))


def drain(db: Path, handler: Flaky, batch_size: int, *,
          lease_seconds: int = 30, max_passes: int = 100) -> WorkSummary:
    """Work the queue to its end, moving model time to the next due moment; the summaries added up."""
    clock = ModelClock(1000)
    total = dict.fromkeys(SUMMARY_KEYS, 0)
    with Store(db, clock=clock, create=False) as store:
        ledger.install(store)
        for _ in range(max_passes):
            summary = work(store, handler, lease_seconds=lease_seconds, batch=batch_size)
            for key, value in summary.to_dict().items():
                total[key] += value
            pending = [m for m in store.messages() if m.state in ("ready", "leased")]
            if not pending:
                return WorkSummary(**total)
            clock.set(max(min(max(m.available_at, m.lease_until or 0) for m in pending), clock.now() + 1))
    raise AssertionError("the queue was not finished")


def queue_file(path: Path, data: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with Store(path, clock=ModelClock(1000)) as store:
        ledger.install(store)
        store.enqueue(data)
    return path


INPUTS: dict[str, tuple[Callable[[], str | bytes], str]] = {  # the batch, and its flaky category
    "demo": (DEMO_BATCH.read_bytes, "pen"),
    "mixed": (lambda: mixed_events(60), "bag"),
}


@pytest.mark.parametrize("input_name", list(INPUTS))
@pytest.mark.parametrize("batch_size", [2, 3, 8, MAX_BATCH])
def test_work_in_batches_ends_exactly_as_work_one_by_one(tmp_path: Path, input_name: str,
                                                         batch_size: int) -> None:
    read, flaky = INPUTS[input_name]
    data = read()
    simple = queue_file(tmp_path / "simple" / "q.sqlite3", data)
    batched = queue_file(tmp_path / "batched" / "q.sqlite3", data)
    by_one = drain(simple, Flaky(flaky), 1)
    by_batch = drain(batched, Flaky(flaky), batch_size)
    assert by_batch == by_one
    final = read_file(batched)
    assert final.rows() == read_file(simple).rows()  # every field of every message, every effect
    assert check_invariants(final) == []
    assert by_one.retried > 0 and by_one.dead > 0  # the input really takes both paths of a refusal
    if input_name == "demo":
        done = {m.event_id: (m.state, m.attempts, m.last_error) for m in final.messages}
        assert done == {"E0001": ("done", 1, None), "E0002": ("done", 2, "timeout"), "E0003": ("done", 1, None),
                        "E0004": ("dead", 1, "invalid_payload")}
        assert by_batch == WorkSummary(claimed=5, done=3, retried=1, dead=1, lease_lost=0)
        assert final.total_cents == 17000
    else:
        by_state = {m.event_id: m.state for m in final.messages}
        assert {e for e, s in by_state.items() if s == "dead"} == {
            f"E{n:04d}" for n in range(1, 61) if n % 8 in (3, 5)}  # hat (budget spent) and toy
        hats = [m for m in final.messages if m.payload_object["category"] == "hat"]
        assert all((m.attempts, m.last_error) == (3, "hat_service_down") for m in hats)
        mugs = [m for m in final.messages if m.payload_object["category"] == "mug"]
        assert all((m.state, m.attempts, m.last_error) == ("done", 2, HANDLER_ERROR) for m in mugs)


@pytest.mark.parametrize("max_messages", [0, 1, 3, 7, 8, 9, 25])
@pytest.mark.parametrize("batch_size", [2, 4, 8])
def test_work_in_batches_claims_exactly_max_messages(tmp_path: Path, max_messages: int, batch_size: int) -> None:
    data = mixed_events(12)
    simple = queue_file(tmp_path / "simple" / "q.sqlite3", data)
    batched = queue_file(tmp_path / "batched" / "q.sqlite3", data)
    results = []
    for db, size in ((simple, 1), (batched, batch_size)):
        with Store(db, clock=ModelClock(1000), create=False) as store:
            results.append(work(store, Flaky("bag"), max_messages=max_messages, batch=size))
    assert results[0] == results[1]
    assert results[1].claimed == min(max_messages, 12)
    assert read_file(batched).rows() == read_file(simple).rows()
    untouched = [m for m in read_file(batched).messages if m.attempts == 0]
    assert [m.event_id for m in untouched] == [f"E{n:04d}" for n in range(min(max_messages, 12) + 1, 13)]


@pytest.mark.one_engine  # refused before any transaction: nothing of the engine to prove
@pytest.mark.parametrize("bad", [0, -1, MAX_BATCH + 1, True, "8", 2.0])
def test_work_refuses_a_batch_size_out_of_range(store: Store, bad: Any) -> None:
    five(store)
    with pytest.raises(ValueError, match="batch must be an integer"):
        work(store, Handler(), batch=bad)
    assert states(store)["E0001"] == ("ready", 0, 0, None)


# ===================================================================== the command line


def cli(cwd: Path, *args: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*QUEUE_CORE, *map(str, args)], cwd=cwd, capture_output=True, text=True, timeout=120)


def cli_json(cwd: Path, *args: object) -> Any:
    proc = cli(cwd, *args)
    assert proc.returncode == 0, (args, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    return json.loads(proc.stdout)


def test_queue_core_work_batch_prints_the_same_summary_as_work(tmp_path: Path) -> None:
    results = {}
    for name, extra in (("simple", ()), ("batched", ("--batch", "3"))):
        folder = tmp_path / name
        folder.mkdir()
        shutil.copyfile(DEMO_BATCH, folder / "demo.jsonl")
        assert cli_json(folder, "--db", "q.sqlite3", "--now", 1000, "enqueue", "demo.jsonl") == {
            "accepted": 4, "duplicates": 1}
        summary = cli_json(folder, "--db", "q.sqlite3", "--now", 1000, "work", *extra)
        assert set(summary) == SUMMARY_KEYS and all(isinstance(v, int) for v in summary.values())
        results[name] = (summary,
                         cli_json(folder, "--db", "q.sqlite3", "--now", 1000, "status", "--json"),
                         cli_json(folder, "--db", "q.sqlite3", "dead", "--json"),
                         cli_json(folder, "--db", "q.sqlite3", "--now", 2000, "work", "--batch", "1000",
                                  "--category", "toy"))
    assert results["batched"] == results["simple"]
    summary, status, dead, again = results["batched"]
    assert summary == {"claimed": 4, "done": 3, "retried": 0, "dead": 1, "lease_lost": 0}
    assert status["effects"]["total_cents"] == 17000
    assert [d["event_id"] for d in dead] == ["E0004"]
    assert again == dict.fromkeys(SUMMARY_KEYS, 0)  # dead stays dead until a redrive
    limited = tmp_path / "limited"
    limited.mkdir()
    shutil.copyfile(DEMO_BATCH, limited / "demo.jsonl")
    cli_json(limited, "--db", "q.sqlite3", "--now", 1000, "enqueue", "demo.jsonl")
    assert cli_json(limited, "--db", "q.sqlite3", "--now", 1000, "work", "--batch", "3", "--max-messages", "2") == {
        "claimed": 2, "done": 2, "retried": 0, "dead": 0, "lease_lost": 0}


@pytest.mark.parametrize("bad", ["0", "1001", "-1", "x", "2.5", ""])
def test_queue_core_work_refuses_a_batch_out_of_range(tmp_path: Path, bad: str) -> None:
    shutil.copyfile(DEMO_BATCH, tmp_path / "demo.jsonl")
    cli_json(tmp_path, "--db", "q.sqlite3", "--now", 1000, "enqueue", "demo.jsonl")
    before = cli_json(tmp_path, "--db", "q.sqlite3", "--now", 1000, "status", "--json")
    proc = cli(tmp_path, "--db", "q.sqlite3", "--now", 1000, "work", "--batch", bad)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert proc.stdout == "" and "Traceback" not in proc.stderr
    assert "--batch" in proc.stderr
    assert cli_json(tmp_path, "--db", "q.sqlite3", "--now", 1000, "status", "--json") == before  # nothing was claimed
    assert before["messages"]["ready"] == 4
    for edge in ("1", "1000"):  # the bounds themselves are accepted (at 999 nothing is available yet)
        assert cli_json(tmp_path, "--db", "q.sqlite3", "--now", 999, "work", "--batch", edge) == dict.fromkeys(
            SUMMARY_KEYS, 0)


def test_two_worker_processes_in_batches_do_every_message_once(tmp_path: Path) -> None:
    events = {f"E{n:04d}": {"category": ("book", "pen", "bag")[n % 3], "amount_cents": n} for n in range(1, 601)}
    db = queue_file(tmp_path / "q.sqlite3",
                    batch(*(json.dumps({"event_id": e, "payload": p}) for e, p in events.items())))
    command = [*QUEUE_CORE, "--db", str(db), "--now", "1000", "work", "--batch", "8"]
    workers = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for _ in range(2)]
    summaries = []
    for worker in workers:
        out, err = worker.communicate(timeout=300)
        assert worker.returncode == 0, err
        assert "Traceback" not in err
        summaries.append(json.loads(out))
    assert sum(s["claimed"] for s in summaries) == 600
    assert sum(s["done"] for s in summaries) == 600
    assert all(s["retried"] == s["dead"] == s["lease_lost"] == 0 for s in summaries)
    state = read_file(db)
    assert {(m.state, m.attempts, m.generation) for m in state.messages} == {("done", 1, 1)}  # claimed once each
    assert [e for e, _, _ in state.effects] == sorted(events)  # one effect each
    assert check_invariants(state, events=events, expected_total=sum(range(1, 601))) == []
