"""A receipt belongs to a scope: two queues' operations never meet unless told to.

Before schema version 10 a receipt was keyed by ``(tenant, operation)`` alone
and named its effect by a bare event id, so a charge in queue ``charges`` and
a refund in queue ``refunds`` with the same tenant, operation and payload
shared one receipt: the refund ended ``done`` on the charge's effect, and no
refund was written. A receipt recorded by code outside any queue ACKed a
queue message the same way. Now the key is ``(scope, tenant, operation)``: a
``ReceiptHandler``'s scope is its queue's name unless it is given one, code
outside a queue names its own, and a receipt names its effect by queue and
event id. Runs on both engines (tests/conformance/conftest.py).
"""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from queue_core import (
    InvalidReceipt,
    Message,
    ModelClock,
    Outcome,
    ReceiptHandler,
    Store,
    Tx,
    receipts,
)
from queue_core.engines import postgres as postgres_engine
from queue_core.engines import sqlite as sqlite_engine

IDS = r"[a-z]-[0-9]+"
PAYLOAD = {"tenant": "acme", "operation": "op-1", "cents": 500}


def writes_into(table: str) -> Any:
    """A handler that writes its message's effect into ``table``."""

    def handler(tx: Tx, message: Message) -> None:
        tx.execute(
            f"INSERT INTO {table} (event_id, cents) VALUES (?, ?)",
            (message.event_id, message.payload_object["cents"]),
        )

    return handler


def rows_of(store: Store, table: str) -> list[tuple[Any, ...]]:
    return store.read(lambda view: [tuple(r) for r in view.execute(
        f"SELECT event_id, cents FROM {table} ORDER BY event_id")])


@pytest.fixture
def two_queues(store: Store, clock: ModelClock) -> tuple[Store, Store]:
    store.create_queue("charges", id_pattern=IDS)
    store.create_queue("refunds", id_pattern=IDS)
    with store.transaction() as tx:
        tx.execute("CREATE TABLE charge_effects (event_id TEXT PRIMARY KEY, cents INTEGER)")
        tx.execute("CREATE TABLE refund_effects (event_id TEXT PRIMARY KEY, cents INTEGER)")
    return (Store(store.target, clock=clock, queue="charges"),
            Store(store.target, clock=clock, queue="refunds"))


def test_the_same_operation_in_two_queues_makes_two_effects(two_queues: tuple[Store, Store]) -> None:
    charges, refunds = two_queues
    charges.send("c-1", PAYLOAD)
    refunds.send("r-1", PAYLOAD)
    charged = charges.complete(charges.claim(), ReceiptHandler(writes_into("charge_effects")))
    refunded = refunds.complete(refunds.claim(), ReceiptHandler(writes_into("refund_effects")))
    assert (charged.outcome, refunded.outcome) == (Outcome.DONE, Outcome.DONE)
    assert rows_of(refunds, "refund_effects") == [("r-1", 500)], "the refund was ACKed on the charge"
    assert rows_of(charges, "charge_effects") == [("c-1", 500)]
    assert [(r.scope, r.effect_queue, r.effect) for r in receipts.stored(charges)] == [
        ("charges", "charges", "c-1"), ("refunds", "refunds", "r-1")]


def test_one_scope_given_to_both_handlers_joins_them_on_purpose(two_queues: tuple[Store, Store]) -> None:
    # The negative control of the test above: the handlers share a scope, as every
    # receipt did before version 10, and the refund is ACKed on the charge's effect.
    charges, refunds = two_queues
    charges.send("c-1", PAYLOAD)
    refunds.send("r-1", PAYLOAD)
    shared = "payments"
    charges.complete(charges.claim(), ReceiptHandler(writes_into("charge_effects"), scope=shared))
    refunded = refunds.complete(refunds.claim(),
                                ReceiptHandler(writes_into("refund_effects"), scope=shared))
    assert refunded.outcome is Outcome.DONE
    assert rows_of(refunds, "refund_effects") == []  # no effect of its own: the receipt's
    [receipt] = receipts.stored(charges)
    assert (receipt.scope, receipt.effect_queue, receipt.effect) == (shared, "charges", "c-1")


def test_a_receipt_recorded_outside_a_queue_does_not_ack_a_queue_message(
        two_queues: tuple[Store, Store]) -> None:
    charges, _ = two_queues
    with charges.transaction() as tx:  # an API request charged directly
        receipts.record(tx, "acme", "op-1", PAYLOAD, lambda: "api-request-42", scope="api")
    charges.send("c-1", PAYLOAD)
    charges.complete(charges.claim(), ReceiptHandler(writes_into("charge_effects")))
    assert rows_of(charges, "charge_effects") == [("c-1", 500)]
    assert {(r.scope, r.effect) for r in receipts.stored(charges)} == {
        ("api", "api-request-42"), ("charges", "c-1")}


def test_code_outside_a_queue_may_name_the_queue_as_its_scope(two_queues: tuple[Store, Store]) -> None:
    # Deliberate sharing: the request's charge and the queued one are one operation.
    charges, _ = two_queues
    with charges.transaction() as tx:
        recorded = receipts.record(tx, "acme", "op-1", PAYLOAD, lambda: "api-request-42",
                                   scope="charges")
    assert recorded.receipt.effect_queue is None  # not a queue message's effect
    charges.send("c-1", PAYLOAD)
    assert charges.complete(charges.claim(),
                            ReceiptHandler(writes_into("charge_effects"))).outcome is Outcome.DONE
    assert rows_of(charges, "charge_effects") == []


def test_effect_exists_is_asked_with_the_receipt_and_its_queue(two_queues: tuple[Store, Store]) -> None:
    charges, refunds = two_queues
    charges.send("c-1", PAYLOAD)
    refunds.send("r-1", PAYLOAD)
    asked: list[tuple[str, str | None, str]] = []

    def exists(tx: Tx, receipt: receipts.Receipt) -> bool:
        asked.append((receipt.scope, receipt.effect_queue, receipt.effect))
        return receipt.effect_queue == "charges" and tx.execute(
            "SELECT 1 FROM charge_effects WHERE event_id = ?", (receipt.effect,)).fetchone() is not None

    shared = "payments"
    charges.complete(charges.claim(), ReceiptHandler(writes_into("charge_effects"), scope=shared,
                                                     effect_exists=exists))
    assert refunds.complete(refunds.claim(), ReceiptHandler(
        writes_into("refund_effects"), scope=shared, effect_exists=exists)).outcome is Outcome.DONE
    assert asked == [(shared, "charges", "c-1")]


@pytest.mark.one_engine  # refused before any statement: nothing of the engine to prove
@pytest.mark.parametrize("scope", [None, "", "x" * 201, 7, "\ud800"],
                         ids=["missing", "empty", "long", "int", "lone-surrogate"])
def test_record_needs_a_usable_scope(store: Store, scope: Any) -> None:
    with pytest.raises(InvalidReceipt) as refused:
        with store.transaction() as tx:
            receipts.record(tx, "acme", "op-1", PAYLOAD, lambda: "never", scope=scope)
    assert refused.value.code == "invalid_receipt_scope"
    assert receipts.stored(store) == []
    with pytest.raises(InvalidReceipt) as refused:
        ReceiptHandler(lambda tx, message: None, scope=scope or "")
    assert refused.value.code == "invalid_receipt_scope"


# ------------------------------------------------------- receipts from before version 10

def version_9(engine: str, target: Any) -> None:
    """A database as queue_core at schema version 9 left it, with two queues and three receipts."""
    rows = (
        "INSERT INTO queues (name, id_pattern, max_attempts, lease_seconds, max_payload_bytes,"
        " backoff_base_seconds, backoff_max_seconds, backoff_jitter)"
        " VALUES ('charges', '[a-z]-[0-9]+', 3, 30, 10000, 1, 3600, 0.0)",
        "INSERT INTO messages (queue, event_id, payload, state, attempts, generation, available_at,"
        " enqueued_at, done_at) VALUES"
        " ('charges', 'c-1', '{}', 'done', 1, 1, 1000, 1000, 1000),"
        " ('default', 'E0001', '{}', 'done', 1, 1, 1000, 1000, 1000),"
        " ('charges', 'E0002', '{}', 'done', 1, 1, 1000, 1000, 1000),"
        " ('default', 'E0002', '{}', 'done', 1, 1, 1000, 1000, 1000)",
        # a charge's, the default queue's, an id two queues hold, an effect outside any queue
        "INSERT INTO receipts (tenant, operation, payload, effect) VALUES"
        " ('acme', 'op-1', '{\"operation\":\"op-1\",\"tenant\":\"acme\"}', 'c-1'),"
        " ('acme', 'op-2', '{}', 'E0001'),"
        " ('acme', 'op-3', '{}', 'E0002'), ('acme', 'op-4', '{}', 'ledger/7')",
    )
    if engine == "sqlite":
        with closing(sqlite3.connect(target, isolation_level=None)) as conn:
            conn.execute("BEGIN IMMEDIATE")
            for version in range(1, 10):
                for statement in sqlite_engine.sql_statements(sqlite_engine.MIGRATIONS[version]):
                    conn.execute(statement)
            for statement in rows:
                conn.execute(statement)
            conn.execute(f"PRAGMA application_id = {sqlite_engine.APPLICATION_ID}")
            conn.execute("PRAGMA user_version = 9")
            conn.execute("COMMIT")
        return
    import psycopg

    with psycopg.connect(target, autocommit=True) as conn:
        conn.execute("BEGIN")
        for version in range(2, 10):
            conn.execute(postgres_engine.MIGRATIONS[version])
        for statement in rows:
            conn.execute(statement)
        conn.execute("INSERT INTO queue_core_schema (application_id, version) VALUES (%s, 9)",
                     (sqlite_engine.APPLICATION_ID,))
        conn.execute("COMMIT")


def test_a_version_9_database_gives_each_receipt_the_scope_of_its_effects_queue(
        request: pytest.FixtureRequest, engine: str, tmp_path: Path, clock: ModelClock) -> None:
    assert sqlite_engine.SCHEMA_VERSION == postgres_engine.SCHEMA_VERSION >= 10
    target = tmp_path / "v9.sqlite3" if engine == "sqlite" else request.getfixturevalue("postgres_url")
    version_9(engine, target)
    with Store(target, clock=clock, create=False) as store:
        scoped = [(r.scope, r.tenant, r.operation, r.effect_queue, r.effect)
                  for r in receipts.stored(store)]
        assert scoped == [
            ("charges", "acme", "op-1", "charges", "c-1"),
            ("default", "acme", "op-2", "default", "E0001"),
            ("default", "acme", "op-3", None, "E0002"),  # two queues hold E0002: none is sure
            ("default", "acme", "op-4", None, "ledger/7"),
        ]
        # a repeat of op-1 in the charges queue is still recognised
        charges = Store(target, clock=clock, queue="charges")
        charges.send("c-2", {"tenant": "acme", "operation": "op-1"})
        wrote: list[str] = []
        done = charges.complete(charges.claim(),
                                ReceiptHandler(lambda tx, m: wrote.append(m.event_id)))
        assert (done.outcome, wrote) == (Outcome.DONE, [])
        charges.close()


@pytest.mark.one_engine  # a plain SQLite connection: the database that is not a queue's
def test_create_table_moves_a_table_from_before_scopes_to_the_default_scope(tmp_path: Path) -> None:
    db = tmp_path / "app.sqlite3"
    with closing(sqlite3.connect(db, isolation_level=None)) as conn:
        conn.execute("CREATE TABLE receipts (tenant TEXT NOT NULL, operation TEXT NOT NULL,"
                     " payload TEXT NOT NULL, effect TEXT NOT NULL,"
                     " PRIMARY KEY (tenant, operation)) STRICT")
        conn.execute("INSERT INTO receipts VALUES ('acme', 'op-1', ?, 'ledger/1')",
                     (json.dumps({"cents": 500}, separators=(",", ":")),))
        conn.execute("BEGIN IMMEDIATE")
        receipts.create_table(conn)
        again = receipts.record(conn, "acme", "op-1", {"cents": 500}, lambda: "never", scope="default")
        conn.execute("COMMIT")
        assert again.reused and again.effect == "ledger/1"
        assert receipts.all_receipts(conn) == [
            receipts.Receipt("default", "acme", "op-1", '{"cents":500}', "ledger/1", None)]
        names = [row[1] for row in conn.execute("PRAGMA table_info(receipts)")]
        assert names == ["tenant", "operation", "payload", "effect", "scope", "effect_queue"]
