"""queue_core: a reliable local message queue on SQLite.

Lease, fencing (generation), effect + ACK in one transaction, retry with
backoff, dead letters and redrive, idempotency receipts; the standard library
only. The protocol is ``Store``; your application's effect plugs in as a
handler ``handler(tx, message)`` or as your own SQL before ``complete_tx``.
``queue_core.receipts`` adds idempotency receipts; ``queue_core.testing`` holds
what your own tests can use (a fault probe). ``queue_core.ledger`` is the
reference application (money by category, in ``queue_core.app``): an
application built on the queue, not part of it. Every name here is imported
on first use (``queue_core.Store`` imports the store): ``import queue_core``
alone loads no store, no engine and no sqlite3, and never the reference
application or ``queue_core.prometheus`` until they are named.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:  # what mypy and your editor see; at run time __getattr__ below
    from . import prometheus, receipts
    from .app import ledger
    from .app.ledger import DEFAULT_CATEGORIES, Effect, Handler, Report, Totals
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
    from .heartbeat import Heartbeat
    from .queues import DEFAULT_QUEUE, QueueSettings
    from .receipts import Receipt, ReceiptHandler, Recorded, key_from_payload
    from .rules import DEFAULT_PRIORITY, MAX_DELAY_SECONDS, MAX_PRIORITY, MIN_PRIORITY
    from .schedules import Period, Schedule, enqueue_period, run_schedule
    from .store import (
        DEFAULT_LEASE_SECONDS,
        MAX_ATTEMPTS,
        MAX_ATTEMPTS_LIMIT,
        Store,
        backoff_seconds,
    )
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

__version__ = "0.2.0"

# Every public name is imported on first use (PEP 562), from the module that
# defines it: ``import queue_core`` (and so ``queue-core --help``, which needs
# only the version) loads no store, no engine, no sqlite3; the reference
# application and the Prometheus exposition load only when named.
# module -> the names it gives (None: the module itself, under its last name)
_SOURCES: Final[dict[str, tuple[str | None, ...]]] = {
    "queue_core.receipts": (
        None,
        "Receipt",
        "ReceiptHandler",
        "Recorded",
        "key_from_payload",
    ),
    "queue_core.clock": ("Clock", "ModelClock", "SystemClock"),
    "queue_core.envelope": ("Batch", "Event", "canonical_json", "parse_batch"),
    "queue_core.errors": (
        "BatchRejected",
        "HandlerFailure",
        "InputError",
        "InvalidQueue",
        "InvalidReceipt",
        "InvalidTime",
        "LeaseLost",
        "NoThreads",
        "NotDead",
        "OperationConflict",
        "PermanentFailure",
        "QueueConflict",
        "QueueError",
        "ReceiptError",
        "StatementFailed",
        "StatementRefused",
        "StorageError",
        "TemporaryFailure",
        "UnknownEvent",
        "UnknownQueue",
        "WrongPath",
    ),
    "queue_core.queues": ("DEFAULT_QUEUE", "QueueSettings"),
    "queue_core.heartbeat": ("Heartbeat",),
    "queue_core.store": (
        "DEFAULT_LEASE_SECONDS",
        "MAX_ATTEMPTS",
        "MAX_ATTEMPTS_LIMIT",
        "Store",
        "backoff_seconds",
    ),
    "queue_core.rules": (
        "DEFAULT_PRIORITY",
        "MAX_DELAY_SECONDS",
        "MAX_PRIORITY",
        "MIN_PRIORITY",
    ),
    "queue_core.schedules": ("Period", "Schedule", "enqueue_period", "run_schedule"),
    "queue_core.transactions": ("Probe", "Tx"),
    "queue_core.values": (
        "Claimed",
        "Completion",
        "EnqueueResult",
        "Latency",
        "Lease",
        "Message",
        "Metrics",
        "Outcome",
        "Pruned",
        "StateCounts",
        "WorkCounters",
    ),
    "queue_core.worker": (
        "LongHandler",
        "WorkerConfig",
        "WorkInterrupted",
        "WorkSummary",
        "work",
    ),
    "queue_core.app.ledger": (
        None,
        "Handler",
        "Effect",
        "Totals",
        "Report",
        "DEFAULT_CATEGORIES",
    ),
    "queue_core.prometheus": (None,),
}
# name -> (module, attribute of it, or None for the module itself)
_ON_FIRST_USE: Final[dict[str, tuple[str, str | None]]] = {
    (module.rsplit(".", 1)[1] if name is None else name): (module, name)
    for module, names in _SOURCES.items()
    for name in names
}


def __getattr__(name: str) -> Any:
    """``queue_core.Store``, ``queue_core.ledger``, ...: imported on first use.

    A submodule not named above (``queue_core.store``) is imported on first
    use too, as ``import queue_core`` once made it an attribute by importing it.
    """
    if name in _ON_FIRST_USE:
        module_name, attribute = _ON_FIRST_USE[name]
        module = importlib.import_module(module_name)
        value = module if attribute is None else getattr(module, attribute)
    elif not name.startswith("_") and _is_submodule(name):
        value = importlib.import_module(f"{__name__}.{name}")
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value  # the next use finds it without coming here
    return value


def _is_submodule(name: str) -> bool:
    from importlib.util import find_spec

    return find_spec(f"{__name__}.{name}") is not None


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
