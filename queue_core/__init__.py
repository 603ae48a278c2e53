"""queue_core: a reliable local message queue on SQLite.

Lease, fencing (generation), effect + ACK in one transaction, retry with
backoff, dead letters and redrive, idempotency receipts; the standard library
only. The protocol is ``Store``; your application's effect plugs in as a
handler ``handler(tx, message)`` or as your own SQL before ``complete_tx``.
``queue_core.ledger`` is the reference application (money by category);
``queue_core.receipts`` adds idempotency receipts; ``queue_core.testing`` holds
the proof machinery (fault probes, the crashing child, crash matrix, chaos).
"""

from . import prometheus, receipts
from .app import ledger
from .clock import Clock, ModelClock, SystemClock
from .envelope import Batch, Event, canonical_json, parse_batch
from .errors import (
    BatchRejected,
    HandlerFailure,
    InputError,
    InvalidQueue,
    InvalidReceipt,
    LeaseLost,
    NoThreads,
    NotDead,
    OperationConflict,
    PermanentFailure,
    QueueConflict,
    QueueError,
    ReceiptError,
    StatementFailed,
    StorageError,
    TemporaryFailure,
    UnknownEvent,
    UnknownQueue,
    WrongPath,
)
from .queues import DEFAULT_QUEUE, QueueSettings
from .heartbeat import Heartbeat
from .app.ledger import DEFAULT_CATEGORIES, Effect, Handler, Report, Totals
from .receipts import Receipt, ReceiptHandler, Recorded, key_from_payload
from .store import (
    DEFAULT_LEASE_SECONDS,
    MAX_ATTEMPTS,
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
)
from .worker import LongHandler, WorkInterrupted, WorkSummary, work

__version__ = "0.2.0"

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
    "Pruned",
    "DEFAULT_LEASE_SECONDS",
    "MAX_ATTEMPTS",
    "backoff_seconds",
    "work",
    "WorkSummary",
    "WorkInterrupted",
    "LongHandler",
    # time
    "Clock",
    "ModelClock",
    "SystemClock",
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
    "LeaseLost",
    "NoThreads",
    "StatementFailed",
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
