"""What an operation knows of its queue: ``Scope``.

A ``Store`` opens one queue; every operation (``claims``, ``completion``,
``enqueues``, ``reads``) is a plain function of that scope and a
transaction, so no operation keeps state of its own and none inherits from
another. The scope is made once, when the store opens the queue.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .queues import QueueSettings
from .rules import check_lease_seconds

Probe = Callable[[str], None]  # told each named step of an operation as it is reached


@dataclass(frozen=True)
class Scope:
    """One open queue: its name, its settings, its claim budget, and the probe."""

    queue: str
    settings: QueueSettings
    max_attempts: int  # the queue's own, or what the store was opened with
    probe: Probe | None = None

    def at(self, point: str) -> None:
        """Tell the probe that the operation reached ``point`` (a name of ``PROBE_POINTS``)."""
        if self.probe is not None:
            self.probe(point)

    def lease_seconds_for(self, lease_seconds: int | None) -> int:
        """``lease_seconds``, checked; None is the queue's own (30 for ``default``)."""
        if lease_seconds is None:
            return self.settings.lease_seconds
        check_lease_seconds(lease_seconds)
        return lease_seconds
