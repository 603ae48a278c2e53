"""The protocol's numbers and rules: defaults, limits, backoff, lease deadlines,
the named steps where a probe is called, what a handler's exception records,
and the checks of every operation's arguments.

Plain functions and constants: the store and its completions share them, and
a reader can find every number the protocol lives by in one place.
"""

from __future__ import annotations

import hashlib
import math
from datetime import datetime
from typing import TYPE_CHECKING, Final, Protocol

from .clock import lease_deadline as lease_deadline  # re-exported: one of the rules
from .clock import MAX_SECONDS
from .errors import (
    HandlerFailure,
    InvalidTime,
    PermanentFailure,
    StatementFailed,
    TemporaryFailure,
)
from .values import Lease, Message

if TYPE_CHECKING:
    from .transactions import Tx

DEFAULT_LEASE_SECONDS: Final = 30
# a year; keeps now + lease far inside SQLite's 64-bit integers
MAX_LEASE_SECONDS: Final = 365 * 86_400
# claims per cycle, whether they ended in a failure or a silent death
MAX_ATTEMPTS: Final = 3
# at most 100 claims per cycle: past the cap, each further claim only waits the
# cap again, so a longer budget is a loop, not a retry
MAX_ATTEMPTS_LIMIT: Final = 100
BUSY_TIMEOUT_MS: Final = 2_000  # SQLite's own wait for the write lock, per attempt
# then we back off and retry until this much time has passed
BUSY_RETRY_SECONDS: Final = 60.0
# last_error of a message whose last lease ran out
LEASE_EXPIRED: Final = "lease_expired"
# last_error of a handler that raised something unexpected
HANDLER_ERROR: Final = "handler_error"

# The named steps of each write operation, where a probe is called: its
# transaction's own, and those of its statements (a claim chooses and leases in
# one statement, so it has no read of its own).
_COMMON_STEPS = ("after_begin", "before_commit", "after_commit")
_EXTRA_STEPS = {
    "enqueue": ("after_read", "after_insert"),
    "claim": ("after_update",),
    "complete": ("after_read", "after_effect", "after_recheck", "after_update"),
    "fail": ("after_read", "after_update"),
    "redrive": ("after_read", "after_update"),
    "extend": ("after_read", "after_update"),
    "release": ("after_read", "after_update"),
}
# The batched path's transactions reach their messages' steps (claim.*,
# complete.*) once per message, and these of their own.
_BATCH_STEPS = ("after_begin", "before_commit", "after_commit")
BATCH_OPERATIONS: Final = ("claim_many", "complete_many")
OPERATIONS: Final = tuple(_EXTRA_STEPS) + BATCH_OPERATIONS
PROBE_POINTS: Final = frozenset(
    [f"{op}.{step}" for op in _EXTRA_STEPS for step in _COMMON_STEPS + _EXTRA_STEPS[op]]
    + [f"{op}.{step}" for op in BATCH_OPERATIONS for step in _BATCH_STEPS]
)
MAX_BATCH: Final = 1_000  # messages per batched transaction
# a delayed message waits at most a year, whether given as a delay or a time (at)
MAX_DELAY_SECONDS: Final = 366 * 24 * 3600
# A claim takes the highest priority first among the available messages; 0 is
# the default and every message from before priorities (schema version 9).
DEFAULT_PRIORITY: Final = 0
MIN_PRIORITY: Final = -100
MAX_PRIORITY: Final = 100


# The retry policy of the queue ``default`` (and of every queue a version-6
# database had): 1 s, then doubling, at most an hour, no jitter.
BACKOFF_BASE_SECONDS: Final = 1
BACKOFF_MAX_SECONDS: Final = 3_600
BACKOFF_JITTER: Final = 0.0
MAX_BACKOFF_BASE_SECONDS: Final = 86_400  # a first retry a day later is already rare


def backoff_seconds(
    attempt: int,
    *,
    base: int = BACKOFF_BASE_SECONDS,
    cap: int = BACKOFF_MAX_SECONDS,
    jitter: float = BACKOFF_JITTER,
    draw: float = 0.0,
    retry_after: float | None = None,
) -> int:
    """Delay after a temporary failure of ``attempt`` n: min(cap, base * 2**(n-1)).

    Then ``jitter`` (0..1) takes up to that fraction off the delay, by ``draw``
    (0 <= draw < 1; ``retry_draw`` gives each message's own), so the result
    lies in [delay * (1 - jitter), delay]. A ``retry_after`` the handler
    asked for replaces the policy's delay, within the cap and without jitter.
    """
    if retry_after is not None:
        return min(cap, math.ceil(retry_after))
    exponent = max(attempt - 1, 0)
    # the cap first: base << exponent is never computed past the cap's own bits
    if exponent >= cap.bit_length():
        delay = cap
    else:
        delay = min(cap, base << exponent)
    return delay - math.floor(delay * jitter * draw)


def retry_draw(queue: str, event_id: str, generation: int) -> float:
    """The jitter's draw for one failed attempt, in [0, 1): random-like, yet repeatable.

    A hash of the message and its claim's generation: messages that failed
    together spread apart, and the same attempt always waits the same time
    (on every host, in every test, on every page).
    """
    digest = hashlib.sha256(f"{queue}\0{event_id}\0{generation}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def retry_after_of(exc: Exception) -> float | None:
    """The ``retry_after`` a handler's ``TemporaryFailure`` asked for, or None."""
    return exc.retry_after if isinstance(exc, TemporaryFailure) else None


class MessageHandler(Protocol):
    """Writes one message's effect through ``tx``, inside the completion's transaction.

    Raise ``PermanentFailure`` (dead at once) or ``TemporaryFailure`` (retry
    after a backoff) to refuse the payload; whatever the handler wrote is then
    rolled back, and so it is if it raises anything else (recorded as
    ``handler_error``). The return value is ignored.
    """

    def __call__(self, tx: Tx, message: Message) -> object: ...


def refusal(exc: Exception) -> tuple[str, str | None, bool]:
    """What a handler's exception records: (code, detail, permanent).

    A caught failure of one of the handler's statements is a temporary
    ``statement_failed``; anything unexpected is a ``handler_error``.
    """
    if isinstance(exc, HandlerFailure):
        return exc.code, exc.detail or None, isinstance(exc, PermanentFailure)
    if isinstance(exc, StatementFailed):
        return exc.code, exc.message, False
    return HANDLER_ERROR, f"{type(exc).__name__}: {exc}", False


def check_lease_seconds(lease_seconds: object) -> None:
    if isinstance(lease_seconds, bool) or not isinstance(lease_seconds, int):
        raise TypeError(
            "lease_seconds must be an integer of seconds, "
            f"got {type(lease_seconds).__name__}"
        )
    if not 1 <= lease_seconds <= MAX_LEASE_SECONDS:
        raise ValueError(
            f"lease_seconds must be 1..{MAX_LEASE_SECONDS}, got {lease_seconds}"
        )


def check_count(count: object) -> None:
    if isinstance(count, bool) or not isinstance(count, int):
        raise TypeError(f"count must be an integer, got {type(count).__name__}")
    if not 1 <= count <= MAX_BATCH:
        raise ValueError(f"count must be 1..{MAX_BATCH}, got {count}")


def check_lease(lease: object) -> None:
    if not isinstance(lease, Lease):
        hint = (
            " (claim() returned None: nothing was available)" if lease is None else ""
        )
        raise TypeError(
            f"expected a Lease from claim(), got {type(lease).__name__}{hint}"
        )


def check_code(code: object, detail: object) -> None:
    if not isinstance(code, str) or not code:
        raise ValueError(f"a failure needs a non-empty error code, got {code!r}")
    if detail is not None and not isinstance(detail, str):
        raise TypeError(f"detail must be a string or None, got {type(detail).__name__}")


def check_handler(handler: object) -> None:
    if not callable(handler):
        raise TypeError(
            "handler must be callable as handler(tx, message), "
            f"got {type(handler).__name__}"
        )


def check_delay(delay: object) -> int:
    """A delay in whole seconds, 0..``MAX_DELAY_SECONDS``; returns it."""
    if isinstance(delay, bool) or not isinstance(delay, int):
        raise TypeError(f"delay must be an integer of seconds, got {type(delay).__name__}")
    if not 0 <= delay <= MAX_DELAY_SECONDS:
        raise ValueError(f"delay must be 0..{MAX_DELAY_SECONDS} seconds, got {delay}")
    return delay


def check_priority(priority: object) -> int:
    """A priority, ``MIN_PRIORITY``..``MAX_PRIORITY`` (higher is claimed first); returns it."""
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise TypeError(f"priority must be an integer, got {type(priority).__name__}")
    if not MIN_PRIORITY <= priority <= MAX_PRIORITY:
        raise ValueError(
            f"priority must be {MIN_PRIORITY}..{MAX_PRIORITY}, got {priority}"
        )
    return priority


def check_at(at: object, delay: int = 0) -> int | None:
    """``at`` as Unix seconds (an aware datetime rounded up, or an int), or None.

    Rounded up, so that a message is never available before its time.
    """
    if at is None:
        return None
    if delay:
        raise InvalidTime(f"give delay or at, not both (delay={delay}, at={at!r})")
    if isinstance(at, datetime):
        if at.tzinfo is None or at.utcoffset() is None:
            raise InvalidTime(
                f"at must have a timezone (a naive datetime is ambiguous), got {at!r}"
            )
        seconds = math.ceil(at.timestamp())
    elif isinstance(at, int) and not isinstance(at, bool):
        seconds = at
    else:
        raise TypeError(
            "at must be a datetime with a timezone or Unix seconds (int), "
            f"got {type(at).__name__}"
        )
    if not 0 <= seconds <= MAX_SECONDS:
        raise InvalidTime(f"at must be Unix seconds in 0..{MAX_SECONDS}, got {seconds}")
    return seconds


def available_at(now: int, delay: int = 0, at: int | None = None) -> int:
    """When a new message can be claimed: ``now + delay``, or ``at`` (a past ``at`` is now).

    One rule for both: at most ``MAX_DELAY_SECONDS`` after ``now``.
    """
    if at is None:
        check_delay(delay)
        return now + delay
    if at - now > MAX_DELAY_SECONDS:
        raise InvalidTime(
            f"at {at} is {at - now} seconds after now ({now}); "
            f"a message waits at most {MAX_DELAY_SECONDS} seconds"
        )
    return max(at, now)


class Refused(Exception):
    """A handler's exception, carried out of the completion's transaction."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error
