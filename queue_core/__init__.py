"""queue_core: a reliable local message queue on SQLite.

Lease, fencing (generation), effect + ACK in one transaction, retry with
backoff, dead letters and redrive, idempotency receipts; the standard library
only.
"""

from .clock import Clock, ModelClock, SystemClock
from .envelope import Batch, Event, canonical_json, parse_batch
from .errors import (
    BatchRejected,
    HandlerFailure,
    InputError,
    InvalidReceipt,
    LeaseLost,
    NotDead,
    OperationConflict,
    PermanentFailure,
    QueueError,
    ReceiptError,
    StorageError,
    TemporaryFailure,
    UnknownEvent,
    WrongPath,
)
from .handler import DEFAULT_CATEGORIES, Effect, Handler
from .receipts import Receipt, ReceiptHandler, Recorded, key_from_payload
from .store import (
    DEFAULT_LEASE_SECONDS,
    MAX_ATTEMPTS,
    Completion,
    EnqueueResult,
    Lease,
    Message,
    Outcome,
    Snapshot,
    Store,
    Tx,
    backoff_seconds,
)
from .worker import WorkSummary, work

__version__ = "0.1.0"

__all__ = [
    "Batch", "BatchRejected", "Clock", "Completion", "DEFAULT_CATEGORIES", "DEFAULT_LEASE_SECONDS",
    "Effect", "EnqueueResult", "Event", "Handler", "HandlerFailure", "InputError", "InvalidReceipt", "Lease",
    "LeaseLost", "MAX_ATTEMPTS", "Message", "ModelClock", "NotDead", "OperationConflict", "Outcome",
    "PermanentFailure", "QueueError", "Receipt", "ReceiptError", "ReceiptHandler", "Recorded", "Snapshot",
    "StorageError", "Store", "SystemClock", "TemporaryFailure", "Tx", "UnknownEvent", "WorkSummary",
    "WrongPath", "backoff_seconds", "canonical_json", "key_from_payload", "parse_batch", "work",
]
