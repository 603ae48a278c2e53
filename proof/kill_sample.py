"""A bounded sample of the random-kill run's kills, one event each, for the page's timeline.

``proof.chaos.chaos`` counts every kill; it also offers each one here, and a
reservoir keeps at most ``SAMPLE_SIZE`` of them, each as likely as any other
(Vitter's algorithm R, with a random generator of its own: the run's own
random choices stay what its seed makes them). An event says when the kill
came (seconds since the run began, the round, the victim's model second),
whom it hit (a worker and its slot, or the producer), what the victim was
doing a moment before, and what came next:

* a worker: ``doing`` is what could be seen from outside just before the
  SIGKILL. On SQLite, whether it held the writers' turn (the ``flock`` on
  ``<database>-lock`` that a worker holds from its claim to its ACK:
  ``/proc/locks``), i.e. whether it was processing a message; on PostgreSQL,
  its session's state (``pg_stat_activity``). ``next`` is what the worker
  started in its place did: its summary when it exited, or that it was
  killed too.
* the producer: ``doing`` is whether its batch had committed (its resend
  found every line stored, or stored them), ``next`` the resend's answer.

Only kills that killed are kept (a SIGKILL sent just after the victim exited
by itself missed it and is no kill).
"""

from __future__ import annotations

import os
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final

__all__ = ["DOING", "SAMPLE_SIZE", "KillEvent", "KillSample", "holds_flock"]

SAMPLE_SIZE: Final = 200
# What a victim was doing, as the events say it.
DOING: Final = {
    "starting": "starting: it had not opened the database",
    "processing": "processing a message: it held the writers' turn (claim to ACK)",
    "between": "the database open, no claim or completion under way (setting up, or between messages)",
    "in a transaction": "in a transaction (its PostgreSQL session was active)",
    "idle": "between transactions (its PostgreSQL session was idle)",
    "before commit": "before its batch committed: the resend stored it",
    "after commit": "after its batch committed: the resend found every line stored",
}


@dataclass
class KillEvent:
    """One kill: when, whom, what it was doing, what came next."""

    t: float  # seconds since the run began
    round: int
    who: str  # "worker" or "producer"
    slot: int | None  # a worker's place in the round's crowd
    process: int  # the n-th process the run started
    now: int  # the victim's model second
    opened: bool  # it had the database open
    doing: str  # a key of DOING
    next: str = ""  # what the next process found or did
    # what the run resolves at the round's end (not part of the record)
    pending: Any = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        del data["pending"]
        return data


class KillSample:
    """At most ``size`` kill events, each kill as likely to be kept as any other."""

    def __init__(self, seed: int, size: int = SAMPLE_SIZE) -> None:
        self._rng = random.Random(f"kill-sample-{seed}")
        self.size = size
        self.seen = 0  # kills offered
        self.kept: list[KillEvent] = []
        self.began = time.monotonic()

    def since(self) -> float:
        return round(time.monotonic() - self.began, 3)

    def offer(self, event: KillEvent) -> None:
        self.seen += 1
        if len(self.kept) < self.size:
            self.kept.append(event)
            return
        slot = self._rng.randrange(self.seen)
        if slot < self.size:
            self.kept[slot] = event

    def forget(self, event: KillEvent) -> None:
        """A kill that missed: it was never one."""
        self.seen -= 1
        if event in self.kept:
            self.kept.remove(event)

    def events(self) -> tuple[dict[str, Any], ...]:
        """The kept events in the order they happened, as JSON values."""
        return tuple(
            e.to_dict() for e in sorted(self.kept, key=lambda e: (e.t, e.process))
        )


def holds_flock(pid: int, path: Path) -> bool:
    """Whether process ``pid`` holds a ``flock`` on ``path`` now (Linux ``/proc/locks``; False elsewhere)."""
    try:
        stat = os.stat(path)
        with open("/proc/locks", encoding="ascii") as locks:
            lines = locks.read().splitlines()
    except OSError:
        return False
    device = f"{os.major(stat.st_dev):02x}:{os.minor(stat.st_dev):02x}:{stat.st_ino}"
    for line in lines:
        fields = line.split()
        # "1: FLOCK  ADVISORY  WRITE 1234 00:1a:567 0 EOF"; a waiter's line has "->" after the number
        if (
            len(fields) >= 6
            and fields[1] == "FLOCK"
            and fields[4] == str(pid)
            and fields[5] == device
        ):
            return True
    return False
