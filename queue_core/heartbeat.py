"""A heartbeat: a thread that keeps extending one lease while long work runs.

``Store.heartbeat`` makes one. Each beat is a fenced extension, made through
the store like any operation; the first refused extension stops the thread
and is kept in ``lost``.
"""

from __future__ import annotations

import sys
import threading
from typing import Protocol

from .errors import LeaseLost, NoThreads, StorageError
from .values import Lease


def check_heartbeat(every: float, *, threads: bool) -> None:
    """Refuse a heartbeat that could not beat: a period of 0 or less, or no threads."""
    if not every > 0:
        raise ValueError(f"every must be a positive number of seconds, got {every!r}")
    if not threads:
        raise NoThreads(
            "a heartbeat extends the lease from a thread, and this Python"
            f" ({sys.platform}) cannot start one: run this on a machine"
        )


class Extends(Protocol):
    """What a heartbeat needs of its store: the fenced extension, and its thread's connection back."""

    def extend(self, lease: Lease, lease_seconds: int = ...) -> Lease: ...

    def _release_thread_connection(self) -> None: ...


class Heartbeat:
    """A thread that extends one lease until the block ends (``Store.heartbeat``)."""

    def __init__(
        self, store: Extends, lease: Lease, every: float, lease_seconds: int
    ) -> None:
        self.lease = lease  # the latest extension: complete with it
        # set if an extension was refused; the thread then stops
        self.lost: LeaseLost | None = None
        self.beats = 0  # extensions made
        # the last storage error of a beat, if any
        self.error: StorageError | None = None
        self._store, self._every, self._seconds = store, every, lease_seconds
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"heartbeat {lease.event_id}", daemon=True
        )

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        try:
            while not self._stop.wait(self._every):
                try:
                    self.lease = self._store.extend(self.lease, self._seconds)
                    self.beats += 1
                except LeaseLost as lost:
                    self.lost = lost
                    return
                # the next beat may work; the deadline tells if none did
                except StorageError as failed:
                    self.error = failed
        finally:
            # one heartbeat, one connection: not kept until close()
            self._store._release_thread_connection()
