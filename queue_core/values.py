"""The values the queue hands out and reports: frozen, and plain data.

A ``Lease`` is a claim's right to one message; a ``Completion`` is what
``complete`` or ``fail`` did; ``Message`` is one stored row; ``StateCounts``,
``Metrics``, ``Latency``, ``WorkCounters`` and ``Pruned`` are what the reads
report.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any, Final

STATES: Final = ("ready", "leased", "done", "dead")


@dataclass(frozen=True)
class Lease:
    """A temporary, fenced right to process one message.

    The fence checks ``generation`` and ``token`` together: every claim
    raises the generation, and every fenced operation must present the
    current one. ``token`` is the claim token, a random number drawn by the
    claim and stored with it: a database that lost a claim (a failover to a
    standby that lagged, a restored backup) issues the same generation
    again, never the same claim token. It is neither printed nor compared
    (it is random); 0 is the claim token of a message claimed before schema
    version 5.
    """

    event_id: str
    generation: int
    attempt: int
    lease_until: int
    token: int = field(default=0, repr=False, compare=False)


def new_lease_token() -> int:
    """A claim's random claim token: 1..2**63-1 (a signed 64-bit column holds it; 0 is "none")."""
    return secrets.randbelow(2**63 - 1) + 1


class Outcome(str, Enum):
    """Where a completion left the message."""

    DONE = "done"
    RETRY = "retry"
    DEAD = "dead"
    LEASE_LOST = "lease_lost"  # only in complete_many: fencing refused this one message
    RELEASED = "released"  # given back unfinished: ready again (``Store.release``)


@dataclass(frozen=True)
class Completion:
    """What ``complete``, ``fail`` or ``release`` did to one message."""

    event_id: str
    outcome: Outcome
    error: str | None = None
    available_at: int | None = None
    detail: str | None = None


@dataclass(frozen=True)
class EnqueueResult:
    """How many events of a batch were new, and how many were already stored."""

    accepted: int
    duplicates: int

    def to_dict(self) -> dict[str, int]:
        return {"accepted": self.accepted, "duplicates": self.duplicates}


@dataclass(frozen=True)
class Message:
    """One row of ``messages`` exactly as stored (no expiry applied)."""

    event_id: str
    payload: str
    state: str
    attempts: int
    generation: int
    available_at: int
    lease_until: int | None
    last_error: str | None
    last_detail: str | None = None
    enqueued_at: int | None = None  # None: stored before schema version 3
    # when it was ACKed (None: not done, or before version 3)
    done_at: int | None = None
    expired_leases: int = 0  # leases of it that ran out and a later claim took over
    # prune removed the payload ({} now); its hash still deduplicates
    pruned: bool = False
    queue: str = "default"  # the queue it belongs to (schema version 4)
    # claimed before lower ones once available (higher first; schema version 9)
    priority: int = 0

    @property
    def payload_object(self) -> dict[str, Any]:
        """The stored canonical payload, parsed (``{}`` once pruned)."""
        value: dict[str, Any] = json.loads(self.payload)
        return value


@dataclass(frozen=True)
class Claimed:
    """A lease and the message it covers, as one claim statement returned them.

    ``claim_message`` gives one, ``complete_message`` takes it back: the
    worker's path, in which the message needs no second read.
    """

    lease: Lease
    message: Message


@dataclass(frozen=True)
class StateCounts:
    """Counts of messages by stored state: the queue's part of ``status``.

    ``messages`` has every state of ``STATES``, in that order, 0 where none.
    """

    messages: Mapping[str, int]

    @classmethod
    def of(cls, found: Mapping[str, int]) -> StateCounts:
        """The counts of ``found`` (states with no message may be missing), all four."""
        return cls({state: int(found.get(state, 0)) for state in STATES})

    def count(self, state: str) -> int:
        """How many messages are stored in ``state``."""
        return self.messages.get(state, 0)

    def to_dict(self) -> dict[str, Any]:
        return {"messages": dict(self.messages)}


@dataclass(frozen=True)
class Latency:
    """Seconds from enqueue to done of the done messages that have both times.

    The percentiles are nearest-rank.
    """

    count: int
    p50: int | None
    p95: int | None
    max: int | None
    sum: int = 0  # of all their seconds (Prometheus' summary needs it)

    def to_dict(self) -> dict[str, int | None]:
        return asdict(self)


@dataclass(frozen=True)
class WorkCounters:
    """What a queue has done since it was created: totals that only grow.

    Read from the database (the rows, and ``queue_counters`` for rows that
    left), so they survive restarts, purges and redrives. ``retried`` counts
    from schema version 8 on.
    """

    processed: int  # messages ACKed: done
    retried: int  # temporary failures that scheduled another attempt
    dead: int  # times a message went dead (a redriven one may go twice)
    expired_leases: int  # leases that ran out (taken over, or dead)

    def to_dict(self) -> dict[str, int]:
        return asdict(self)


@dataclass(frozen=True)
class Metrics:
    """What an operator watches, read in one snapshot.

    ``Store.metrics`` returns it; ``queue-core status`` and ``metrics`` print it.

    Times are whole seconds of the store's clock at ``now``. A message stored
    before schema version 3 has no enqueue or done time: it is counted by
    state but left out of the ages and the latency, never guessed.
    """

    now: int
    messages: Mapping[str, int]  # counts by state
    # seconds since the oldest ready message was enqueued (None: no ready message)
    oldest_ready_age: int | None
    dead_attempts: Mapping[int, int]  # dead messages by the attempts they spent
    enqueue_to_done: Latency
    # leases that ran out and a later claim took over (or ended in dead)
    expired_leases: int
    pruned: int  # done messages whose payload prune removed
    # totals of work done, that only grow
    counters: WorkCounters = WorkCounters(0, 0, 0, 0)

    def to_dict(self) -> dict[str, Any]:
        return {
            "now": self.now,
            "messages": dict(self.messages),
            "oldest_ready_age": self.oldest_ready_age,
            "dead_attempts": {str(k): v for k, v in self.dead_attempts.items()},
            "enqueue_to_done": self.enqueue_to_done.to_dict(),
            "expired_leases": self.expired_leases,
            "pruned": self.pruned,
            "counters": self.counters.to_dict(),
        }


@dataclass(frozen=True)
class Pruned:
    """What ``prune`` did."""

    pruned: int  # payloads removed now
    # done messages from before schema version 3: no done time, so never pruned by age
    unknown_age: int

    def to_dict(self) -> dict[str, int]:
        return asdict(self)
