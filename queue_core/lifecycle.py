"""A message's lifecycle, written once: what the claim, the completion and the worker decide.

A message is ``ready``, then ``leased`` by a claim, then ``done`` by its ACK;
a failure makes it ``ready`` again after a backoff (a retry) or ``dead``. The
rules of those moves live here, and every path calls them:

* **the clock of a statement**: now is the time rounded down; a new lease
  ends at the time rounded up plus its length (``lease_deadline``), so it
  lasts at least that long. ``statement_times`` gives both to the
  statements. (PostgreSQL's own clock does the same in SQL: its migration 11,
  ``queue_core_now`` and ``queue_core_deadline``.)
* **what a failure is**: a handler's exception (or a long step's) becomes
  one ``Failure``, a code, a reason in words, whether it is permanent, and
  the delay it asked for (``failure_of``).
* **retry or dead**: a permanent failure, or a failure of the cycle's last
  allowed attempt, ends the cycle (``ends_cycle``); the claim applies the same
  rule to a lease that ran out (``attempts >= :max_attempts``, once in each
  engine's claim statement, recorded as ``LEASE_EXPIRED``). A retry waits the
  queue's backoff, with this attempt's own jitter (``retry_draw``).
* **the moves of a leased row**: ``MOVES``, each the one fenced statement
  (``fenced_move``) with where it goes: done, ready again, extended, ready
  after a backoff, dead.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from collections.abc import Callable
from typing import Final, Literal

from .errors import HandlerFailure, PermanentFailure, StatementFailed, TemporaryFailure
from .values import Completion, Lease, Outcome

# A queue's backoff: (attempt, draw, retry_after) -> seconds (``QueueSettings.backoff``)
Backoff = Callable[[int, float, "float | None"], int]

# last_error of a message whose last lease ran out (the claim writes it)
LEASE_EXPIRED: Final = "lease_expired"
# last_error of a handler that raised something unexpected
HANDLER_ERROR: Final = "handler_error"

Move = Literal["ack", "release", "extend", "retry", "dead"]
# Where the fenced statement moves a leased row: done (the ACK); ready again at
# its old place, the attempt given back (a release); the same lease until a
# new deadline (an extension); ready after a backoff (a retry); dead.
MOVES: Final[tuple[Move, ...]] = ("ack", "release", "extend", "retry", "dead")


# ---------------------------------------------------------------- the clock


def lease_deadline(instant: float, lease_seconds: int) -> int:
    """A new lease's ``lease_until``, counted from the next whole second.

    So it lasts at least ``lease_seconds``.
    A lease is valid while ``now() < lease_until``, and ``now()`` rounds the time
    down: counted from the second below, a lease taken at 1000.9 would end at
    1001.0 after 0.1 s.
    """
    return math.ceil(instant) + lease_seconds


def statement_times(instant: float, lease_seconds: int = 0) -> dict[str, int | None]:
    """The named time parameters of a statement at ``instant``: ``now``, ``until``, ``lease_seconds``.

    ``now`` is the time rounded down, ``until`` a new lease's deadline.
    """
    return {
        "now": math.floor(instant),
        "until": lease_deadline(instant, lease_seconds),
        "lease_seconds": lease_seconds,
    }


# ----------------------------------------------------------------- failures


@dataclass(frozen=True)
class Failure:
    """A failed attempt, as it is recorded: its code, its reason in words, and how it ends."""

    code: str
    detail: str | None = None
    permanent: bool = False  # dead at once, whatever attempts are left
    retry_after: float | None = (
        None  # the delay asked for, instead of the queue's backoff
    )


def failure_of(exc: BaseException) -> Failure:
    """What a handler's exception records (the one mapping: the completion and the worker call it).

    A ``PermanentFailure`` or ``TemporaryFailure`` keeps its own code and
    detail (and a ``TemporaryFailure`` its ``retry_after``); a caught failure of
    one of the handler's statements is a temporary ``statement_failed``;
    anything unexpected is a temporary ``handler_error``.
    """
    if isinstance(exc, HandlerFailure):
        return Failure(
            exc.code,
            exc.detail or None,
            isinstance(exc, PermanentFailure),
            exc.retry_after if isinstance(exc, TemporaryFailure) else None,
        )
    if isinstance(exc, StatementFailed):
        return Failure(exc.code, exc.message)
    return Failure(HANDLER_ERROR, f"{type(exc).__name__}: {exc}")


def refusal(exc: Exception) -> tuple[str, str | None, bool]:
    """What a handler's exception records: (code, detail, permanent) of ``failure_of``."""
    failure = failure_of(exc)
    return failure.code, failure.detail, failure.permanent


def ends_cycle(attempt: int, max_attempts: int, permanent: bool = False) -> bool:
    """Whether a failure of ``attempt`` makes the message dead rather than a retry.

    A permanent failure, or the cycle's last allowed attempt: the same rule
    that makes a claim take a message whose last lease ran out to dead.
    """
    return permanent or attempt >= max_attempts


def retry_draw(queue: str, event_id: str, generation: int) -> float:
    """The jitter's draw for one failed attempt, in [0, 1): random-like, yet repeatable.

    A hash of the message and its claim's generation: messages that failed
    together spread apart, and the same attempt always waits the same time
    (on every host, in every test, on every page).
    """
    digest = hashlib.sha256(f"{queue}\0{event_id}\0{generation}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


@dataclass(frozen=True)
class AfterFailure:
    """Where a failure moves its message: the fenced move, when it is ready again, the outcome."""

    move: Move  # "retry" or "dead"
    available_at: int | None  # a retry's; None for dead
    completion: Completion


def after_failure(
    lease: Lease,
    failure: Failure,
    *,
    queue: str,
    max_attempts: int,
    backoff: Backoff,
    now: int,
) -> AfterFailure:
    """Retry or dead, for a failure of the attempt ``lease`` holds.

    The lease's attempt is the message's while the lease is current, and the
    move that records it is fenced by that lease: nothing is read first.
    """
    if ends_cycle(lease.attempt, max_attempts, failure.permanent):
        done = Completion(
            lease.event_id, Outcome.DEAD, failure.code, detail=failure.detail
        )
        return AfterFailure("dead", None, done)
    draw = retry_draw(queue, lease.event_id, lease.generation)
    available_at = now + backoff(lease.attempt, draw, failure.retry_after)
    retry = Completion(
        lease.event_id, Outcome.RETRY, failure.code, available_at, failure.detail
    )
    return AfterFailure("retry", available_at, retry)
