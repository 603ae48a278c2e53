"""A lease of N seconds lasts at least N seconds from the claim, whatever fraction of a second it starts at.

Every decision compares whole seconds, rounded down (``now()``); a lease's
deadline counts from the claim's time rounded up. Counted from the second
below, a 1-second lease taken at 1000.89 would have ended at 1001.0, after
0.11 s. Runs on both engines (tests/conformance/conftest.py): a real SQLite
file and a real PostgreSQL database; the clock is modelled with fractions, then
the real clock is used (on PostgreSQL, the server's).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from queue_core import Handler, Lease, LeaseLost, Outcome, Store, ledger

from ..support import batch, line


def held(store: Store, lease: object) -> str:
    """The fenced check that opens every completion: the event id, or ``LeaseLost``."""
    with store.transaction() as tx:
        return store.leased_tx(tx, lease).event_id  # type: ignore[arg-type]


class FractionalClock:
    """A model clock with fractions of a second, as the system clock has."""

    def __init__(self, start: float) -> None:
        self.t = start

    def now(self) -> int:
        return math.floor(self.t)

    def time(self) -> float:
        return self.t


@contextmanager
def claimed_at(target: str | Path, start: float, lease_seconds: int) -> Iterator[tuple[Store, FractionalClock, Lease]]:
    """A queue on ``target`` whose one message E0001 was claimed at model time ``start``."""
    clock = FractionalClock(start)
    with Store(target, clock=clock) as store:
        ledger.install(store)
        store.enqueue(line("E0001"))
        lease = store.claim(lease_seconds)
        assert lease is not None
        yield store, clock, lease


@pytest.fixture
def target(request: pytest.FixtureRequest, engine: str, tmp_path: Path) -> str | Path:
    return request.getfixturevalue("postgres_url") if engine == "postgresql" else tmp_path / "queue.sqlite3"


def test_a_lease_taken_late_in_a_second_lasts_its_full_length(target: str | Path) -> None:
    with claimed_at(target, 1000.89, 1) as (store, clock, lease):
        assert lease.lease_until == 1002  # 1001 (1000.89 rounded up) + 1
        for t in (1001.0, 1001.5, 1001.89, 1001.99):  # up to and past 1 s after the claim: still held
            clock.t = t
            assert held(store, lease) == "E0001", t
        clock.t = 1002.0
        with pytest.raises(LeaseLost, match="the lease ended at 1002"):
            held(store, lease)
        assert store.claim(1) is not None  # and another worker can take it over now


def test_an_extension_counts_from_the_next_whole_second_too(target: str | Path) -> None:
    with claimed_at(target, 1000.2, 2) as (store, clock, lease):
        assert lease.lease_until == 1003
        clock.t = 1002.7
        extended = store.extend(lease, 2)
        assert extended.lease_until == 1005  # 1003 (1002.7 rounded up) + 2: at least 2 s from the extension
        clock.t = 1004.99
        assert store.complete(extended, Handler()).outcome is Outcome.DONE


def test_on_whole_seconds_a_lease_lasts_exactly_its_length(target: str | Path) -> None:
    # The model clock of every chapter ticks in whole seconds: nothing there changes.
    with claimed_at(target, 1000.0, 2) as (store, clock, lease):
        assert lease.lease_until == 1002
        clock.t = 1002.0
        with pytest.raises(LeaseLost):
            held(store, lease)


def test_on_the_real_clock_every_lease_ends_at_least_its_length_after_the_claim(target: str | Path) -> None:
    # The store's own clock (SQLite: this host's; PostgreSQL: the server's, on this same host).
    with Store(target) as store:
        ledger.install(store)
        store.enqueue(batch(*(line(f"E{n:04d}") for n in range(1, 41))))
        for _ in range(40):  # claims at 40 different fractions of a second
            before = time.time()
            lease = store.claim(1)
            assert lease is not None
            assert lease.lease_until >= before + 1, (before, lease)
            time.sleep(0.013)
