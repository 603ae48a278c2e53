"""Database-wide administration: the queues of a database, apart from one queue's operations.

``create_queue``, ``queues`` and ``queue_settings`` work on the database a
store opened, whichever queue the store itself works on.
"""

from __future__ import annotations

from .errors import QueueConflict
from .queues import (
    DEFAULT_SETTINGS,
    NEW_QUEUE_BACKOFF_JITTER,
    TEACHING_ID_PATTERN,
    QueueSettings,
    check_queue_name,
)
from .queues import settings as checked_settings
from .transactions import Transactions, Tx
from .values import StateCounts


class Administering:
    """The store's queue administration: a facet of ``Store``, with no state of its own."""

    # set by the Store that composes this facet: its transaction runner
    _runner: Transactions


    def queue_settings(self, name: str) -> QueueSettings | None:
        """The settings of queue ``name`` in this database, or None if it has none."""
        check_queue_name(name)
        row = self._runner.read(lambda view: view.ops.queue_settings(view.conn, name))
        return None if row is None else QueueSettings(*row)

    def create_queue(
        self,
        name: str,
        *,
        id_pattern: str = TEACHING_ID_PATTERN,
        max_attempts: int = DEFAULT_SETTINGS.max_attempts,
        lease_seconds: int = DEFAULT_SETTINGS.lease_seconds,
        max_payload_bytes: int = DEFAULT_SETTINGS.max_payload_bytes,
        backoff_base_seconds: int = DEFAULT_SETTINGS.backoff_base_seconds,
        backoff_max_seconds: int = DEFAULT_SETTINGS.backoff_max_seconds,
        backoff_jitter: float | None = None,
    ) -> QueueSettings:
        """Create queue ``name`` in this database with its own settings; returns them.

        :param id_pattern: a Python regular expression every event id must
            match in full; it may not match the empty string.
        :param max_attempts: claims per cycle before dead (1..100).
        :param lease_seconds: a claim's lease when none is named.
        :param max_payload_bytes: the canonical payload's limit.
        :param backoff_base_seconds: the delay after a first temporary failure;
            each next one doubles it.
        :param backoff_max_seconds: no delay is longer (its cap), nor is a
            ``TemporaryFailure``'s ``retry_after``.
        :param backoff_jitter: the fraction 0..1 each delay may lose at random,
            so that messages failed together do not return together (None:
            ``NEW_QUEUE_BACKOFF_JITTER``; the queue ``default`` has 0).
        :raises InvalidQueue: a name or setting is unusable (nothing written).
        :raises QueueConflict: the queue exists with other settings (with the
            same ones, nothing happens).
        """
        if backoff_jitter is None:  # the queue default's own is no jitter
            default = name == DEFAULT_SETTINGS.name
            backoff_jitter = (
                DEFAULT_SETTINGS.backoff_jitter if default else NEW_QUEUE_BACKOFF_JITTER
            )
        wanted = checked_settings(
            name,
            id_pattern=id_pattern,
            max_attempts=max_attempts,
            lease_seconds=lease_seconds,
            max_payload_bytes=max_payload_bytes,
            backoff_base_seconds=backoff_base_seconds,
            backoff_max_seconds=backoff_max_seconds,
            backoff_jitter=backoff_jitter,
        )

        def create(tx: Tx) -> QueueSettings:
            row = tx.ops.queue_settings(tx.conn, name)
            if row is None:
                tx.ops.create_queue(tx.conn, wanted.to_dict())
                return wanted
            found = QueueSettings(*row)
            if found != wanted:
                asked = wanted.to_dict()
                differ = ", ".join(
                    f"{key} {value!r}, not {asked[key]!r}"
                    for key, value in found.to_dict().items()
                    if value != asked[key]
                )
                raise QueueConflict(
                    f"queue {name!r} exists with {differ}; nothing was changed"
                )
            return found

        return self._runner._write(None, create)

    def queues(self) -> list[tuple[QueueSettings, StateCounts]]:
        """Every queue of this database, by name, with its counts by state."""

        def every(view: Tx) -> list[tuple[QueueSettings, StateCounts]]:
            counts = view.ops.queue_counts(view.conn)
            return [
                (QueueSettings(*row), StateCounts.of(counts.get(row[0], {})))
                for row in view.ops.queues(view.conn)
            ]

        return self._runner.read(every)
