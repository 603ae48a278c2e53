"""queue_core: a reliable local message queue on SQLite.

Lease, fencing (generation), effect + ACK in one transaction, retry with
backoff, dead letters and redrive, idempotency receipts; the standard library
only. The protocol is ``Store``; your application's effect plugs in as a
handler ``handler(tx, message)`` or as your own SQL before ``complete_tx``.
``queue_core.receipts`` adds idempotency receipts; ``queue_core.testing`` holds
what your own tests can use (a fault probe). ``queue_core.ledger`` is the
reference application (money by category, in ``queue_core.app``): an
application built on the queue, not part of it, so ``import queue_core``
loads neither it nor ``queue_core.prometheus``; their names here
(``ledger``, ``Handler``, ``prometheus``, ...) import them on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Final

from . import receipts
from .clock import Clock, ModelClock, SystemClock
from .envelope import Batch, Event, canonical_json, parse_batch
from .errors import (
    BatchRejected,
    HandlerFailure,
    InputError,
    InvalidQueue,
    InvalidReceipt,
    InvalidTime,
    LeaseLost,
    NoThreads,
    NotDead,
    OperationConflict,
    PermanentFailure,
    QueueConflict,
    QueueError,
    ReceiptError,
    StatementFailed,
    StatementRefused,
    StorageError,
    TemporaryFailure,
    UnknownEvent,
    UnknownQueue,
    WrongPath,
)
from .queues import DEFAULT_QUEUE, QueueSettings
from .heartbeat import Heartbeat
from .receipts import Receipt, ReceiptHandler, Recorded, key_from_payload
from .store import (
    DEFAULT_LEASE_SECONDS,
    MAX_ATTEMPTS,
    MAX_ATTEMPTS_LIMIT,
    Store,
    backoff_seconds,
)
from .rules import DEFAULT_PRIORITY, MAX_DELAY_SECONDS, MAX_PRIORITY, MIN_PRIORITY
from .schedules import Period, Schedule, enqueue_period, run_schedule
from .transactions import Probe, Tx
from .values import (
    Claimed,
    Completion,
    EnqueueResult,
    Latency,
    Lease,
    Message,
    Metrics,
    Outcome,
    Pruned,
    StateCounts,
    WorkCounters,
)
from .worker import LongHandler, WorkerConfig, WorkInterrupted, WorkSummary, work

if TYPE_CHECKING:  # what mypy and your editor see; at run time __getattr__ below
    from . import prometheus
    from .app import ledger
    from .app.ledger import DEFAULT_CATEGORIES, Effect, Handler, Report, Totals

__version__ = "0.2.0"

# Names whose module is imported on first use (PEP 562): the reference
# application and the Prometheus exposition stay out of ``import queue_core``.
# name -> (module, attribute of it, or None for the module itself)
_ON_FIRST_USE: Final[dict[str, tuple[str, str | None]]] = {
    "ledger": ("queue_core.app.ledger", None),
    "Handler": ("queue_core.app.ledger", "Handler"),
    "Effect": ("queue_core.app.ledger", "Effect"),
    "Totals": ("queue_core.app.ledger", "Totals"),
    "Report": ("queue_core.app.ledger", "Report"),
    "DEFAULT_CATEGORIES": ("queue_core.app.ledger", "DEFAULT_CATEGORIES"),
    "prometheus": ("queue_core.prometheus", None),
}


def __getattr__(name: str) -> Any:
    """``queue_core.ledger``, ``queue_core.Handler``, ...: imported on first use."""
    try:
        module_name, attribute = _ON_FIRST_USE[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    module = importlib.import_module(module_name)
    value = module if attribute is None else getattr(module, attribute)
    globals()[name] = value  # the next use finds it without coming here
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_ON_FIRST_USE})


__all__ = [
    # the protocol
    "Store",
    "Tx",
    "Lease",
    "Message",
    "Claimed",
    "Outcome",
    "Completion",
    "EnqueueResult",
    "StateCounts",
    "Probe",
    "Heartbeat",
    "Metrics",
    "Latency",
    "WorkCounters",
    "Pruned",
    "DEFAULT_LEASE_SECONDS",
    "MAX_ATTEMPTS",
    "MAX_ATTEMPTS_LIMIT",
    "backoff_seconds",
    "work",
    "WorkerConfig",
    "WorkSummary",
    "WorkInterrupted",
    "LongHandler",
    # time
    "Clock",
    "ModelClock",
    "SystemClock",
    # time and order: a job at a time, priorities, periodic jobs
    "MAX_DELAY_SECONDS",
    "DEFAULT_PRIORITY",
    "MIN_PRIORITY",
    "MAX_PRIORITY",
    "Schedule",
    "Period",
    "enqueue_period",
    "run_schedule",
    # the envelope
    "Batch",
    "Event",
    # named queues
    "DEFAULT_QUEUE",
    "QueueSettings",
    "canonical_json",
    "parse_batch",
    # errors
    "QueueError",
    "InputError",
    "BatchRejected",
    "NotDead",
    "UnknownEvent",
    "UnknownQueue",
    "InvalidQueue",
    "QueueConflict",
    "ReceiptError",
    "OperationConflict",
    "InvalidReceipt",
    "InvalidTime",
    "LeaseLost",
    "NoThreads",
    "StatementFailed",
    "StatementRefused",
    "StorageError",
    "WrongPath",
    "HandlerFailure",
    "PermanentFailure",
    "TemporaryFailure",
    # receipts
    "receipts",
    "Receipt",
    "ReceiptHandler",
    "Recorded",
    "key_from_payload",
    # the reference application
    "ledger",
    "Handler",
    "Effect",
    "Totals",
    "Report",
    "DEFAULT_CATEGORIES",
    # operations: the metrics in Prometheus' text format
    "prometheus",
]
