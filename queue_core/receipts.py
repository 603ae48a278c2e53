"""Idempotency receipts: ``(scope, tenant, operation) -> payload``, written with the effect.

Fencing (the ``generation``) stops a stale *worker* from finishing a message
that was re-issued. It cannot see that two different messages, or two
deliveries of a broker that only promises at-least-once, carry the *same
operation*. A receipt can: it is a row keyed by ``(scope, tenant,
operation)`` that holds the operation's canonical payload and names the
effect it produced, and it is written in the **same transaction** as that
effect.

* The first time, ``record`` runs the caller's effect and writes the receipt.
* A repeat with the same payload runs nothing and returns the existing
  receipt (``reused=True``): the effect already exists.
* The same key with another payload raises ``OperationConflict`` and writes
  nothing.
* Scopes are separate namespaces, and so are tenants within a scope:
  ``("charges", "north", "op-1")``, ``("refunds", "north", "op-1")`` and
  ``("charges", "south", "op-1")`` are three operations. A
  ``ReceiptHandler``'s scope is its queue's name unless it is given one;
  code outside a queue names its scope itself.
* A failure anywhere in the caller's transaction rolls back receipt and effect
  together: there is never a receipt without its effect, or the reverse.

Every function takes the caller's open transaction: a store ``Tx`` (on
SQLite or PostgreSQL), or a plain ``sqlite3.Connection`` inside ``BEGIN``. In
a queue database the table is part of the versioned schema (migrations 2 and
10 of each engine); another SQLite database creates it once with
``create_table`` (which also moves a table from before scopes to the scope
``default``). Its statements are each engine's named statements
(``receipt_*``).

On PostgreSQL two transactions can run ``record`` for the same key at once
(there is no database write lock), so ``record`` first takes a transaction
lock on the key: the second waits for the first to end, then finds its
receipt, exactly as SQLite's single writer would have it.

``ReceiptHandler`` plugs receipts into the queue's completion hook: it wraps a
handler, so that ``Store.complete`` writes effect, receipt and ACK in one
transaction, and ACKs a repeated operation of its scope on the proof of its
receipt instead of writing a second effect. The store knows nothing of it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Union

from .clock import SystemClock
from .engines import adopt
from .envelope import MAX_PAYLOAD_BYTES, canonical_json
from .errors import InvalidReceipt, OperationConflict, PermanentFailure, ReceiptError
from .store import MessageHandler, Store
from .transactions import Tx
from .values import Message

MAX_KEY_CHARS = 200  # scope, tenant and operation: 1..200 characters each

Transaction = Union[Tx, sqlite3.Connection]
ReceiptKey = Callable[[Mapping[str, Any]], "tuple[Any, Any]"]
EffectCheck = Callable[[Tx, "Receipt"], bool]
# a receipt whose effect is gone
RECEIPT_WITHOUT_EFFECT: Final = "receipt_without_effect"


@dataclass(frozen=True)
class Receipt:
    """One stored receipt: its key, the operation's canonical payload, and its effect."""

    scope: str  # the namespace of the key: a queue's name, or one of the caller's
    tenant: str
    operation: str
    payload: str  # canonical JSON, as compared on a repeat
    # what the effect is called where it lives (for a queue message: its event_id)
    effect: str
    # the queue whose message wrote the effect; None for an effect outside a queue
    effect_queue: str | None = None


@dataclass(frozen=True)
class Recorded:
    """What ``record`` did: wrote a new receipt with its effect, or reused one."""

    receipt: Receipt
    reused: bool  # True: the effect already existed; this call wrote nothing

    @property
    def effect(self) -> str:
        return self.receipt.effect


# ---------------------------------------------------------------- writing


def create_table(tx: Transaction) -> None:
    """Create the receipts table in an SQLite database that is not a queue's.

    A queue's database has it already.
    """
    if isinstance(tx, Tx):
        raise ValueError(
            "create_table is for an SQLite database that is not a queue's; "
            "Store() creates the receipts table with the queue's schema"
        )
    view = _open_transaction(tx)
    view.ops.create_receipts(view.conn)


def record(
    tx: Transaction,
    tenant: str,
    operation: str,
    payload: Any,
    write_effect: Callable[[], str],
    *,
    scope: str | None = None,
) -> Recorded:
    """Inside the caller's transaction: the operation's effect, at most once in ``scope``.

    ``scope`` names the set of operations the key belongs to (required: a
    ``ReceiptHandler`` passes its queue's name; give the same name to share
    its receipts on purpose). ``write_effect`` writes the effect in the same
    transaction and returns its reference (a row id, an event id). It runs
    only the first time. A repeat with the same canonical payload returns the
    stored receipt with ``reused=True``; another payload raises
    ``OperationConflict``. Nothing is committed here: the caller's COMMIT
    (or ROLLBACK) decides for both.

    :raises InvalidReceipt: ``invalid_receipt_scope`` (no scope, or not a
        string of 1..200 characters), ``invalid_receipt_key``,
        ``invalid_receipt_payload``.
    """
    return _record(tx, _check_scope(scope), tenant, operation, payload, write_effect, None)


def _record(
    tx: Transaction,
    scope: str,
    tenant: str,
    operation: str,
    payload: Any,
    write_effect: Callable[[], str],
    effect_queue: str | None,
) -> Recorded:
    view = _open_transaction(tx)
    _check_key(tenant, operation)
    canonical = _canonical(payload)
    # where no database write lock does it, one key's writers take turns
    view.ops.receipt_turn(view.conn, scope, tenant, operation)
    prior = _lookup(view, scope, tenant, operation)
    if prior is not None:
        if prior.payload != canonical:
            raise OperationConflict(
                f"{scope}: {tenant}/{operation} was already recorded with payload "
                f"{prior.payload}; a different operation needs a new operation key"
            )
        return Recorded(prior, reused=True)
    effect = write_effect()
    if not isinstance(effect, str) or not effect:
        raise TypeError(
            "write_effect must return the effect's reference as a non-empty str, "
            f"got {effect!r}"
        )
    receipt = Receipt(scope, tenant, operation, canonical, effect, effect_queue)
    view.ops.add_receipt(
        view.conn, (scope, tenant, operation, canonical, effect, effect_queue)
    )
    return Recorded(receipt, reused=False)


# ---------------------------------------------------------------- reading


def lookup(
    conn: Transaction, tenant: str, operation: str, *, scope: str | None = None
) -> Receipt | None:
    """The receipt of (``scope``, ``tenant``, ``operation``), or None (also if no table exists yet)."""
    scope = _check_scope(scope)
    view = _view(conn)
    if not _table_exists(view):
        return None
    return _lookup(view, scope, tenant, operation)


def all_receipts(conn: Transaction) -> list[Receipt]:
    """Every stored receipt, by scope, tenant and operation (empty if no table exists yet)."""
    view = _view(conn)
    if not _table_exists(view):
        return []
    return [Receipt(*row) for row in view.ops.receipts(view.conn)]


def stored(store: Store) -> list[Receipt]:
    """Every receipt in a queue database (every scope), read in one consistent snapshot."""
    return store.read(all_receipts)


# ------------------------------------------------------- with the queue


def key_from_payload(payload: Mapping[str, Any]) -> tuple[Any, Any]:
    """The receipt key named by the payload's ``tenant`` and ``operation`` fields.

    Only reads them; ``record`` validates the key (``invalid_receipt_key``).
    """
    return payload.get("tenant"), payload.get("operation")


@dataclass(frozen=True)
class ReceiptHandler:
    """A handler whose effects are recorded under receipts: wraps any ``MessageHandler``.

    Pass it to ``Store.complete`` or ``work`` in place of the handler. For
    each message, ``key(payload)`` names the operation within ``scope`` (the
    queue's name unless given: two queues' operations never meet, unless
    their handlers are given one scope on purpose). The first message of an
    operation gets effect + receipt + ACK in one transaction; a later message
    with the same operation and payload in the scope is ACKed on the proof of
    the receipt, without a second effect; one with another payload, or an
    unusable key, becomes a dead letter (``operation_conflict``,
    ``invalid_receipt_key``). The receipt names the effect by the queue and
    the event id of the message that wrote it. With ``effect_exists``, a
    reused receipt whose effect is gone (raw SQL deleted it) is refused as
    ``receipt_without_effect`` instead of ACKed: it is called with the
    transaction and the ``Receipt``, whose ``effect_queue`` and ``effect``
    name the effect.
    """

    handler: MessageHandler
    key: ReceiptKey = key_from_payload
    effect_exists: EffectCheck | None = None
    scope: str | None = None  # None: the queue's name

    def __post_init__(self) -> None:
        if self.scope is not None:
            _check_scope(self.scope)

    def __call__(self, tx: Tx, message: Message) -> None:
        payload = message.payload_object
        tenant, operation = self.key(payload)
        scope = tx.queue if self.scope is None else self.scope

        def write_effect() -> str:
            self.handler(tx, message)
            return message.event_id

        try:
            recorded = _record(tx, scope, tenant, operation, payload, write_effect, tx.queue)
        # retrying cannot change the key or the stored receipt
        except ReceiptError as refusal:
            raise PermanentFailure(refusal.code, refusal.message) from None
        if (
            recorded.reused
            and self.effect_exists is not None
            and not self.effect_exists(tx, recorded.receipt)
        ):
            where = recorded.receipt.effect_queue
            raise PermanentFailure(
                RECEIPT_WITHOUT_EFFECT,
                f"the receipt of {scope}: {tenant}/{operation} names "
                f"{recorded.effect}"
                + (f" of queue {where}" if where is not None else "")
                + ", whose effect does not exist",
            )


# -------------------------------------------------------------- helpers


def _lookup(view: Tx, scope: str, tenant: str, operation: str) -> Receipt | None:
    row = view.ops.receipt(view.conn, scope, tenant, operation)
    return None if row is None else Receipt(*row)


def _table_exists(view: Tx) -> bool:
    return view.ops.table_exists(view.conn, "receipts")  # readers must not create it


def _view(tx: Transaction) -> Tx:
    """The caller's transaction as a ``Tx``: a plain sqlite3 connection gets one."""
    if isinstance(tx, Tx):
        return tx
    # your own database's connection: the engine of its kind, or TypeError
    return Tx(tx, adopt(tx), SystemClock())


def _open_transaction(tx: Transaction) -> Tx:
    view = _view(tx)
    if not view.conn.in_transaction:
        # Outside a transaction each statement would commit alone, and a
        # receipt could outlive a failed effect (or the reverse).
        raise ValueError(
            "receipts are written inside the caller's transaction: "
            "BEGIN (IMMEDIATE) first, or use store.transaction()"
        )
    return view


def _check_scope(scope: object) -> str:
    if scope is None:
        raise InvalidReceipt(
            "a receipt needs scope=: the name of the set of operations its key "
            "belongs to (a ReceiptHandler uses its queue's name; give that name "
            "to share its receipts)",
            code="invalid_receipt_scope",
        )
    if not isinstance(scope, str) or not 1 <= len(scope) <= MAX_KEY_CHARS:
        raise InvalidReceipt(
            f"scope must be a string of 1..{MAX_KEY_CHARS} characters, "
            f"got {scope!r:.60}",
            code="invalid_receipt_scope",
        )
    try:
        scope.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidReceipt(
            "scope contains a lone surrogate", code="invalid_receipt_scope"
        ) from None
    return scope


def _check_key(tenant: Any, operation: Any) -> None:
    for name, value in (("tenant", tenant), ("operation", operation)):
        if not isinstance(value, str) or not 1 <= len(value) <= MAX_KEY_CHARS:
            raise InvalidReceipt(
                f"{name} must be a string of 1..{MAX_KEY_CHARS} characters, "
                f"got {value!r:.60}",
                code="invalid_receipt_key",
            )
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidReceipt(
                f"{name} contains a lone surrogate", code="invalid_receipt_key"
            ) from None


def _canonical(payload: Any) -> str:
    try:
        text = canonical_json(payload)
        size = len(text.encode("utf-8"))
    # not JSON, NaN/inf, a lone surrogate, a cycle
    except (TypeError, ValueError, RecursionError) as exc:
        raise InvalidReceipt(
            f"the payload has no canonical JSON form: {exc}",
            code="invalid_receipt_payload",
        ) from None
    if size > MAX_PAYLOAD_BYTES:
        raise InvalidReceipt(
            f"the canonical payload has {size} bytes; the limit is {MAX_PAYLOAD_BYTES}",
            code="invalid_receipt_payload",
        )
    return text
