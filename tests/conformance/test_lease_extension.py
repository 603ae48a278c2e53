"""Lease extension (``extend``) and the heartbeat: fenced like completion, spending no attempt.

Runs on both engines (tests/conformance/conftest.py): a real SQLite file,
and a real PostgreSQL database. Only the clock is modelled; the heartbeat's
thread and its connection are real.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from queue_core import Handler, LeaseLost, ModelClock, Outcome, Store
from queue_core.values import Lease

from .. import support
from ..support import DEMO_LINES, money


def until(condition: Callable[[], bool]) -> None:
    """Wait (in real time) for the heartbeat's thread to do something."""
    support.until(condition, what="the heartbeat did not act in time")


def claimed(store: Store, seconds: int = 10) -> Lease:
    store.enqueue(DEMO_LINES)
    lease = store.claim(seconds)
    assert lease is not None and lease.event_id == "E0001"
    return lease


def test_an_extension_moves_only_the_deadline(store: Store, clock: ModelClock) -> None:
    lease = claimed(store)
    clock.advance(6)
    extended = store.extend(lease, 30)
    assert extended == Lease("E0001", lease.generation, lease.attempt, clock.now() + 30)
    stored = store.message("E0001")
    assert (stored.state, stored.generation, stored.attempts, stored.lease_until) == (
        "leased", 1, 1, clock.now() + 30)
    clock.advance(20)  # past the first deadline, inside the extended one
    assert store.claim(10) is not None and store.message("E0001").generation == 1  # E0002, not E0001
    assert store.complete(extended, Handler()).outcome is Outcome.DONE
    assert money(store) == (1, 10000)


def test_a_stale_worker_cannot_extend(store: Store, clock: ModelClock) -> None:
    old = claimed(store)
    clock.advance(11)  # the lease ran out; another worker takes the message over
    new = store.claim(10)
    assert new is not None and (new.event_id, new.generation) == ("E0001", 2)
    with pytest.raises(LeaseLost, match="generation 1 is stale"):
        store.extend(old, 60)
    assert store.message("E0001").lease_until == new.lease_until  # the new owner's lease is untouched
    assert store.complete(new, Handler()).outcome is Outcome.DONE


def test_an_expired_lease_cannot_be_revived(store: Store, clock: ModelClock) -> None:
    lease = claimed(store)
    clock.advance(10)  # exactly at the deadline: already over, as for complete
    with pytest.raises(LeaseLost, match="the lease ended at"):
        store.extend(lease, 60)
    stored = store.message("E0001")
    assert (stored.state, stored.lease_until) == ("leased", lease.lease_until)  # nothing written
    with pytest.raises(LeaseLost):
        store.complete(lease, Handler())


def test_a_finished_message_cannot_be_extended(store: Store) -> None:
    lease = claimed(store)
    store.complete(lease, Handler())
    with pytest.raises(LeaseLost, match="is done, not leased"):
        store.extend(lease, 60)
    assert store.message("E0001").state == "done"


def test_extensions_spend_no_attempt(store: Store, clock: ModelClock) -> None:
    lease = claimed(store, seconds=5)
    for _ in range(10):  # ten heartbeats: far more than the attempt budget
        clock.advance(4)
        lease = store.extend(lease, 5)
    assert store.message("E0001").attempts == 1
    clock.advance(5)  # now it runs out; two more claims are still in the budget
    for attempt in (2, 3):
        again = store.claim(5)
        assert again is not None and (again.event_id, again.attempt) == ("E0001", attempt)
        clock.advance(5)
    assert store.claim(5) is not None  # E0001 went dead (its third lease ran out); this is E0002
    assert store.message("E0001").state == "dead"


@pytest.mark.parametrize("seconds, error", [(0, ValueError), (-1, ValueError), (1.5, TypeError),
                                            (True, TypeError)])
def test_a_bad_duration_is_refused_before_anything_is_written(store: Store, seconds: object,
                                                              error: type[Exception]) -> None:
    lease = claimed(store)
    with pytest.raises(error, match="lease_seconds"):
        store.extend(lease, seconds)  # type: ignore[arg-type]
    assert store.message("E0001").lease_until == lease.lease_until


def test_a_heartbeat_keeps_a_long_piece_of_work_leased(store: Store, clock: ModelClock) -> None:
    lease = claimed(store)
    with store.heartbeat(lease, every=0.01, lease_seconds=10) as beat:
        for round_number in range(1, 5):  # 4 x 6 s of model time: far past the first 10 s lease
            clock.advance(6)
            # An extension that read the clock after this advance: a beat already in
            # flight during the advance still extends from the old time, and counting
            # it would let the lease end in the next round.
            until(lambda: beat.lease.lease_until == clock.now() + 10)
            other = store.claim(10)  # another worker finds E0001 still leased
            assert other is None or other.event_id != "E0001"
    assert beat.lost is None and beat.error is None
    assert store.message("E0001").attempts == 1
    assert store.complete(beat.lease, Handler()).outcome is Outcome.DONE


def test_a_heartbeat_stops_when_its_lease_is_lost(store: Store, clock: ModelClock) -> None:
    lease = claimed(store)
    with store.heartbeat(lease, every=0.01, lease_seconds=10) as beat:
        clock.advance(11)  # an extension from before this ended by now + 10 at the latest
        until(lambda: beat.lost is not None)
        taken = store.claim(10)
        assert taken is not None and (taken.event_id, taken.generation) == ("E0001", 2)
        time.sleep(0.05)  # the thread has stopped: no beat touches the new owner's lease
        assert store.message("E0001").lease_until == taken.lease_until
    assert isinstance(beat.lost, LeaseLost)
    with pytest.raises(LeaseLost):
        store.complete(beat.lease, Handler())


def test_a_heartbeat_closes_its_own_connection_when_it_ends(store: Store) -> None:
    lease = claimed(store)
    before = len(store._runner._connections)
    with store.heartbeat(lease, every=0.01, lease_seconds=10) as beat:
        until(lambda: beat.beats >= 2)
        assert len(store._runner._connections) == before + 1  # the thread's own
    assert len(store._runner._connections) == before


def test_a_heartbeat_needs_a_positive_interval(store: Store) -> None:
    lease = claimed(store)
    for every in (0, -1.0):
        with pytest.raises(ValueError, match="every must be a positive number"):
            store.heartbeat(lease, every=every)
