"""Errors as a small hierarchy with stable, machine-readable codes.

Every error a caller is expected to handle carries a ``code`` (a stable string
that scripts may match on) and a human sentence. The CLI maps the class to an
exit status, so the hierarchy is also the CLI's contract:

* ``InputError`` (exit 2): the caller asked for something invalid; nothing was
  written.
* ``StorageError`` (exit 1, or 2 for a wrong path): the database could not do
  the work; nothing was half-written.
* ``LeaseLost``: a completion was refused by fencing; the caller's transaction
  was rolled back.

``PermanentFailure`` and ``TemporaryFailure`` are raised by business handlers,
not by the queue: they tell the queue which way to move the message.
"""

from __future__ import annotations


class QueueError(Exception):
    """Base of every expected queue_core error."""

    code: str = "queue_error"
    exit_status: int = 1

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else self.code


class InputError(QueueError):
    """The request itself is invalid (bad batch, bad event id, wrong state)."""

    code = "invalid_input"
    exit_status = 2


class BatchRejected(InputError):
    """A JSONL batch failed validation; the whole batch was rejected.

    ``line`` is the 1-based physical line number in the file (blank lines
    count), or ``None`` when the problem is the file as a whole.
    """

    def __init__(
        self, code: str, message: str, line: int | None = None, *, unit: str = "line"
    ) -> None:
        super().__init__(message, code=code)
        self.line = line
        self.unit = unit  # "item" for a list of dicts given to Store.enqueue

    def __str__(self) -> str:
        where = f"{self.unit} {self.line}: " if self.line is not None else ""
        return f"{where}{self.code}: {self.args[0]}"


class NotDead(InputError):
    """Redrive was asked for a message that is not in the dead state."""

    code = "not_dead"


class UnknownEvent(InputError):
    """An event id that the queue does not hold."""

    code = "unknown_event"


class InvalidQueue(InputError):
    """A queue's name or setting is unusable; nothing was written.

    Codes: ``invalid_queue_name``, ``invalid_id_pattern``, ``id_pattern_unsafe``
    (a pattern that may backtrack catastrophically), ``invalid_setting``.
    """

    code = "invalid_queue"


class UnknownQueue(InputError):
    """The database has no queue of this name (a typo never creates one)."""

    code = "unknown_queue"


class QueueConflict(InputError):
    """The queue exists with other settings; creating it again changes nothing."""

    code = "queue_conflict"


class InvalidTime(InputError, ValueError):
    """A time to run at, or a schedule, that the queue cannot take; nothing was written.

    A ``ValueError`` too, as the other bad arguments of an enqueue are.
    """

    code = "invalid_time"


class ReceiptError(InputError):
    """An idempotency receipt cannot be written; nothing was written."""

    code = "receipt_error"


class OperationConflict(ReceiptError):
    """The same ``(tenant, operation)`` was already recorded with another payload.

    A repeat must carry the same canonical payload to reuse the effect; a
    different operation needs a new operation key. Nothing was changed.
    """

    code = "operation_conflict"


class InvalidReceipt(ReceiptError):
    """A receipt's key or payload is unusable.

    Codes: ``invalid_receipt_key`` (tenant or operation not a string of
    1..200 characters), ``invalid_receipt_payload`` (no canonical JSON form,
    or over 10,000 bytes).
    """

    code = "invalid_receipt"


class LeaseLost(QueueError):
    """Fencing refused the operation: the lease expired or was re-issued.

    The transaction that tried to complete or fail the message was
    rolled back; whatever effect it had inserted is gone with it. Inside
    ``store.transaction()`` the refusal dooms the transaction: caught or
    not, its COMMIT raises ``LeaseLost`` and nothing of it is written.
    """

    code = "lease_lost"


class StatementFailed(QueueError):
    """A statement run through the transaction failed, and the ACK was refused.

    A handler (or the caller's own code before ``complete_tx``) caught the
    failure of one of its statements and went on. PostgreSQL would refuse
    every later statement of that transaction; SQLite would let it commit
    without the write that failed. queue_core refuses the ACK on both: the
    completion is rolled back, and on the worker's path the message is
    refused like a handler that raised (temporary: retried after a backoff).
    The transaction stays doomed: a ``ROLLBACK TO`` a savepoint, opened
    before or after the failure, does not let it commit. Raised by the
    COMMIT of such a transaction too.
    """

    code = "statement_failed"


class StatementRefused(StatementFailed):
    """A statement given to ``Tx.execute`` that the store does not run.

    Codes: ``transaction_control`` (it would begin or end the transaction,
    which the store does), ``multiple_statements`` (one statement per call),
    ``reserved_savepoint`` (it names one of the store's own savepoints,
    ``queue_core_...``).
    Like any failed statement it dooms the transaction.
    """

    code = "statement_refused"


class StorageError(QueueError):
    """The database file cannot serve the request.

    Codes: ``no_database``, ``not_a_file``, ``not_a_queue_database``,
    ``schema_too_new``, ``cannot_open``, ``read_only``, ``disk_full``,
    ``database_busy``, ``storage_error``.
    """

    code = "storage_error"


class WrongPath(StorageError):
    """The path does not name a queue database (a usage error, exit 2)."""

    exit_status = 2


class NoThreads(QueueError):
    """This Python cannot start a thread, and the operation needs one.

    A heartbeat extends a lease from a thread of its own. Pyodide (CPython
    compiled to WebAssembly, as the site's Run buttons use it) starts none:
    run such work on a machine.
    """

    code = "no_threads"


class HandlerFailure(Exception):
    """Raised by a business handler to refuse a payload."""

    def __init__(self, code: str, detail: str = "") -> None:
        super().__init__(f"{code}: {detail}" if detail else code)
        self.code = code
        self.detail = detail


class PermanentFailure(HandlerFailure):
    """Retrying cannot help (e.g. an unknown category): go to dead at once."""


class TemporaryFailure(HandlerFailure):
    """A later attempt may succeed: return to ready after a backoff.

    ``retry_after`` (seconds, as an HTTP 429's Retry-After says) replaces the
    queue's backoff for this attempt, within the queue's cap; a fraction is
    rounded up to the next whole second.
    """

    def __init__(
        self, code: str, detail: str = "", *, retry_after: float | None = None
    ) -> None:
        super().__init__(code, detail)
        self.retry_after = check_retry_after(retry_after)


def check_retry_after(retry_after: object) -> float | None:
    """``retry_after`` if it is None or a finite number of seconds, 0 or more."""
    if retry_after is None:
        return None
    if isinstance(retry_after, bool) or not isinstance(retry_after, (int, float)):
        raise TypeError(
            "retry_after must be a number of seconds or None, "
            f"got {type(retry_after).__name__}"
        )
    if not 0 <= retry_after < float("inf"):  # NaN fails this too
        raise ValueError(
            "retry_after must be a finite number of seconds, 0 or more, "
            f"got {retry_after!r}"
        )
    return retry_after
