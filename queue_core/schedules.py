"""Periodic jobs: a schedule enqueues one message per period, ``NAME-<period start>``.

A period starts at a multiple of its length in Unix seconds (1970-01-01 UTC),
and its message's event id is the schedule's name and that start. The queue's
own deduplication does the rest: the same id with the same payload is a
duplicate, not a second message, so two schedulers (or one restarted) enqueue
each period once. There is no table of schedules: a schedule is its command
line, and each scheduler is a process (``queue-core schedule --forever``).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from .envelope import parse_items
from .errors import InvalidTime
from .queues import DEFAULT_QUEUE, QueueSettings
from .rules import DEFAULT_PRIORITY, MAX_DELAY_SECONDS, check_priority
from .store import Store
from .transactions import Tx
from .values import EnqueueResult

MAX_PERIOD_SECONDS: Final = MAX_DELAY_SECONDS  # the longest wait the queue knows
# Unix seconds of the latest period start an id must hold (the clock's digits)
_LONGEST_START: Final = 10**10


@dataclass(frozen=True)
class Schedule:
    """One periodic job: its name, its period in seconds, its payload and priority."""

    name: str
    every: int
    payload: str  # the JSON text of an object, as given
    priority: int = DEFAULT_PRIORITY

    def period_start(self, now: int) -> int:
        """The start of the period that ``now`` falls in."""
        return now - now % self.every

    def event_id(self, start: int) -> str:
        """The event id of the period that starts at ``start``."""
        return f"{self.name}-{start}"


@dataclass(frozen=True)
class Period:
    """What one enqueue of a period did: its event id and the queue's answer."""

    event_id: str
    start: int
    result: EnqueueResult

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict: event_id, start, accepted, duplicates."""
        return {"event_id": self.event_id, "start": self.start, **self.result.to_dict()}


def check_schedule(schedule: Schedule, settings: QueueSettings) -> None:
    """Refuse a schedule the queue cannot take, before anything is written.

    :raises InvalidTime: the queue is the default one, or its id rule refuses
        ``NAME-<period start>``, or the period or the payload is unusable.
    """
    if settings.name == DEFAULT_QUEUE:
        raise InvalidTime(
            "a schedule needs a queue of its own: the default queue's ids are 'E' "
            "and four digits, not NAME-<period start>; create one, e.g. "
            "queue-core create jobs --id-pattern '[a-z0-9_-]+-[0-9]+', "
            "then schedule with --queue jobs"
        )
    if not 1 <= schedule.every <= MAX_PERIOD_SECONDS:
        raise InvalidTime(
            f"every must be 1..{MAX_PERIOD_SECONDS} seconds, got {schedule.every}"
        )
    check_priority(schedule.priority)
    for start in (0, _LONGEST_START - _LONGEST_START % schedule.every):
        refused = settings.refuses(schedule.event_id(start))
        if refused is not None:
            raise InvalidTime(
                f"queue {settings.name} refuses the schedule's event id "
                f"{schedule.event_id(start)!r}: {refused}"
            )
    payload_object(schedule.payload)


def payload_object(text: str) -> Mapping[str, Any]:
    """The payload's JSON object; refuses other JSON, or text that is not JSON."""
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise InvalidTime(f"payload is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise InvalidTime(f"payload must be a JSON object, got {text[:40]!r}")
    return value


def enqueue_period(store: Store, schedule: Schedule) -> Period:
    """Enqueue the current period's message, in one transaction; a repeat is a duplicate.

    The period is read from the transaction's own clock (the server's, on
    PostgreSQL with its clock), so every scheduler of one database agrees.
    """
    payload = payload_object(schedule.payload)

    def body(tx: Tx) -> Period:
        start = schedule.period_start(tx.now())
        event_id = schedule.event_id(start)
        batch = parse_items(
            [{"event_id": event_id, "payload": payload}],
            single=True,
            rules=store.settings,
        )
        result = store.enqueue_tx(tx, batch, priority=schedule.priority)
        return Period(event_id, start, result)

    return store.write(body)


def run_schedule(
    store: Store,
    schedule: Schedule,
    *,
    forever: bool,
    stop: threading.Event,
    on_period: Callable[[Period], None],
) -> int:
    """Enqueue the current period, then (``forever``) each next one as it starts; how many.

    Stops between two periods once ``stop`` is set. The wait is measured on
    this host's clock; a period read again too early is only a duplicate.
    """
    check_schedule(schedule, store.settings)
    periods = 0
    while True:
        period = enqueue_period(store, schedule)
        periods += 1
        on_period(period)
        if not forever:
            return periods
        following = period.start + schedule.every
        # a second at least: a host clock ahead of the database's reads the
        # same period again (a duplicate) rather than spinning
        wait = max(following - time.time(), 1.0)
        while not stop.is_set() and wait > 0:
            stop.wait(min(wait, 1.0))
            wait = following - time.time()
        if stop.is_set():
            return periods
