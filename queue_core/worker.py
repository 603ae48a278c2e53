"""The worker loop: claim, complete, repeat, until nothing is available now.

A finite worker, not a daemon: it stops when the queue has nothing available
at the current time (a message waiting for its backoff is not available yet).
Several workers may run at once on one file; the store waits out the lock.
A handler that raises is recorded on its message by the store (``handler_error``
or the refusal's own code) and the loop goes on with the next message.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from .errors import LeaseLost
from .store import DEFAULT_LEASE_SECONDS, Handler, Outcome, Store


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
) -> WorkSummary:
    """Process messages until none is available now (or ``max_messages`` were claimed)."""
    if not isinstance(store, Store):
        raise TypeError(f"work() takes a Store first, got {type(store).__name__}")
    if not callable(handler):
        raise TypeError(f"handler must be callable as handler(tx, message), got {type(handler).__name__}")
    if max_messages is not None and (isinstance(max_messages, bool) or not isinstance(max_messages, int)):
        raise TypeError(f"max_messages must be an integer or None, got {type(max_messages).__name__}")
    if max_messages is not None and max_messages < 0:
        raise ValueError("max_messages must not be negative")
    counts = {"claimed": 0, "done": 0, "retried": 0, "dead": 0, "lease_lost": 0}
    while max_messages is None or counts["claimed"] < max_messages:
        lease = store.claim(lease_seconds)
        if lease is None:
            break
        counts["claimed"] += 1
        try:
            completion = store.complete(lease, handler)
        except LeaseLost:
            # Our lease ran out while we worked; the next claim will re-issue it.
            counts["lease_lost"] += 1
            continue
        key = {Outcome.DONE: "done", Outcome.RETRY: "retried", Outcome.DEAD: "dead"}[completion.outcome]
        counts[key] += 1
    return WorkSummary(**counts)
