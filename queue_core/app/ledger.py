"""The reference application: paid goods summed by category, one effect per event.

This is *an application of* the queue, not part of it: the store never
mentions it. It owns its table (``effects``, the migration line ``LINE``:
numbered files per engine in ``ledger_migrations/``), its business rules and
its reads, and plugs into the protocol the way a reader's own application
would, as a handler that writes through the transaction it is given::

    store = Store("shop.sqlite3")
    ledger.install(store)                 # the effects table, up to its newest version
    store.complete(lease, Handler())      # effect + re-check + ACK, one transaction
    ledger.totals(store).total_cents     # the money; ledger.report adds the counts

The rules: ``category`` a string in {book, pen, bag}, ``amount_cents`` an
integer 1..9,999,999 (a bool is not an integer here). Anything else is a
*permanent* failure (``invalid_payload``): retrying cannot help, so the
message goes to the dead letters at once. Supporting a new category is a
deliberate change: ``Handler.with_categories({"toy"})``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from ..engines import MigrationLine, line_is_current, register_line
from ..errors import PermanentFailure, WrongPath
from ..receipts import Receipt
from ..store import Store
from ..transactions import Tx
from ..values import Message, StateCounts

DEFAULT_CATEGORIES: Final = frozenset({"book", "pen", "bag"})
MIN_AMOUNT_CENTS: Final = 1
MAX_AMOUNT_CENTS: Final = 9_999_999
INVALID_PAYLOAD: Final = "invalid_payload"
# The ledger's table as a migration line: numbered files per engine, the engine
# picks its own. Registered on import, so that opening a queue older than
# version 4 moves the ledger's effects along (its core_0004 steps).
LINE: Final = register_line(MigrationLine(
    "ledger",
    "queue_core.app",
    {"sqlite": "ledger_migrations/sqlite", "postgresql": "ledger_migrations/postgresql"},
    frozenset({"effects"}),
))


@dataclass(frozen=True)
class Effect:
    """The business result of one event: a row of the ``effects`` table."""

    category: str
    amount_cents: int


@dataclass(frozen=True)
class Totals:
    """The money in the ledger: how many effects, their sum, the sum by category."""

    count: int
    total_cents: int
    by_category: Mapping[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "count": self.count,
            "total_cents": self.total_cents,
            "by_category": dict(self.by_category),
        }


@dataclass(frozen=True)
class Report:
    """The queue's counts and the ledger's money, read together (for ``status``)."""

    queue: StateCounts
    totals: Totals

    @property
    def messages(self) -> Mapping[str, int]:
        counts: Mapping[str, int] = self.queue.to_dict()["messages"]
        return counts

    @property
    def effects_count(self) -> int:
        return self.totals.count

    @property
    def total_cents(self) -> int:
        return self.totals.total_cents

    @property
    def by_category(self) -> Mapping[str, int]:
        return self.totals.by_category

    def to_dict(self) -> dict[str, Any]:
        return {"messages": dict(self.messages), "effects": self.totals.to_dict()}


@dataclass(frozen=True)
class Handler:
    """The ledger's handler: validate the stored payload, write its effect row."""

    categories: frozenset[str] = DEFAULT_CATEGORIES

    @classmethod
    def with_categories(cls, extra: Iterable[str] = ()) -> Handler:
        """The default categories plus ``extra`` (the "new handler version")."""
        if isinstance(extra, str):
            raise TypeError(
                f"with_categories takes a collection of names, got the string {extra!r}"
            )
        return cls(categories=DEFAULT_CATEGORIES | frozenset(extra))

    def effect(self, payload: Mapping[str, Any]) -> Effect:
        """The business rule alone: the Effect of ``payload``, or PermanentFailure."""
        category = payload.get("category")
        # Check the type before the set lookup: a list is unhashable and would
        # raise TypeError instead of a clean permanent failure.
        if not isinstance(category, str):
            raise PermanentFailure(
                INVALID_PAYLOAD,
                f"category must be a string, got {_json_kind(category)}",
            )
        if category not in self.categories:
            known = ", ".join(sorted(self.categories))
            raise PermanentFailure(
                INVALID_PAYLOAD, f"unsupported category {category!r} (known: {known})"
            )
        amount = payload.get("amount_cents")
        # bool is a subclass of int in Python; true is not an amount of money.
        if isinstance(amount, bool) or not isinstance(amount, int):
            raise PermanentFailure(
                INVALID_PAYLOAD,
                f"amount_cents must be an integer, got {_json_kind(amount)}",
            )
        if not MIN_AMOUNT_CENTS <= amount <= MAX_AMOUNT_CENTS:
            raise PermanentFailure(
                INVALID_PAYLOAD,
                f"amount_cents must be {MIN_AMOUNT_CENTS}..{MAX_AMOUNT_CENTS}, "
                f"got {amount}",
            )
        return Effect(category=category, amount_cents=amount)

    def __call__(self, tx: Tx, message: Message) -> None:
        """Write the effect of ``message`` through ``tx`` (the completion's)."""
        effect = self.effect(message.payload_object)
        tx.execute(
            "INSERT INTO effects (event_id, category, amount_cents, queue) "
            "VALUES (?, ?, ?, ?)",
            (message.event_id, effect.category, effect.amount_cents, message.queue),
        )


# The reference handler as an object that ``queue-core work --handler`` can name
# (``queue_core.app.ledger:handler``), for a queue other than ``default``.
handler: Final = Handler()


def install(store: Store) -> None:
    """Move the ledger's migration line to its newest version in the queue's database.

    One transaction: the line's migrations above its recorded version, and
    the new version. A database at the newest version is only read (a
    snapshot never waits for the write lock), so ``queue-core work`` can
    start while another process holds it.
    """
    if store.read(current_tx):
        return

    def create(tx: Tx) -> None:
        if not _table_exists(tx, "messages"):
            # Only a forged header gets this far: write nothing into a file that is
            # not a queue.
            raise WrongPath(
                f"{store.where} has no messages table: not a queue database",
                code="not_a_queue_database",
            )
        install_tx(tx)

    store.write(create)  # waits out a held write lock, as every protocol operation does


def install_tx(tx: Tx) -> None:
    """``install`` inside the caller's transaction."""
    tx.engine.install(tx.conn, LINE)


def current_tx(view: Tx) -> bool:
    """Whether the ledger's line is at its newest version here, no newer (writes nothing)."""
    return line_is_current(view.engine, view.conn, LINE)


def totals(store: Store) -> Totals:
    """The money in the ledger, read in one snapshot (zero if never installed)."""
    return store.read(totals_tx)


def totals_tx(view: Tx, queue: str | None = None) -> Totals:
    """``totals`` inside the caller's transaction or snapshot (of one queue if named)."""
    if not installed_tx(view):
        return Totals(0, 0, {})
    # the queue is bound, never written into the statement's text
    where, params = ("", ()) if queue is None else (" WHERE queue = ?", (queue,))
    # CAST: on PostgreSQL the sum of a BIGINT is a NUMERIC (a Decimal in Python).
    count, total = view.execute(
        "SELECT count(*), CAST(coalesce(sum(amount_cents), 0) AS BIGINT) FROM effects"
        + where,
        params,
    ).fetchone()
    by_category = dict(
        view.execute(
            "SELECT category, CAST(sum(amount_cents) AS BIGINT) FROM effects"
            + where
            + " GROUP BY category ORDER BY category",
            params,
        ).fetchall()
    )
    return Totals(count, total, by_category)


def report(store: Store) -> Report:
    """Counts by state and the money, from one consistent snapshot."""
    return store.read(lambda view: Report(store.status_tx(view), totals_tx(view)))


def effects(store: Store) -> list[tuple[str, str, int]]:
    """All effects as ``(event_id, category, amount_cents)``, by event id."""
    return store.read(effects_tx)


def effects_tx(view: Tx) -> list[tuple[str, str, int]]:
    """``effects`` inside the caller's transaction or snapshot."""
    if not installed_tx(view):
        return []
    return [
        (str(event_id), str(category), int(cents))
        for event_id, category, cents in view.execute(
            "SELECT event_id, category, amount_cents FROM effects ORDER BY event_id"
        )
    ]


def has_effect(tx: Tx, receipt: Receipt) -> bool:
    """Whether the ledger holds the effect a receipt names (``ReceiptHandler``'s ``effect_exists``).

    The effect of a queue's message: its queue and event id. A receipt whose
    effect is not a queue message's (``effect_queue`` None) names nothing here.
    """
    if receipt.effect_queue is None:
        return False
    return (
        tx.execute(
            "SELECT 1 FROM effects WHERE queue = ? AND event_id = ?",
            (receipt.effect_queue, receipt.effect),
        ).fetchone()
        is not None
    )


def installed(store: Store) -> bool:
    """Whether the ledger's table is in the queue's database (``install`` made it).

    A table made before migration lines existed counts: ``install`` adopts it.
    """
    return store.read(installed_tx)


def installed_tx(view: Tx) -> bool:
    """``installed`` inside the caller's transaction or snapshot."""
    return _table_exists(view, "effects")


def _table_exists(view: Tx, name: str) -> bool:
    return view.ops.table_exists(view.conn, name)


def _json_kind(value: Any) -> str:
    if value is None:
        return "null or nothing"
    return {
        bool: "a boolean",
        int: "an integer",
        float: "a float",
        str: "a string",
        list: "an array",
        dict: "an object",
    }.get(type(value), type(value).__name__)
