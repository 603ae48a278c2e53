"""The worker loop: claim, complete, repeat, until nothing is available now.

By default a finite worker: it stops when the queue has nothing available at
the current time (a message waiting for its backoff is not available yet).
With ``forever`` it runs until told to stop: when nothing is available it
sleeps ``poll_seconds`` and looks again. ``stop`` (a ``threading.Event``, set
for example by a signal handler) ends either kind between two messages: the
message in hand is finished first. Interrupted in the middle of one
(``KeyboardInterrupt``), the worker rolls its transaction back, gives the
lease in hand back (``Store.release``) and raises ``WorkInterrupted`` with
what it did so far; an interruption that comes during a COMMIT is raised once
that COMMIT returned and is counted (``interrupts``: ``recorded()`` below).
Several workers may run at once on one file; the store waits out the lock.
A handler that raises is recorded on its message by the store (``handler_error``
or the refusal's own code) and the loop goes on with the next message.

With ``concurrency=N`` the loop runs in N threads of one process
(``worker_threads``): each claims and completes its own messages on its own
connection, the counts add up across them, and ``max_messages`` holds for all
of them together.

A plain handler runs inside the completion's transaction, where no extension
of the lease can commit (the transaction holds SQLite's write lock, or the
message's row on PostgreSQL). Work longer than a lease should be is a
``LongHandler``: its long step runs outside any transaction under a heartbeat,
and only its short step, the effect, runs inside the completion.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any, Generic, TypedDict, TypeVar, Unpack

from . import interrupts
from .errors import LeaseLost, StorageError
from .handlers import check_handler_shape
from .rules import (
    DEFAULT_LEASE_SECONDS,
    MAX_BATCH,
    MessageHandler,
    check_handler,
    check_lease_seconds,
    refusal,
    retry_after_of,
)
from .store import Store
from .transactions import Tx
from .values import Claimed, Lease, Message, Outcome
from .worker_threads import MAX_CONCURRENCY as MAX_CONCURRENCY  # re-exported
from .worker_threads import Tally, Threads, check_concurrency
from .worker_threads import WorkSummary as WorkSummary  # re-exported

R = TypeVar("R")

# How long a worker keeps its turn to write before a waiting worker gets in.
TURN_SLICE_SECONDS = 0.05
# What a --forever worker waits out instead of stopping: the database is
# unreachable or held for a while, and will likely be back (a restart, a
# failover, a long writer). It waits poll_seconds, doubling, up to this long.
PASSING_ERRORS = frozenset({"connection_lost", "cannot_connect", "database_busy"})
MAX_PAUSE_SECONDS = 30.0
MAX_POLL_SECONDS = 3600  # a --forever worker looks for new messages at least hourly


class WorkInterrupted(KeyboardInterrupt):
    """``work`` was interrupted in the middle of a message; the lease in hand was given back.

    ``summary`` is what the worker did until then: the interrupted messages
    count as claimed and as ``released``; ``released`` names them, ready again.
    ``kept`` names those claimed but not given back (a thread still inside a
    long call, or a lease no longer ours): their leases run out by themselves.
    """

    def __init__(
        self, summary: WorkSummary, released: tuple[str, ...] = (), kept: tuple[str, ...] = ()
    ) -> None:
        super().__init__("the worker was interrupted")
        self.summary = summary
        self.released = released
        self.kept = kept


@dataclass(frozen=True)
class LongHandler(Generic[R]):
    """A handler in two steps, for work that takes longer than a lease should.

    ``prepare(message)`` does the long part outside any transaction while a
    heartbeat extends the lease; ``write(tx, message, result)`` then writes the
    effect inside the completion's transaction, as a plain handler does, and
    should be short. If the lease was lost during ``prepare`` (the heartbeat
    was refused), ``write`` is not called and the result is dropped. Either
    step refuses a payload by raising ``PermanentFailure`` or
    ``TemporaryFailure``; anything else it raises is recorded as
    ``handler_error``, as for a plain handler.
    """

    prepare: Callable[[Message], R]
    write: Callable[[Tx, Message, R], object]

    def __post_init__(self) -> None:
        for step in ("prepare", "write"):
            if not callable(getattr(self, step)):
                raise TypeError(
                    f"LongHandler.{step} must be callable, "
                    f"got {type(getattr(self, step)).__name__}"
                )


@dataclass(frozen=True)
class WorkerConfig:
    """How a worker runs: each field checked once, when the configuration is made.

    ``work(store, handler, config=WorkerConfig(batch=8))`` and
    ``work(store, handler, batch=8)`` are the same run; a bad field raises
    ``TypeError`` or ``ValueError`` naming it, before anything is claimed.
    What depends on the store or the handler (the queue's own lease when
    ``lease_seconds`` is ``None``, a heartbeat only for a ``LongHandler``) is
    checked by ``work``.

    :param lease_seconds: each lease's length, 1 s to a year (``None``: the
        queue's own, 30 s for the default queue); longer than the handler takes
        (k handlers with ``batch=k``).
    :param max_messages: stop after claiming this many (``None``: until none is
        available now).
    :param batch: messages per claim transaction and per completion transaction
        (1..``MAX_BATCH``).
    :param heartbeat_every: a ``LongHandler``'s heartbeat interval in seconds,
        above 0 and below ``lease_seconds`` (``None``: a quarter of the lease:
        after two beats in a row fail fast, the third, three quarters into the
        lease, still extends it in time).
    :param forever: when nothing is available, sleep ``poll_seconds`` and look
        again, until told to stop (or ``max_messages`` were claimed).
    :param poll_seconds: how long a ``forever`` worker sleeps when nothing is
        available (default 1 s, at most an hour): a new message waits at most
        about this long.
    :param concurrency: threads in this process (1..``MAX_CONCURRENCY``), each
        with its own connection and its own message in hand. A ``LongHandler``'s
        ``prepare`` steps run side by side; writes take turns (on SQLite, one
        writer at a time), so a plain handler, which runs inside its write,
        gains nothing from threads on SQLite.
    """

    lease_seconds: int | None = None
    max_messages: int | None = None
    batch: int = 1
    heartbeat_every: float | None = None
    forever: bool = False
    poll_seconds: float = 1.0
    concurrency: int = 1

    def __post_init__(self) -> None:
        if self.lease_seconds is not None:
            check_lease_seconds(self.lease_seconds)
        if self.max_messages is not None:
            if isinstance(self.max_messages, bool) or not isinstance(
                self.max_messages, int
            ):
                raise TypeError(
                    "max_messages must be an integer or None, "
                    f"got {type(self.max_messages).__name__}"
                )
            if self.max_messages < 0:
                raise ValueError(
                    f"max_messages must not be negative, got {self.max_messages}"
                )
        if (
            isinstance(self.batch, bool)
            or not isinstance(self.batch, int)
            or not 1 <= self.batch <= MAX_BATCH
        ):
            raise ValueError(
                f"batch must be an integer 1..{MAX_BATCH}, got {self.batch!r}"
            )
        every = self.heartbeat_every
        if every is not None and (
            not _seconds(every)
            or not 0 < every
            or (self.lease_seconds is not None and not every < self.lease_seconds)
        ):
            below = "" if self.lease_seconds is None else f" ({self.lease_seconds})"
            raise ValueError(
                "heartbeat_every must be a number of seconds above 0 and below "
                f"lease_seconds{below}, got {every!r}"
            )
        if not isinstance(self.forever, bool):
            raise TypeError(
                f"forever must be True or False, got {type(self.forever).__name__}"
            )
        if not _seconds(self.poll_seconds) or not (
            0 < self.poll_seconds <= MAX_POLL_SECONDS
        ):
            raise ValueError(
                f"poll_seconds must be a number of seconds above 0, at most "
                f"{MAX_POLL_SECONDS}, got {self.poll_seconds!r}"
            )
        check_concurrency(self.concurrency)


class WorkOptions(TypedDict, total=False):
    """``WorkerConfig``'s fields, as keyword arguments of ``work``."""

    lease_seconds: int | None
    max_messages: int | None
    batch: int
    heartbeat_every: float | None
    forever: bool
    poll_seconds: float
    concurrency: int


def _seconds(value: object) -> bool:
    """Whether ``value`` is a number of seconds (an int or a float, not a bool)."""
    return not isinstance(value, bool) and isinstance(value, (int, float))


@dataclass(frozen=True)
class _Plan:
    """A run's configuration settled against its store and handler, and its hooks."""

    config: WorkerConfig
    lease_seconds: int  # the config's, or the queue's own
    every: float  # a LongHandler's heartbeat interval (0: a plain handler)
    stop: threading.Event
    progress: Callable[[WorkSummary], None] | None
    on_error: Callable[[StorageError, float], None] | None


def work(
    store: Store,
    handler: MessageHandler | LongHandler[Any],
    config: WorkerConfig | None = None,
    *,
    progress: Callable[[WorkSummary], None] | None = None,
    stop: threading.Event | None = None,
    on_error: Callable[[StorageError, float], None] | None = None,
    **options: Unpack[WorkOptions],
) -> WorkSummary:
    """Process messages until none is available now (or ``max_messages`` were claimed).

    ``batch=1`` (the default) is the simple path: one statement to claim
    (``claim_message``), one transaction for the effect and the fenced ACK
    (``complete_message``): the protocol the chapters teach, with the read
    before the effect folded into the claim. ``batch=k`` is the batched path:
    up to k messages claimed in one statement and completed in one
    transaction, each message with its own lease, generation, effect and ACK. It needs fewer
    commits per message; each message then waits for the whole batch, so the
    lease must cover k handlers' time.

    A ``LongHandler`` takes one message at a time per thread: claim, its
    ``prepare`` outside any transaction under ``Store.heartbeat``, then the
    completion with its ``write``. ``concurrency=N`` runs N such threads
    (``worker_threads``); the calling thread waits for them and takes the
    signals.

    :param store: the queue; ``work`` opens no connection of its own (a heartbeat's
        thread opens one).
    :param handler: ``handler(tx, message)``, as for ``Store.complete``; or a
        ``LongHandler``.
    :param config: how to run (``WorkerConfig``); or give its fields as keyword
        arguments (``lease_seconds``, ``max_messages``, ``batch``,
        ``heartbeat_every``, ``forever``, ``poll_seconds``, ``concurrency``),
        not both.
    :param progress: called with the counts so far after each turn (about every
        50 ms while busy).
    :param stop: when set, the worker takes no new message; the one in hand is
        finished first. Set it from a signal handler or another thread.
    :param on_error: a ``forever`` worker does not stop when the database is
        unreachable or busy (``connection_lost``, ``cannot_connect``,
        ``database_busy``): it calls ``on_error(error, pause)``, waits ``pause``
        seconds (``poll_seconds``, doubling up to 30) and tries again. A lease
        in hand then is not given back: it runs out. Any other error stops it.
    :param options: ``WorkerConfig``'s fields, when ``config`` is not given.
    :returns: counts of claimed, done, retried, dead and lease-lost messages.
    :raises WorkInterrupted: ``KeyboardInterrupt`` came in the middle of a
        message: its transaction was rolled back and its lease given back
        (with N threads, every thread's).
    """
    if not isinstance(store, Store):
        raise TypeError(f"work() takes a Store first, got {type(store).__name__}")
    check_handler_shape(handler)  # a handler that cannot take its arguments: refused now
    plan = _settle(store, handler, _config(config, options), progress, stop, on_error)
    run = Tally(plan.config.max_messages)
    try:
        if plan.config.concurrency == 1:
            _worker(store, handler, plan, run, [])
        else:
            _in_threads(store, handler, plan, run)
    except KeyboardInterrupt:
        raise WorkInterrupted(run.summary(), tuple(run.given_back), tuple(run.kept)) from None
    return run.summary()


def _in_threads(
    store: Store, handler: MessageHandler | LongHandler[Any], plan: _Plan, run: Tally
) -> None:
    """``_loop`` in ``concurrency`` threads; interrupted, their leases are given back here."""
    hands: list[list[Lease]] = [[] for _ in range(plan.config.concurrency)]

    def body(index: int) -> None:
        try:
            _loop(store, handler, plan, run, hands[index])
        finally:  # one thread, one connection: not kept until close()
            store._release_thread_connection()

    threads = Threads(plan.config.concurrency, body, plan.stop)
    try:
        threads.run()
    except KeyboardInterrupt:
        for index, hand in enumerate(hands):
            held = list(hand)
            # a thread that did not end may still use its lease: it runs out by itself
            released = _give_back(store, held) if threads.ended(index) else ()
            run.interrupted([lease.event_id for lease in held], released)
        raise


def _worker(
    store: Store,
    handler: MessageHandler | LongHandler[Any],
    plan: _Plan,
    run: Tally,
    hand: list[Lease],
) -> None:
    """The loop in the calling thread; interrupted, it gives back the leases in ``hand``."""
    try:
        _loop(store, handler, plan, run, hand)
    except KeyboardInterrupt:
        run.interrupted([lease.event_id for lease in hand], _give_back(store, hand))
        raise


def _config(config: WorkerConfig | None, options: WorkOptions) -> WorkerConfig:
    """``config``, or the one its fields given as keywords make."""
    known = {f.name for f in fields(WorkerConfig)}
    unknown = sorted(set(options) - known)
    if unknown:
        raise TypeError(f"work() got an unexpected keyword argument {unknown[0]!r}")
    if config is None:
        return WorkerConfig(**options)
    if not isinstance(config, WorkerConfig):
        raise TypeError(f"config must be a WorkerConfig, got {type(config).__name__}")
    if options:
        raise TypeError(
            "give work() a config or its fields as keywords, not both: "
            f"got config and {', '.join(sorted(options))}"
        )
    return config


def _settle(
    store: Store,
    handler: MessageHandler | LongHandler[Any],
    config: WorkerConfig,
    progress: Callable[[WorkSummary], None] | None,
    stop: threading.Event | None,
    on_error: Callable[[StorageError, float], None] | None,
) -> _Plan:
    """``config`` checked against the store and the handler, before any claim."""
    # None: the queue's own lease (30 s for the default queue)
    lease_seconds = store.lease_seconds_for(config.lease_seconds)
    every = 0.0  # a LongHandler's heartbeat interval
    if isinstance(handler, LongHandler):
        if config.batch != 1:
            raise ValueError(
                "a LongHandler takes one message at a time: "
                f"batch must be 1, got {config.batch!r}"
            )
        every = (
            lease_seconds / 4
            if config.heartbeat_every is None
            else config.heartbeat_every
        )
        if not every < lease_seconds:
            raise ValueError(
                f"heartbeat_every must be a number of seconds above 0 and below "
                f"lease_seconds ({lease_seconds}), got {config.heartbeat_every!r}"
            )
    elif config.heartbeat_every is not None:
        raise ValueError(
            "heartbeat_every needs a LongHandler: a plain handler runs inside the "
            "completion's transaction, where no extension can commit"
        )
    else:
        check_handler(handler)
    stop = threading.Event() if stop is None else stop
    if progress is not None and config.concurrency > 1:
        progress = _one_at_a_time(progress)
    return _Plan(config, lease_seconds, every, stop, progress, on_error)


def _one_at_a_time(
    progress: Callable[[WorkSummary], None],
) -> Callable[[WorkSummary], None]:
    """``progress`` called by one thread at a time (a display is not thread-safe)."""
    lock = threading.Lock()

    def report(summary: WorkSummary) -> None:
        with lock:
            progress(summary)

    return report


def _give_back(store: Store, hand: list[Lease]) -> tuple[str, ...]:
    """Release the leases in hand after an interruption, as far as they are still ours."""
    released = []
    for lease in hand:
        try:
            store.release(lease)
        except (LeaseLost, StorageError):
            continue  # not ours any more, or unreachable: it runs out by itself
        released.append(lease.event_id)
    return tuple(released)


def _loop(
    store: Store,
    handler: MessageHandler | LongHandler[Any],
    plan: _Plan,
    run: Tally,
    hand: list[Lease],
) -> None:
    config, stop = plan.config, plan.stop
    pause = config.poll_seconds
    with interrupts.recording():  # a second Ctrl-C comes after a COMMIT is counted
        while not stop.is_set() and run.remaining() > 0:
            try:
                worked = _turn(store, handler, plan, run, hand)
            except StorageError as error:
                if not config.forever or error.code not in PASSING_ERRORS:
                    raise
                hand.clear()  # out of reach: those leases run out by themselves
                if plan.on_error is not None:
                    plan.on_error(error, pause)
                stop.wait(pause)
                pause = min(pause * 2, MAX_PAUSE_SECONDS)
                continue
            pause = config.poll_seconds
            # A plain handler's turn may have done messages before it found none; a
            # LongHandler's turn is one message or none.
            if plan.progress is not None and (
                worked or not isinstance(handler, LongHandler)
            ):
                # outside the turn: a slow display never holds the writers
                plan.progress(run.summary())
            if worked:
                continue
            if not config.forever:
                return
            stop.wait(config.poll_seconds)  # nothing available now: look again later


def _turn(
    store: Store,
    handler: MessageHandler | LongHandler[Any],
    plan: _Plan,
    run: Tally,
    hand: list[Lease],
) -> bool:
    """Work for one turn; False when nothing was available."""
    if isinstance(handler, LongHandler):
        if not run.reserve(1):
            return False
        outcome = None
        try:
            outcome = _long_step(store, handler, plan.lease_seconds, plan.every, hand)
        finally:
            run.settle(1, [] if outcome is None else [outcome])
            interrupts.recorded()
        return outcome is not None
    # One turn for a slice of messages, then let a waiting worker in: fair
    # between processes, without trading places at every transaction.
    with store.writer_turn():
        slice_ends = time.monotonic() + TURN_SLICE_SECONDS
        while not plan.stop.is_set():
            wanted = run.reserve(plan.config.batch)
            if not wanted:
                break
            outcomes: list[Outcome] = []  # one outcome per lease
            try:
                outcomes = _step(store, handler, plan.lease_seconds, wanted, hand)
            finally:
                run.settle(wanted, outcomes)
                interrupts.recorded()
            if not outcomes:
                return False
            if time.monotonic() >= slice_ends:
                break
    return True


def _step(
    store: Store,
    handler: MessageHandler,
    lease_seconds: int,
    wanted: int,
    hand: list[Lease],
) -> list[Outcome]:
    """Claim and complete up to ``wanted`` messages; their outcomes (empty: none).

    ``hand`` holds the leases between their claim and their completion.
    """
    # the batched path: one statement to claim them, one transaction to complete them
    if wanted > 1:
        batch = store.claim_messages(wanted, lease_seconds)
        hand[:] = [claimed.lease for claimed in batch]
        interrupts.recorded()
        outcomes = (
            [c.outcome for c in store.complete_many(batch, handler)] if batch else []
        )
        hand.clear()
        return outcomes
    # the simple path: one statement to claim, one transaction to complete
    one: Claimed | None = store.claim_message(lease_seconds)
    if one is None:
        return []
    hand[:] = [one.lease]
    interrupts.recorded()
    try:
        outcome = store.complete_message(one, handler).outcome
    except LeaseLost:
        # Our lease ran out while we worked; the next claim will re-issue it.
        outcome = Outcome.LEASE_LOST
    hand.clear()
    return [outcome]


def _long_step(
    store: Store,
    handler: LongHandler[R],
    lease_seconds: int,
    every: float,
    hand: list[Lease],
) -> Outcome | None:
    """Claim one message, prepare it under a heartbeat, then complete it.

    ``None``: nothing was available.
    """

    def claim_and_read(tx: Tx) -> tuple[Lease, Message] | None:
        lease = store.claim_tx(tx, lease_seconds)
        return None if lease is None else (lease, store.leased_tx(tx, lease))

    # one transaction: the lease and the payload it covers
    claimed = store.write(claim_and_read)
    if claimed is None:
        return None
    lease, message = claimed
    hand[:] = [lease]
    interrupts.recorded()
    outcome = _prepare_and_complete(
        store, handler, lease, message, every, lease_seconds, hand
    )
    hand.clear()
    return outcome


def _prepare_and_complete(
    store: Store,
    handler: LongHandler[R],
    lease: Lease,
    message: Message,
    every: float,
    lease_seconds: int,
    hand: list[Lease],
) -> Outcome:
    # Outside any transaction and outside the writer's turn: other workers go
    # on writing, and the heartbeat's extensions can commit.
    beat = store.heartbeat(lease, every=every, lease_seconds=lease_seconds)
    try:
        with beat:
            result = handler.prepare(message)
    except Exception as exc:
        return _refuse(store, beat.lease, exc)
    finally:
        hand[:] = [beat.lease]  # an extension is the lease to give back
    if beat.lost is not None:
        # another worker may own the message now: the result must not be written
        return Outcome.LEASE_LOST
    try:
        return store.complete(
            beat.lease, lambda tx, leased: handler.write(tx, leased, result)
        ).outcome
    except LeaseLost:
        return Outcome.LEASE_LOST


def _refuse(store: Store, lease: Lease, exc: Exception) -> Outcome:
    """Record a long step's refusal (or crash), as ``complete`` records a handler's."""
    code, detail, permanent = refusal(exc)
    after = retry_after_of(exc)
    try:
        return store.fail(
            lease, code, permanent=permanent, detail=detail, retry_after=after
        ).outcome
    except LeaseLost:
        return Outcome.LEASE_LOST
