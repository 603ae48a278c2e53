"""What the protocol asks of an engine's statements: ``Operations``, one method per operation.

The protocol (``claims.py``, ``completion.py``, ...) calls ``tx.ops.<operation>``
with named values and gets typed values back (a ``Message``, a count, a
settings row): it never sees a statement's text, its parameters' order or a
driver's row. How an engine does each operation is its own: the default is
``queries.NamedQueries``, one named statement of the engine's ``.sql`` file
per operation, its rows decoded by column name; an engine may implement any
operation with its own statements and its own rows (a subclass, or a class
of its own that fits this Protocol).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from ..values import Lease, Message, WorkCounters
from .base import Connection

Times = Mapping[str, "int | None"]  # now, until, lease_seconds: Tx.times()
# a queue's row: name, id pattern, attempts, lease, payload limit, then its retry
# policy (backoff base, backoff cap, jitter), the order of QueueSettings
SettingsRow = tuple[str, str, int, int, int, int, int, float]
# A receipt as stored: scope, tenant, operation, payload, effect, effect_queue.
ReceiptRow = tuple[str, str, str, str, str, "str | None"]


class Operations(Protocol):
    """The protocol's operations on one engine (``Engine.ops``)."""

    # ----------------------------------------------------- enqueue
    def enqueue_turn(self, conn: Connection) -> None:
        """Make this enqueue wait for the others (where no write lock does it)."""
        ...

    def stored(
        self, conn: Connection, queue: str, ids: list[str]
    ) -> list[tuple[str, str, str | None]]:
        """Of ``ids``, the stored events: (event_id, payload, hash if pruned)."""
        ...

    def insert(
        self,
        conn: Connection,
        queue: str,
        events: list[tuple[str, str]],
        *,
        now: int,
        available_at: int,
        priority: int = 0,
    ) -> None:
        """Store new events (event_id, canonical payload), ready at ``available_at``, at ``priority``."""
        ...

    # ------------------------------------------------------- claim
    def claim_messages(
        self,
        conn: Connection,
        queue: str,
        wanted: int,
        *,
        max_attempts: int,
        token: int,
        times: Times,
        lease_expired: str,
    ) -> list[Message]:
        """Lease up to ``wanted`` messages in one statement; the leased and the newly dead."""
        ...

    # ----- the fence: every move of a leased row (lifecycle.MOVES)
    def ack(
        self, conn: Connection, queue: str, leases: Sequence[Lease], times: Times
    ) -> int:
        """The fenced ACK of ``leases``: how many of their messages it marked done."""
        ...

    def release(self, conn: Connection, queue: str, lease: Lease, times: Times) -> bool:
        """The fenced release; True if the message is ready again."""
        ...

    def extend(
        self, conn: Connection, queue: str, lease: Lease, *, now: int, until: int
    ) -> bool:
        """The fenced extension to ``until``; True if the lease was current."""
        ...

    def fail(
        self,
        conn: Connection,
        queue: str,
        lease: Lease,
        move: str,
        times: Times,
        *,
        code: str,
        detail: str | None,
        available_at: int | None,
    ) -> bool:
        """The fenced failure of ``lease``: ``move`` "retry" (ready at ``available_at``) or "dead",
        recording ``code`` and ``detail``; True if the lease was current.
        """
        ...

    def lease_locked(
        self, conn: Connection, queue: str, event_id: str
    ) -> tuple[Message, int] | None:
        """The message (its row locked where rows are) and its lease's claim token."""
        ...

    # ----------------------------------------------------- redrive
    def state(self, conn: Connection, queue: str, event_id: str) -> str | None:
        """The message's state (its row locked where rows are), or None."""
        ...

    def redrive(self, conn: Connection, queue: str, event_id: str, now: int) -> None:
        """A dead message's new cycle: attempts from zero, available at ``now``."""
        ...

    def redrive_dead(
        self,
        conn: Connection,
        queue: str,
        *,
        code: str | None,
        after: str,
        limit: int,
        now: int,
    ) -> list[str]:
        """Up to ``limit`` dead messages after ``after`` (of ``code``) redriven; their ids."""
        ...

    # ------------------------------------------------------- reads
    def message(self, conn: Connection, queue: str, event_id: str) -> Message | None:
        """One message, or None."""
        ...

    def messages(
        self, conn: Connection, queue: str, state: str | None, limit: int | None
    ) -> list[Message]:
        """The messages (of ``state``; the first ``limit``), by event id."""
        ...

    def counts(self, conn: Connection, queue: str) -> dict[str, int]:
        """How many messages of each stored state."""
        ...

    def oldest_ready(self, conn: Connection, queue: str) -> int | None:
        """When the oldest ready message was enqueued."""
        ...

    def dead_attempts(self, conn: Connection, queue: str) -> dict[int, int]:
        """How many dead messages died after each number of attempts."""
        ...

    def done_summary(self, conn: Connection, queue: str) -> tuple[int, int | None, int]:
        """The timed done messages: how many, the longest and the total enqueue-to-done seconds."""
        ...

    def done_seconds_at(self, conn: Connection, queue: str, offset: int) -> int:
        """The enqueue-to-done seconds of the timed done message at ``offset``, shortest first."""
        ...

    def expired_and_pruned(self, conn: Connection, queue: str) -> tuple[int, int]:
        """Leases that ran out, and payloads pruned, in all."""
        ...

    def work_counters(self, conn: Connection, queue: str) -> WorkCounters:
        """The queue's counters of work done, as they stand (they survive restarts)."""
        ...

    def purge(self, conn: Connection, queue: str, state: str) -> int:
        """Remove every message of ``state`` (ready or dead only); how many."""
        ...

    # ------------------------------------------------------- prune
    def prunable(
        self, conn: Connection, queue: str, cutoff: int, limit: int
    ) -> list[tuple[str, str]]:
        """Up to ``limit`` done messages ACKed by ``cutoff`` with their payloads."""
        ...

    def prune(
        self, conn: Connection, queue: str, digests: list[tuple[str, str]]
    ) -> None:
        """Replace each (event_id, digest)'s payload by its hash."""
        ...

    def unknown_age(self, conn: Connection, queue: str) -> int:
        """Done messages with no done time (from before schema version 3)."""
        ...

    # ------------------------------------------------ named queues
    def queue_settings(self, conn: Connection, name: str) -> SettingsRow | None:
        """Queue ``name``'s settings row, or None."""
        ...

    def create_queue(self, conn: Connection, settings: Mapping[str, object]) -> None:
        """A new queue's row (its name and settings)."""
        ...

    def queues(self, conn: Connection) -> list[SettingsRow]:
        """Every queue's settings row, by name."""
        ...

    def queue_counts(self, conn: Connection) -> dict[str, dict[str, int]]:
        """Every queue's counts by state."""
        ...

    # ---------------------------------------------------- receipts
    def receipt_turn(
        self, conn: Connection, scope: str, tenant: str, operation: str
    ) -> None:
        """Make this key's writers take turns (where no write lock does it)."""
        ...

    def receipt(
        self, conn: Connection, scope: str, tenant: str, operation: str
    ) -> ReceiptRow | None:
        """The receipt of (``scope``, ``tenant``, ``operation``), or None."""
        ...

    def add_receipt(self, conn: Connection, receipt: ReceiptRow) -> None:
        """Store a receipt: (scope, tenant, operation, payload, effect, effect_queue)."""
        ...

    def create_receipts(self, conn: Connection) -> None:
        """The receipts table, in a database that is not a queue's (SQLite's only).

        A table from before scopes moves to the scope ``default``.
        """
        ...

    def receipts(self, conn: Connection) -> list[ReceiptRow]:
        """Every receipt, by key."""
        ...

    # ----------------------------------------------------- catalog
    def server_time(self, conn: Connection) -> float:
        """The database server's clock, in seconds with a fraction."""
        ...

    def table_exists(self, conn: Connection, name: str) -> bool:
        """Whether table ``name`` exists; reading it writes nothing."""
        ...

    # --------------------------------------------- migration lines
    def line_turn(self, conn: Connection) -> None:
        """Make installs of migration lines take turns (where no write lock does it)."""
        ...

    def line_version(self, conn: Connection, line: str) -> int:
        """The recorded version of migration line ``line`` (0: never installed)."""
        ...

    def set_line_version(self, conn: Connection, line: str, version: int) -> None:
        """Record migration line ``line`` at ``version``."""
        ...
