"""Time in whole seconds: the system clock, or a model clock for tests and docs.

Every protocol decision (is the lease still valid? is the retry due?) compares
integers of this clock: ``now()`` rounds the time down. A new lease's deadline
counts from the time rounded up (``time()``, where a clock has fractions), so a
lease of N seconds lasts at least N seconds, never up to one second less. Tests,
documentation and the demo use ``ModelClock`` so that nothing ever sleeps and
every example is deterministic. All clients of one
database must share one host clock; see the limits chapter.
"""

from __future__ import annotations

import math
import time
from typing import Protocol

MAX_SECONDS = 2**40  # about 35,000 years: any time plus any lease still fits in 64 bits


class Clock(Protocol):
    """Anything with ``now()`` returning integer seconds (rounded down).

    A clock may also have ``time()``, the same reading with its fraction; the
    store counts a new lease's deadline from it rounded up. A clock without
    ``time()`` is taken to tick in whole seconds.
    """

    def now(self) -> int: ...


class SystemClock:
    """Wall-clock time of this host, truncated to whole seconds."""

    def now(self) -> int:
        return int(time.time())

    def time(self) -> float:
        """The same clock with its fraction of a second."""
        return time.time()

    def __repr__(self) -> str:
        return "SystemClock()"


class ModelClock:
    """A clock that only moves when told to (for tests, docs and the demo)."""

    def __init__(self, start: int = 0) -> None:
        self._now = _whole_seconds(start)

    def now(self) -> int:
        return self._now

    def time(self) -> float:
        """Model time has no fraction: the same whole second."""
        return float(self._now)

    def set(self, seconds: int) -> None:
        """Jump to an absolute time; time may not go backwards."""
        seconds = _whole_seconds(seconds)
        if seconds < self._now:
            raise ValueError(f"model time cannot go back from {self._now} to {seconds}")
        self._now = seconds

    def advance(self, seconds: int = 1) -> int:
        """Move forward by ``seconds`` and return the new time."""
        self.set(self._now + _whole_seconds(seconds))
        return self._now

    def __repr__(self) -> str:
        return f"ModelClock({self._now})"


def _whole_seconds(value: int) -> int:
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or not 0 <= value <= MAX_SECONDS
    ):
        raise ValueError(
            f"time must be an integer of seconds in 0..{MAX_SECONDS}, got {value!r}"
        )
    return value


def lease_deadline(instant: float, lease_seconds: int) -> int:
    """A new lease's ``lease_until``, counted from the next whole second.

    So it lasts at least ``lease_seconds``.
    A lease is valid while ``now() < lease_until``, and ``now()`` rounds the time
    down: counted from the second below, a lease taken at 1000.9 would end at
    1001.0 after 0.1 s.
    """
    return math.ceil(instant) + lease_seconds
