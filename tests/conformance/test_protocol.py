"""The protocol on a real SQLite file: lease, fencing, effect + ACK, retry, dead, redrive."""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from queue_core.engines.sqlite import OPERATIONS as SQLITE

from queue_core import (
    DEFAULT_CATEGORIES,
    Effect,
    Handler,
    Lease,
    LeaseLost,
    Message,
    ModelClock,
    NotDead,
    Outcome,
    PermanentFailure,
    Store,
    TemporaryFailure,
    Tx,
    UnknownEvent,
    ledger,
)
from queue_core.store import HANDLER_ERROR, LEASE_EXPIRED, MAX_LEASE_SECONDS
from queue_core.testing.faults import FaultPlan

from ..support import batch, line, money


def temporary(code: str = "downstream_unavailable"):
    def handler(tx: Tx, message: Message) -> None:
        raise TemporaryFailure(code)
    return handler


# ------------------------------------------------------------------ claim

def test_claim_leases_the_first_available_message(store: Store, clock: ModelClock) -> None:
    store.enqueue(batch(line("E0002"), line("E0001")))
    lease = store.claim(lease_seconds=5)
    assert lease is not None
    assert (lease.event_id, lease.generation, lease.attempt, lease.lease_until) == ("E0001", 1, 1, 1005)
    row = store.message("E0001")
    assert (row.state, row.attempts, row.generation, row.lease_until) == ("leased", 1, 1, 1005)


def test_lease_is_immutable(store: Store) -> None:
    store.enqueue(line("E0001"))
    lease = store.claim()
    with pytest.raises(AttributeError):
        lease.generation = 99  # type: ignore[misc]


def test_claim_returns_none_when_nothing_is_available(store: Store, clock: ModelClock) -> None:
    assert store.claim() is None
    store.enqueue(line("E0001"))
    lease = store.claim(lease_seconds=2)
    assert lease is not None
    assert store.claim(lease_seconds=2) is None  # leased and not expired


def test_claim_order_is_available_at_then_event_id_not_strict_fifo(
    store: Store, clock: ModelClock, handler: Handler
) -> None:
    store.enqueue(batch(line("E0001"), line("E0002")))
    first = store.claim()
    assert store.complete(first, temporary()).available_at == 1001
    clock.set(1001)
    store.enqueue(line("E0000"))  # enqueued later, at 1001
    # E0001 (available_at 1001) and E0002 (1000): E0002 first, then by event id.
    order = []
    while (lease := store.claim()) is not None:
        order.append(lease.event_id)
        store.complete(lease, handler)
    assert order == ["E0002", "E0000", "E0001"]


def test_claim_reads_through_the_partial_index(store: Store, db: Path) -> None:
    store.enqueue(line("E0001"))
    conn = sqlite3.connect(db)
    try:
        # the claim's own statement, in its queue
        plan = " ".join(row[3] for row in conn.execute(
            "EXPLAIN QUERY PLAN " + SQLITE.sql("claim_messages"),
            {"queue": "default", "now": 5, "until": 35, "lease_seconds": 30, "wanted": 1, "max_attempts": 3,
             "token": 1, "lease_expired": "lease_expired"}))
    finally:
        conn.close()
    assert "messages_claimable" in plan
    assert "TEMP B-TREE" not in plan  # the index gives the order, no sort


def test_claim_rejects_a_bad_lease_length(store: Store) -> None:
    store.enqueue(line("E0001"))
    for bad in (0, -1, MAX_LEASE_SECONDS + 1):
        with pytest.raises(ValueError, match="lease_seconds must be 1.."):
            store.claim(bad)
    # A value of the wrong type is a TypeError (it was a ValueError before issue 8).
    for wrong in (True, 1.5, "2"):  # None: the queue's own lease
        with pytest.raises(TypeError, match="lease_seconds must be an integer"):
            store.claim(wrong)  # type: ignore[arg-type]
    assert store.message("E0001").state == "ready"  # nothing was claimed


# ------------------------------------------------------------ lease expiry

def test_lease_is_valid_while_now_is_before_lease_until(store: Store, clock: ModelClock, handler: Handler) -> None:
    store.enqueue(line("E0001"))
    lease = store.claim(lease_seconds=2)
    clock.set(1001)  # lease_until - 1: still ours, nobody else can claim
    assert store.claim(lease_seconds=2) is None
    assert store.complete(lease, handler).outcome is Outcome.DONE


def test_lease_expires_exactly_at_lease_until(store: Store, clock: ModelClock, handler: Handler) -> None:
    store.enqueue(line("E0001"))
    lease = store.claim(lease_seconds=2)
    clock.set(1002)
    with pytest.raises(LeaseLost, match="ended at 1002"):
        store.complete(lease, handler)
    assert money(store) == (0, 0)
    again = store.claim(lease_seconds=2)
    assert (again.event_id, again.generation, again.attempt) == ("E0001", 2, 2)


def test_status_shows_stored_values_without_applying_expiry(store: Store, clock: ModelClock) -> None:
    store.enqueue(line("E0001"))
    store.claim(lease_seconds=2)
    clock.set(5000)
    assert store.status().messages == {"ready": 0, "leased": 1, "done": 0, "dead": 0}
    assert store.message("E0001").lease_until == 1002


# ---------------------------------------------------------------- fencing

def test_old_generation_cannot_complete(store: Store, clock: ModelClock, handler: Handler) -> None:
    store.enqueue(line("E0001", amount_cents=700))
    slow = store.claim(lease_seconds=2)
    clock.set(1002)
    fresh = store.claim(lease_seconds=2)
    assert fresh.generation == slow.generation + 1
    # The slow worker wakes up *inside* the new lease: time alone would let it through.
    with pytest.raises(LeaseLost, match="generation 1 is stale"):
        store.complete(slow, handler)
    with pytest.raises(LeaseLost):
        store.fail(slow, "whatever")
    assert store.complete(fresh, handler).outcome is Outcome.DONE
    assert ledger.effects(store) == [("E0001", "book", 700)]


def test_a_done_message_cannot_be_completed_twice(store: Store, handler: Handler) -> None:
    store.enqueue(line("E0001"))
    lease = store.claim()
    store.complete(lease, handler)
    with pytest.raises(LeaseLost, match="done, not leased"):
        store.complete(lease, handler)
    assert money(store) == (1, 100)


def test_a_lease_for_an_unknown_event_is_refused(store: Store, handler: Handler) -> None:
    with pytest.raises(LeaseLost, match="not in the queue"):
        store.complete(Lease("E0999", 1, 1, 2000), handler)


# ------------------------------------------------------- effect + ACK in one

def test_complete_writes_effect_and_ack_together(store: Store, handler: Handler) -> None:
    store.enqueue(line("E0001", "pen", 2000))
    lease = store.claim()
    completion = store.complete(lease, handler)
    assert (completion.outcome, completion.error) == (Outcome.DONE, None)
    row = store.message("E0001")
    assert (row.state, row.lease_until) == ("done", None)
    assert ledger.effects(store) == [("E0001", "pen", 2000)]


def test_the_effect_comes_from_the_stored_payload(store: Store) -> None:
    store.enqueue(line("E0001", "book", 1234))
    seen: list[Mapping[str, Any]] = []

    def spy(tx: Tx, message: Message) -> None:
        seen.append(message.payload_object)
        Handler()(tx, message)

    store.complete(store.claim(), spy)
    assert seen == [{"category": "book", "amount_cents": 1234}]
    assert ledger.effects(store) == [("E0001", "book", 1234)]


def test_a_failure_during_apply_rolls_back_the_effect(store: Store, db: Path, clock: ModelClock,
                                                       handler: Handler) -> None:
    store.enqueue(line("E0001"))
    lease = store.claim()
    # The fault point after the handler's writes was "complete.after_insert" before issue 8.
    plan = FaultPlan().arm("complete.after_effect", lambda: (_ for _ in ()).throw(RuntimeError("boom after INSERT")))
    with pytest.raises(RuntimeError, match="boom after INSERT"):
        Store(db, clock=clock, probe=plan).complete(lease, handler)
    assert money(store) == (0, 0)
    row = store.message("E0001")
    assert (row.state, row.generation) == ("leased", 1)  # the claim stays committed
    assert store.complete(lease, handler).outcome is Outcome.DONE
    assert money(store) == (1, 100)


def test_a_handler_bug_rolls_back_and_is_recorded_as_a_temporary_handler_error(store: Store) -> None:
    # Before issue 8 the KeyError escaped complete() and the lease was left to expire;
    # now the store rolls back the handler's writes and records handler_error (retry after backoff).
    store.enqueue(line("E0001"))
    lease = store.claim()

    def buggy(tx: Tx, message: Message) -> None:
        Handler()(tx, message)  # the effect is written...
        raise KeyError("bug")  # ...and then the handler fails

    completion = store.complete(lease, buggy)
    assert (completion.outcome, completion.error, completion.available_at) == (Outcome.RETRY, HANDLER_ERROR, 1001)
    assert completion.detail == "KeyError: 'bug'"
    row = store.message("E0001")
    assert (row.state, row.lease_until, row.last_error, row.last_detail) == ("ready", None, HANDLER_ERROR,
                                                                             "KeyError: 'bug'")
    assert money(store) == (0, 0)


def test_the_lease_is_checked_again_after_the_insert(store: Store, clock: ModelClock) -> None:
    store.enqueue(line("E0001"))
    lease = store.claim(lease_seconds=2)

    def slow(tx: Tx, message: Message) -> None:
        Handler()(tx, message)
        clock.set(1002)  # the work took until the lease ended

    with pytest.raises(LeaseLost, match="ended at 1002"):
        store.complete(lease, slow)
    assert money(store) == (0, 0)
    assert store.message("E0001").state == "leased"


def test_caller_writes_join_the_completion_transaction(store: Store, db: Path, handler: Handler) -> None:
    conn = sqlite3.connect(db)
    try:
        conn.execute("CREATE TABLE audit (event_id TEXT)")
        conn.commit()
    finally:
        conn.close()
    store.enqueue(line("E0001"))
    lease = store.claim()
    # The explicit form: fenced check, the caller's own writes, then complete_tx (re-check + ACK).
    with pytest.raises(RuntimeError):
        with store.transaction() as tx:
            message = store.leased_tx(tx, lease)
            handler(tx, message)
            tx.execute("INSERT INTO audit VALUES (?)", (lease.event_id,))
            store.complete_tx(tx, lease)
            raise RuntimeError("the caller changes its mind")
    assert money(store) == (0, 0)
    assert store.message("E0001").state == "leased"
    with store.transaction() as tx:
        message = store.leased_tx(tx, lease)
        handler(tx, message)
        tx.execute("INSERT INTO audit VALUES (?)", (lease.event_id,))
        assert store.complete_tx(tx, lease).outcome is Outcome.DONE
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("SELECT event_id FROM audit").fetchall() == [("E0001",)]
    finally:
        conn.close()
    assert money(store) == (1, 100)


# ---------------------------------------------------- handler and dead letters

@pytest.mark.parametrize("payload_extra, reason", [
    ({"category": "toy"}, "unsupported category"),
    ({"category": ["book"]}, "category must be a string"),
    ({"category": {"name": "book"}}, "category must be a string"),
    ({"category": 7}, "category must be a string"),
    ({"category": True}, "category must be a string"),
    ({"category": None}, "category must be a string"),
    ({"amount_cents": True}, "amount_cents must be an integer"),
    ({"amount_cents": 100.0}, "amount_cents must be an integer"),
    ({"amount_cents": "100"}, "amount_cents must be an integer"),
    ({"amount_cents": 0}, "1..9999999"),
    ({"amount_cents": 10_000_000}, "1..9999999"),
    ({"amount_cents": -5}, "1..9999999"),
])
def test_handler_refuses_bad_business_fields_cleanly(payload_extra: dict, reason: str) -> None:
    payload = {"category": "book", "amount_cents": 100, **payload_extra}
    with pytest.raises(PermanentFailure, match=reason) as info:
        Handler().effect(payload)
    assert info.value.code == "invalid_payload"


@pytest.mark.parametrize("amount", [1, 9_999_999])
def test_handler_accepts_amount_boundaries(amount: int) -> None:
    assert Handler().effect({"category": "bag", "amount_cents": amount}) == Effect("bag", amount)


def test_handler_categories_are_extendable() -> None:
    assert DEFAULT_CATEGORIES == {"book", "pen", "bag"}
    assert Handler.with_categories({"toy"}).effect({"category": "toy", "amount_cents": 3}) == Effect("toy", 3)


def test_permanent_failure_goes_dead_at_once_keeping_the_event(store: Store, handler: Handler) -> None:
    store.enqueue(line("E0004", "toy", 3000))
    completion = store.complete(store.claim(), handler)
    assert (completion.outcome, completion.error) == (Outcome.DEAD, "invalid_payload")
    assert completion.detail == "unsupported category 'toy' (known: bag, book, pen)"
    row = store.message("E0004")
    assert (row.state, row.attempts, row.last_error, row.lease_until) == ("dead", 1, "invalid_payload", None)
    assert row.last_detail == completion.detail
    assert row.payload_object == {"category": "toy", "amount_cents": 3000}
    assert [m.event_id for m in store.dead_letters()] == ["E0004"]
    assert money(store) == (0, 0)


# ------------------------------------------------------ retry and the budget

def test_backoff_is_one_then_two_seconds_then_dead(store: Store, clock: ModelClock) -> None:
    store.enqueue(line("E0002", "pen", 2000))
    first = store.complete(store.claim(), temporary("timeout"))
    assert (first.outcome, first.available_at) == (Outcome.RETRY, 1001)
    assert store.claim() is None  # not due before 1001
    clock.set(1001)
    second = store.complete(store.claim(), temporary("timeout"))
    assert (second.outcome, second.available_at) == (Outcome.RETRY, 1003)
    clock.set(1002)
    assert store.claim() is None
    clock.set(1003)
    third = store.complete(store.claim(), temporary("timeout"))
    assert (third.outcome, third.error) == (Outcome.DEAD, "timeout")
    row = store.message("E0002")
    assert (row.state, row.attempts, row.generation, row.last_error) == ("dead", 3, 3, "timeout")


def test_retry_row_is_ready_with_a_future_available_at(store: Store) -> None:
    store.enqueue(line("E0001"))
    store.fail(store.claim(), "flaky")
    row = store.message("E0001")
    assert (row.state, row.available_at, row.lease_until, row.last_error) == ("ready", 1001, None, "flaky")


def test_three_silent_deaths_spend_the_budget(store: Store, clock: ModelClock) -> None:
    store.enqueue(batch(line("E0001"), line("E0002")))
    for attempt in (1, 2, 3):
        lease = store.claim(lease_seconds=10)
        assert (lease.event_id, lease.attempt) == ("E0001", attempt)
        clock.advance(10)  # the worker died silently; its lease runs out
    # The fourth claim moves E0001 to dead and hands out the next message instead.
    lease = store.claim(lease_seconds=10)
    assert lease.event_id == "E0002"
    row = store.message("E0001")
    assert (row.state, row.attempts, row.last_error, row.lease_until) == ("dead", 3, LEASE_EXPIRED, None)
    assert row.last_detail == "the lease of claim 3 of 3 ended at 1030 with no completion"


def test_failures_and_silent_deaths_share_one_budget(store: Store, clock: ModelClock) -> None:
    store.enqueue(line("E0001"))
    store.fail(store.claim(lease_seconds=5), "flaky")  # attempt 1, retry at 1001
    clock.set(1001)
    store.claim(lease_seconds=5)  # attempt 2 dies silently
    clock.set(1006)
    lease = store.claim(lease_seconds=5)  # attempt 3
    assert lease.attempt == 3
    assert store.fail(lease, "flaky").outcome is Outcome.DEAD
    assert store.message("E0001").last_error == "flaky"


def test_permanent_fail_via_api(store: Store) -> None:
    store.enqueue(line("E0001"))
    completion = store.fail(store.claim(), "bad_data", permanent=True)
    assert (completion.outcome, store.message("E0001").attempts) == (Outcome.DEAD, 1)


def test_a_failure_keeps_its_detail_next_to_its_code(store: Store) -> None:
    store.enqueue(batch(line("E0001"), line("E0002")))
    retry = store.fail(store.claim(), "flaky", detail="the shipping API answered 503")
    assert (retry.outcome, retry.error, retry.detail) == (Outcome.RETRY, "flaky", "the shipping API answered 503")
    dead = store.fail(store.claim(), "bad_data", permanent=True, detail="no such customer")
    assert (dead.outcome, dead.detail) == (Outcome.DEAD, "no such customer")
    assert [(m.event_id, m.last_error, m.last_detail) for m in store.messages()] == [
        ("E0001", "flaky", "the shipping API answered 503"), ("E0002", "bad_data", "no such customer")]
    [letter] = store.dead_letters()
    assert letter.last_detail == "no such customer"


def test_a_failure_needs_a_code(store: Store) -> None:
    store.enqueue(line("E0001"))
    lease = store.claim()
    with pytest.raises(ValueError, match="error code"):
        store.fail(lease, "")
    with pytest.raises(TypeError, match="detail must be a string"):
        store.fail(lease, "flaky", detail=42)  # type: ignore[arg-type]
    assert store.message("E0001").state == "leased"


# ----------------------------------------------------------------- redrive

def test_redrive_resets_attempts_and_keeps_generation_and_payload(store: Store, clock: ModelClock) -> None:
    store.enqueue(line("E0004", "toy", 3000))
    store.complete(store.claim(), Handler())
    before = store.message("E0004")
    clock.set(1500)
    assert store.redrive(["E0004"]) == ["E0004"]
    after = store.message("E0004")
    assert (after.state, after.attempts, after.available_at) == ("ready", 0, 1500)
    assert (after.generation, after.payload) == (before.generation, before.payload)


def test_redrive_without_a_fix_goes_dead_again_and_with_it_recovers(store: Store) -> None:
    store.enqueue(line("E0004", "toy", 3000))
    store.complete(store.claim(), Handler())
    store.redrive(["E0004"])
    assert store.complete(store.claim(), Handler()).outcome is Outcome.DEAD
    store.redrive(["E0004"])
    assert store.complete(store.claim(), Handler.with_categories({"toy"})).outcome is Outcome.DONE
    assert money(store) == (1, 3000)


@pytest.mark.parametrize("setup, error", [("done", NotDead), ("ready", NotDead), ("leased", NotDead)])
def test_redrive_only_from_dead(store: Store, setup: str, error: type) -> None:
    store.enqueue(line("E0001"))
    if setup in ("leased", "done"):
        lease = store.claim()
        if setup == "done":
            store.complete(lease, Handler())
    with pytest.raises(error, match=f"E0001 is {setup}"):
        store.redrive(["E0001"])
    assert store.message("E0001").state == setup


def test_redrive_is_all_or_none(store: Store) -> None:
    store.enqueue(batch(line("E0001", "toy"), line("E0002")))
    store.complete(store.claim(), Handler())  # E0001 dead
    with pytest.raises(UnknownEvent, match="E0404"):
        store.redrive(["E0001", "E0404"])
    with pytest.raises(NotDead):
        store.redrive(["E0001", "E0002"])
    assert store.message("E0001").state == "dead"


def test_a_worker_of_the_previous_cycle_cannot_ack_after_redrive(store: Store, clock: ModelClock) -> None:
    store.enqueue(line("E0001"))
    stale = None
    for _ in range(3):  # three leases, all expire
        stale = store.claim(lease_seconds=2)
        clock.advance(2)
    assert store.claim() is None  # moved to dead
    store.redrive(["E0001"])
    fresh = store.claim(lease_seconds=100)
    assert fresh.attempt == 1 and stale.attempt == 3
    assert fresh.generation == stale.generation + 1
    # Same attempt numbering restarts; the generation does not.
    lookalike = Lease("E0001", stale.generation, 1, fresh.lease_until)
    with pytest.raises(LeaseLost, match="stale"):
        store.complete(lookalike, Handler())
    assert store.complete(fresh, Handler()).outcome is Outcome.DONE
    assert money(store) == (1, 100)


# -------------------------------------------------------- enqueue semantics

def test_reenqueue_after_done_is_a_duplicate_not_a_new_effect(store: Store, handler: Handler) -> None:
    store.enqueue(line("E0001"))
    store.complete(store.claim(), handler)
    result = store.enqueue(line("E0001"))
    assert (result.accepted, result.duplicates) == (0, 1)
    assert store.claim() is None
    assert money(store) == (1, 100)


def test_enqueue_sets_available_at_to_now(store: Store, clock: ModelClock) -> None:
    clock.set(1234)
    store.enqueue(line("E0001"))
    row = store.message("E0001")
    assert (row.state, row.attempts, row.generation, row.available_at, row.last_error) == ("ready", 0, 0, 1234, None)


def test_caller_transaction_rolls_back_an_enqueue(store: Store) -> None:
    from queue_core import parse_batch
    with pytest.raises(RuntimeError):
        with store.transaction() as tx:
            store.enqueue_tx(tx, parse_batch(line("E0001").encode()))
            raise RuntimeError("abort")
    assert store.messages() == []


# ---------------------------------------------------------------- schema

@pytest.mark.parametrize("sql", [
    "INSERT INTO messages (event_id, payload, state, available_at) VALUES ('E0009', '{}', 'lost', 0)",
    "INSERT INTO messages (event_id, payload, state, available_at) VALUES ('E0009', '{}', 'leased', 0)",
    "INSERT INTO messages (event_id, payload, state, available_at, lease_until) VALUES ('E0009', '{}', 'ready', 0, 5)",
    "INSERT INTO messages (event_id, payload, state, available_at) VALUES ('E0009', '{}', 'dead', 0)",
    "INSERT INTO messages (event_id, payload, state, available_at) VALUES ('X9', '{}', 'ready', 0)",
    "INSERT INTO messages (event_id, payload, state, available_at) VALUES ('E0009', '[1]', 'ready', 0)",
    "INSERT INTO messages (event_id, payload, state, available_at) VALUES ('E0009', '{}', 'ready', 'ten')",
    "INSERT INTO messages (event_id, payload, state, attempts, available_at) VALUES ('E0009', '{}', 'ready', 1.5, 0)",
    # A detail needs the code it explains (schema version 2).
    "INSERT INTO messages (event_id, payload, state, available_at, last_detail) VALUES ('E0009', '{}', 'ready', 0, 'x')",
    "INSERT INTO effects (event_id, category, amount_cents) VALUES ('E0404', 'book', 1)",
    "INSERT INTO effects (event_id, category, amount_cents) VALUES ('E0001', 'book', 0)",
    "INSERT INTO effects (event_id, category, amount_cents) VALUES ('E0001', 'book', 1)",  # second effect
])
def test_schema_refuses_impossible_rows(store: Store, db: Path, handler: Handler, sql: str) -> None:
    store.enqueue(line("E0001"))
    store.complete(store.claim(), handler)
    conn = sqlite3.connect(db)
    try:
        conn.execute("PRAGMA foreign_keys = ON")
        with pytest.raises(sqlite3.IntegrityError):
            conn.execute(sql)
    finally:
        conn.close()


def tables(db: Path) -> dict[str, int]:
    with closing(sqlite3.connect(db)) as conn:
        return {name: strict for name, strict in conn.execute(
            "SELECT name, strict FROM pragma_table_list WHERE schema = 'main' AND name NOT LIKE 'sqlite_%'")}


def test_tables_are_strict_with_the_contract_columns(db: Path, clock: ModelClock) -> None:
    queue = Store(db, clock=clock)
    # The queue's own tables are messages, receipts, queues, migration_lines
    # (version 6) and queue_counters (version 8); the ledger's effects table is
    # the reference application's, added by ledger.install.
    assert tables(db) == {"messages": 1, "receipts": 1, "queues": 1, "migration_lines": 1,
                          "queue_counters": 1}
    ledger.install(queue)
    ledger.install(queue)  # idempotent
    with closing(sqlite3.connect(db)) as conn:
        columns = {t: [r[1] for r in conn.execute(f"PRAGMA table_info({t})")]
                   for t in ("messages", "effects", "queues")}
        fks = conn.execute("PRAGMA foreign_key_list(effects)").fetchall()
    assert tables(db) == {"messages": 1, "receipts": 1, "queues": 1, "migration_lines": 1,
                          "queue_counters": 1, "effects": 1}
    # the queue (version 4), the lease's token (version 5), the retries
    # (version 8) and the priority (version 9) come last: a row of version 3
    # reads as before
    assert columns["messages"] == ["event_id", "payload", "state", "attempts", "generation",
                                   "available_at", "lease_until", "last_error", "last_detail",
                                   "enqueued_at", "done_at", "expired_leases", "payload_sha256",
                                   "queue", "lease_token", "retries", "priority"]
    # each queue's retry policy (version 7) after its version-4 settings
    assert columns["queues"] == ["name", "id_pattern", "max_attempts", "lease_seconds",
                                 "max_payload_bytes", "backoff_base_seconds", "backoff_max_seconds",
                                 "backoff_jitter"]
    assert columns["effects"] == ["queue", "event_id", "category", "amount_cents"]
    # one key of two columns: an effect belongs to one message of one queue
    assert sorted((fk[2], fk[3], fk[4]) for fk in fks) == [
        ("messages", "event_id", "event_id"), ("messages", "queue", "queue")]


def test_completing_with_the_ledger_needs_it_installed(db: Path, clock: ModelClock) -> None:
    queue = Store(db, clock=clock)
    queue.enqueue(line("E0001"))
    completion = queue.complete(queue.claim(), Handler())  # no effects table: the INSERT fails, nothing escapes
    assert (completion.outcome, completion.error) == (Outcome.RETRY, HANDLER_ERROR)
    assert "no such table: effects" in completion.detail
    assert ledger.totals(queue).count == 0 and "effects" not in tables(db)


def test_connections_are_configured_and_closed(store: Store, db: Path) -> None:
    # Issue 9: a store keeps one connection per thread for its life, closed by close().
    store.enqueue(line("E0001"))

    def configuration(conn: sqlite3.Connection) -> tuple[Any, ...]:
        return (conn.execute("PRAGMA foreign_keys").fetchone()[0],
                conn.execute("PRAGMA synchronous").fetchone()[0],
                conn.execute("PRAGMA journal_mode").fetchone()[0],
                conn.execute("PRAGMA busy_timeout").fetchone()[0],
                conn.isolation_level)

    configured = (1, 2, "wal", 2000, None)  # synchronous 2 is FULL; the store issues BEGIN/COMMIT itself
    with store.transaction() as tx:
        kept = tx.conn
        assert configuration(kept) == configured
        # A call nested in the transaction gets a temporary connection of its own, configured alike.
        temporary_conn, temporary_configuration = store.read(lambda view: (view.conn, configuration(view.conn)))
        assert temporary_conn is not kept and temporary_configuration == configured
    with pytest.raises(sqlite3.ProgrammingError):
        temporary_conn.execute("SELECT 1")  # the temporary one was closed when the nested call ended
    # Later reads and writes of this thread run on the same kept connection.
    assert store.read(lambda view: view.conn) is kept
    with store.transaction() as tx:
        assert tx.conn is kept
    assert store.status().count("ready") == 1
    assert db.with_name(db.name + "-wal").exists()  # a connection is open: SQLite keeps its WAL
    store.close()
    with pytest.raises(sqlite3.ProgrammingError):
        kept.execute("SELECT 1")
    # When the last connection closes, SQLite checkpoints and removes the WAL:
    # no file left behind means no connection was left open.
    assert not db.with_name(db.name + "-wal").exists()


@pytest.mark.parametrize("failure", [PermanentFailure("invalid_payload"), TemporaryFailure("timeout")])
def test_a_refusal_after_the_lease_ended_is_itself_refused(
    store: Store, clock: ModelClock, failure: Exception
) -> None:
    store.enqueue(line("E0001"))
    lease = store.claim(lease_seconds=2)

    def slow_refusal(tx: Tx, message: Message) -> None:
        clock.set(1002)  # the handler took until the lease ended, then refused
        raise failure

    with pytest.raises(LeaseLost, match="ended at 1002"):
        store.complete(lease, slow_refusal)
    row = store.message("E0001")
    assert (row.state, row.last_error, row.generation) == ("leased", None, 1)  # nothing recorded


# ------------------------------------------------------------ wrong types

def test_wrong_types_get_a_type_error_with_a_clear_message(store: Store, handler: Handler) -> None:
    with pytest.raises(TypeError, match="enqueue takes JSONL text"):
        store.enqueue({"event_id": "E0001", "payload": {}})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"claim\(\) returned None"):
        store.complete(None, handler)  # type: ignore[arg-type]
    store.enqueue(line("E0001"))
    lease = store.claim()
    with pytest.raises(TypeError, match="handler must be callable"):
        store.complete(lease, "Handler")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="expected a Lease"):
        store.fail("E0001", "flaky")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="redrive takes a list"):
        store.redrive("E0001")
    with pytest.raises(TypeError, match="Store\\(\\) takes a file path"):
        Store(42)  # type: ignore[arg-type]
    row = store.message("E0001")
    assert (row.state, row.generation, row.last_error) == ("leased", 1, None)  # nothing was recorded
    assert store.complete(lease, handler).outcome is Outcome.DONE
