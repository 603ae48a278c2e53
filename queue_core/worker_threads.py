"""Several worker threads in one process: their shared counts, started, waited for, interrupted.

``work(..., concurrency=N)`` runs its loop in N threads of one process. Each
thread has its own connection (the store keeps one per thread) and its own
lease in hand; on SQLite their writes take turns on the process's write turn,
while what runs outside a transaction (a ``LongHandler``'s ``prepare``) runs
side by side. The calling thread only waits for them: it is the one that
receives signals.

A stop (``stop`` set: SIGTERM, a first Ctrl-C) is read by every thread before
its next claim, so each finishes the message in hand. A ``KeyboardInterrupt``
in the calling thread (a second Ctrl-C) is raised in every worker thread too,
and again after 1, 3 and 7 seconds in a thread that has not ended (Python
drops such an exception when it lands in a finalizer). Each thread's
transaction rolls back as it ends; the calling thread then gives back the
leases its threads held. A thread inside a COMMIT takes the interruption
only when the COMMIT returned and its outcome is counted (``interrupts``):
the calling thread waits for it however long that takes, and Ctrl-C again
does not cut that wait short. A thread blocked in one long call outside
Python (a read without a timeout) takes the interruption only when the call
returns; the calling thread waits at most ``GIVE_BACK_SECONDS`` for it, and a
lease still in such a thread's hand runs out by itself.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from . import interrupts
from .values import Outcome

MAX_CONCURRENCY = 64  # threads of one worker process
# how long an interrupted run waits for its threads to give their leases back
GIVE_BACK_SECONDS = 10.0
# what Tally.remaining() says when the run has no max_messages
_NO_LIMIT = 1 << 30
# how often the calling thread wakes while it waits (signals are taken then)
_JOIN_SLICE_SECONDS = 0.2


@dataclass(frozen=True)
class WorkSummary:
    """What one run of the worker did."""

    claimed: int = 0
    done: int = 0
    retried: int = 0
    dead: int = 0
    lease_lost: int = 0
    # claimed, then given back by an interruption (ready again, not an attempt)
    released: int = 0

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={value}" for name, value in self.to_dict().items())
        return f"WorkSummary({shown})"

    def to_dict(self) -> dict[str, int]:
        """The counts as a dict; ``released`` only when an interruption gave some back."""
        counts = asdict(self)
        if not self.released:
            del counts["released"]
        return counts


@dataclass
class Tally:
    """What one run of ``work`` did so far, shared by its threads under ``lock``."""

    limit: int | None  # max_messages
    claimed: int = 0
    done: int = 0
    retried: int = 0
    dead: int = 0
    lease_lost: int = 0
    # messages a thread is about to claim or holds: counted against the limit
    reserved: int = 0
    given_back: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)  # held when interrupted, not given back
    lock: threading.Lock = field(default_factory=threading.Lock)

    def remaining(self) -> int:
        """How many more messages this run may claim (a large number: no limit)."""
        with self.lock:
            return self._remaining()

    def _remaining(self) -> int:
        if self.limit is None:
            return _NO_LIMIT
        return self.limit - self.claimed - self.reserved

    def reserve(self, wanted: int) -> int:
        """Up to ``wanted`` claims set aside for one thread (0: the limit is reached)."""
        with self.lock:
            taken = max(0, min(wanted, self._remaining()))
            self.reserved += taken
            return taken

    def settle(self, reserved: int, outcomes: list[Outcome]) -> None:
        """A reservation ended: the messages claimed with it, by their outcomes."""
        with self.lock:
            self.reserved -= reserved
            for outcome in outcomes:
                self._count(outcome)

    def _count(self, outcome: Outcome) -> None:
        self.claimed += 1
        if outcome is Outcome.DONE:
            self.done += 1
        elif outcome is Outcome.RETRY:
            self.retried += 1
        elif outcome is Outcome.DEAD:
            self.dead += 1
        elif outcome is Outcome.LEASE_LOST:
            self.lease_lost += 1
        else:  # a worker never releases: it completes or fails what it claimed
            raise ValueError(f"a worker's message cannot end {outcome.value!r}")

    def interrupted(self, held: list[str], released: tuple[str, ...]) -> None:
        """An interruption found ``held`` in a hand and gave back ``released`` of them.

        All were claimed; one not given back (its thread did not stop, or
        the lease was no longer ours) is kept, and its lease runs out.
        """
        with self.lock:
            self.claimed += len(held)
            self.given_back.extend(released)
            self.kept.extend(event_id for event_id in held if event_id not in released)

    def summary(self) -> WorkSummary:
        with self.lock:
            return WorkSummary(
                self.claimed,
                self.done,
                self.retried,
                self.dead,
                self.lease_lost,
                len(self.given_back),
            )


def check_concurrency(concurrency: object) -> int:
    """A number of worker threads, 1..``MAX_CONCURRENCY``; returns it."""
    if (
        isinstance(concurrency, bool)
        or not isinstance(concurrency, int)
        or not 1 <= concurrency <= MAX_CONCURRENCY
    ):
        raise ValueError(
            f"concurrency must be an integer 1..{MAX_CONCURRENCY}, got {concurrency!r}"
        )
    return concurrency


class Threads:
    """``count`` threads, each running ``body(index)``; ``run()`` waits for all of them."""

    def __init__(
        self, count: int, body: Callable[[int], None], stop: threading.Event
    ) -> None:
        self._stop = stop
        self._body = body
        self._lock = threading.RLock()  # _committing() is called holding it
        self._running: set[int] = set()  # threads still inside body
        # set as each thread leaves body: Thread.is_alive() cannot say, since a
        # join() that a KeyboardInterrupt interrupts marks the thread it waited
        # for as stopped while it still runs (CPython 3.11, bpo-45274's fix)
        self._left = [threading.Event() for _ in range(count)]
        self._errors: list[BaseException] = []
        self._threads = [
            threading.Thread(
                target=self._main, args=(n,), name=f"worker {n + 1}", daemon=True
            )
            for n in range(count)
        ]

    def run(self) -> None:
        """Start the threads and wait for them; re-raise the first error one of them raised.

        :raises KeyboardInterrupt: the calling thread was interrupted; every
            thread was interrupted too and given up to ``GIVE_BACK_SECONDS``
            to end (``ended`` says which did).
        """
        for thread in self._threads:
            thread.start()
        try:
            for thread in self._threads:
                while thread.is_alive():
                    thread.join(_JOIN_SLICE_SECONDS)
        except KeyboardInterrupt:
            self._interrupt()
            raise
        if self._errors:
            raise self._errors[0]

    def ended(self, index: int) -> bool:
        """Whether thread ``index`` has left its body (its hand can be read safely)."""
        return self._left[index].is_set()

    def _main(self, index: int) -> None:
        with self._lock:
            self._running.add(threading.get_ident())
        try:
            self._body(index)
        except KeyboardInterrupt:
            pass  # rolled back; the calling thread gives the lease back
        except BaseException as exc:  # noqa: BLE001  (re-raised by run())
            with self._lock:
                self._errors.append(exc)
            self._stop.set()  # one thread's failure ends the run: the others stop too
        finally:
            # An interruption sent while the body still ran may land on any line here;
            # it was meant for the body, which has ended: finish leaving regardless.
            while not self._left[index].is_set():
                try:
                    with self._lock:
                        self._running.discard(threading.get_ident())
                    interrupts.forget(threading.get_ident())
                    self._left[index].set()
                except KeyboardInterrupt:
                    continue

    def _interrupt(self) -> None:
        self._stop.set()
        now = time.monotonic()
        deadline, again, gap = now + GIVE_BACK_SECONDS, now, 1.0
        # Ctrl-C again while a thread's COMMIT is in flight is held back by the
        # signal handler (a KeyboardInterrupt could land on any line of this wait)
        with interrupts.waiting_for(self._committing):
            self._wait_for_threads(deadline, again, gap)
        for thread in self._threads:  # out of _running: its last lines
            thread.join(max(0.0, deadline - time.monotonic()))

    def _wait_for_threads(self, deadline: float, again: float, gap: float) -> None:
        while True:
            try:
                with self._lock:
                    if not self._running or (
                        time.monotonic() >= deadline and not self._committing()
                    ):
                        break
                    # again later, seldom: a rollback is short
                    if time.monotonic() >= again:
                        for ident in self._running:
                            interrupts.interrupt_thread(ident)  # or after its COMMIT
                        again, gap = time.monotonic() + gap, gap * 2
                for thread in self._threads:
                    thread.join(_JOIN_SLICE_SECONDS / len(self._threads))
            except KeyboardInterrupt:
                if not self._committing():  # Ctrl-C again: stop waiting, unless
                    raise  # a thread's COMMIT is in flight: that is waited for

    def _committing(self) -> bool:
        """Whether a running thread is inside a COMMIT (or has not counted it yet)."""
        with self._lock:
            return any(interrupts.holding(ident) for ident in self._running)
