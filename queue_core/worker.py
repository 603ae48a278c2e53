"""The worker loop: claim, complete, repeat, until nothing is available now.

A finite worker, not a daemon: it stops when the queue has nothing available
at the current time (a message waiting for its backoff is not available yet).
Several workers may run at once on one file; the store waits out the lock.
A handler that raises is recorded on its message by the store (``handler_error``
or the refusal's own code) and the loop goes on with the next message.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

from .errors import LeaseLost
from .store import DEFAULT_LEASE_SECONDS, MAX_BATCH, Handler, Outcome, Store

# How long a worker keeps its turn to write before a waiting worker gets in.
TURN_SLICE_SECONDS = 0.05
_COUNTER = {Outcome.DONE: "done", Outcome.RETRY: "retried", Outcome.DEAD: "dead", Outcome.LEASE_LOST: "lease_lost"}


@dataclass(frozen=True)
class WorkSummary:
    """What one run of the worker did."""

    claimed: int = 0
    done: int = 0
    retried: int = 0
    dead: int = 0
    lease_lost: int = 0

    def to_dict(self) -> dict[str, int]:
        return asdict(self)


def work(
    store: Store,
    handler: Handler,
    *,
    lease_seconds: int = DEFAULT_LEASE_SECONDS,
    max_messages: int | None = None,
    batch: int = 1,
    progress: Callable[[WorkSummary], None] | None = None,
) -> WorkSummary:
    """Process messages until none is available now (or ``max_messages`` were claimed).

    ``batch=1`` (the default) is the simple path the chapters teach: one
    transaction to claim, one to complete. ``batch=k`` is the batched path:
    up to k messages claimed in one transaction and completed in one, each
    message with its own lease, generation, effect and ACK. It needs fewer
    commits per message; each message then waits for the whole batch, so the
    lease must cover k handlers' time.

    :param store: the queue; ``work`` opens no connection of its own.
    :param handler: ``handler(tx, message)``, as for ``Store.complete``.
    :param lease_seconds: each lease's length; longer than the handler takes (k handlers with ``batch=k``).
    :param max_messages: stop after claiming this many (``None``: until none is available now).
    :param batch: messages per claim transaction and per completion transaction (1..``MAX_BATCH``).
    :param progress: called with the counts so far after each turn (about every 50 ms while busy).
    :returns: counts of claimed, done, retried, dead and lease-lost messages.
    """
    if not isinstance(store, Store):
        raise TypeError(f"work() takes a Store first, got {type(store).__name__}")
    if not callable(handler):
        raise TypeError(f"handler must be callable as handler(tx, message), got {type(handler).__name__}")
    if max_messages is not None and (isinstance(max_messages, bool) or not isinstance(max_messages, int)):
        raise TypeError(f"max_messages must be an integer or None, got {type(max_messages).__name__}")
    if max_messages is not None and max_messages < 0:
        raise ValueError("max_messages must not be negative")
    if isinstance(batch, bool) or not isinstance(batch, int) or not 1 <= batch <= MAX_BATCH:
        raise ValueError(f"batch must be an integer 1..{MAX_BATCH}, got {batch!r}")
    counts = {"claimed": 0, "done": 0, "retried": 0, "dead": 0, "lease_lost": 0}
    more = True
    while more and (max_messages is None or counts["claimed"] < max_messages):
        # One turn for a slice of messages, then let a waiting worker in: fair
        # between processes, without trading places at every transaction.
        with store.writer_turn():
            slice_ends = time.monotonic() + TURN_SLICE_SECONDS
            while max_messages is None or counts["claimed"] < max_messages:
                wanted = batch if max_messages is None else min(batch, max_messages - counts["claimed"])
                outcomes = _step(store, handler, lease_seconds, wanted)
                if not outcomes:
                    more = False
                    break
                counts["claimed"] += len(outcomes)  # one outcome per lease
                for outcome in outcomes:
                    counts[_COUNTER[outcome]] += 1
                if time.monotonic() >= slice_ends:
                    break
        if progress is not None:
            progress(WorkSummary(**counts))  # outside the turn: a slow display never holds the writers
    return WorkSummary(**counts)


def _step(store: Store, handler: Handler, lease_seconds: int, wanted: int) -> list[Outcome]:
    """Claim and complete up to ``wanted`` messages; their outcomes (empty: nothing available)."""
    if wanted > 1:  # the batched path: one transaction to claim them, one to complete them
        leases = store.claim_many(wanted, lease_seconds)
        return [completion.outcome for completion in store.complete_many(leases, handler)] if leases else []
    lease = store.claim(lease_seconds)
    if lease is None:
        return []
    try:
        return [store.complete(lease, handler).outcome]
    except LeaseLost:
        # Our lease ran out while we worked; the next claim will re-issue it.
        return [Outcome.LEASE_LOST]
