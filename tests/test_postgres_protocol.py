"""The protocol on PostgreSQL, against a real server (tests/postgres_server.py).

The same Store API, the same fencing and the same effect + ACK in one
transaction, with PostgreSQL's row locks instead of SQLite's one writer:
a claim takes the rows it leases and skips the ones another transaction
holds (FOR UPDATE SKIP LOCKED). Every test opens a fresh database.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from queue_core import (
    BatchRejected,
    Handler,
    Lease,
    LeaseLost,
    ModelClock,
    Outcome,
    Store,
    StorageError,
    ledger,
    receipts,
    work,
)
from queue_core.engines.postgres import SCHEMA_VERSION

from .postgres_server import PORT, SERVER_USER, Cluster


@pytest.fixture
def url(postgres_url: str) -> str:
    """A postgresql:// URL of a fresh database (conftest.py; the server listens on its Unix socket only)."""
    return postgres_url


@pytest.fixture
def clock() -> ModelClock:
    return ModelClock(1000)


@pytest.fixture
def store(url: str, clock: ModelClock) -> Iterator[Store]:
    with Store(url, clock=clock) as opened:
        ledger.install(opened)
        yield opened


def line(event_id: str, category: str = "book", amount_cents: int = 100) -> str:
    return json.dumps({"event_id": event_id, "payload": {"category": category, "amount_cents": amount_cents}}) + "\n"


def test_a_postgresql_url_selects_postgresql_and_the_schema_is_created_once(url: str, clock: ModelClock) -> None:
    with Store(url, clock=clock) as first:
        assert first.engine.name == "postgresql"
        first.enqueue(line("E0001"))
    with Store(url, clock=clock) as again:  # opening again changes nothing
        assert [m.event_id for m in again.messages()] == ["E0001"]
        assert "postgresql://" in repr(again)


def test_enqueue_counts_duplicates_and_a_conflict_writes_nothing(store: Store) -> None:
    assert store.enqueue(line("E0001") + line("E0002")).accepted == 2
    result = store.enqueue(line("E0001") + line("E0003"))
    assert (result.accepted, result.duplicates) == (1, 1)
    with pytest.raises(BatchRejected) as rejected:
        store.enqueue(line("E0004") + line("E0001", amount_cents=999))
    assert rejected.value.code == "event_conflict" and rejected.value.line == 2
    assert [m.event_id for m in store.messages()] == ["E0001", "E0002", "E0003"]  # E0004 not written


def test_claim_complete_writes_the_effect_and_the_ack_together(store: Store) -> None:
    store.enqueue(line("E0001", amount_cents=700))
    lease = store.claim(lease_seconds=30)
    assert lease is not None and (lease.generation, lease.attempt) == (1, 1)
    assert store.complete(lease, Handler()).outcome is Outcome.DONE
    assert store.message("E0001").state == "done"
    assert ledger.effects(store) == [("E0001", "book", 700)]
    assert store.claim() is None
    totals = ledger.totals(store)  # Python ints, as on SQLite (PostgreSQL's sum would be a Decimal)
    assert type(totals.total_cents) is int and type(totals.by_category["book"]) is int


def test_old_generation_cannot_complete_and_its_effect_is_rolled_back(store: Store, clock: ModelClock) -> None:
    store.enqueue(line("E0001", amount_cents=700))
    slow = store.claim(lease_seconds=2)
    clock.set(1002)
    fresh = store.claim(lease_seconds=2)
    assert slow is not None and fresh is not None and fresh.generation == slow.generation + 1
    with pytest.raises(LeaseLost, match="generation 1 is stale"):
        store.complete(slow, Handler())
    with pytest.raises(LeaseLost):
        store.fail(slow, "whatever")
    assert ledger.effects(store) == []  # the slow worker's INSERT went with its transaction
    assert store.complete(fresh, Handler()).outcome is Outcome.DONE
    assert ledger.effects(store) == [("E0001", "book", 700)]


def test_retry_backoff_dead_and_redrive(store: Store, clock: ModelClock) -> None:
    store.enqueue(line("E0001"))
    first = store.claim(lease_seconds=30)
    assert first is not None
    retry = store.fail(first, "downstream_unavailable")
    assert (retry.outcome, retry.available_at) == (Outcome.RETRY, 1001)
    assert store.claim() is None  # not before its backoff
    clock.set(1001)
    second = store.claim(lease_seconds=30)
    assert second is not None and second.attempt == 2
    assert store.fail(second, "downstream_unavailable").available_at == 1003
    clock.set(1003)
    third = store.claim(lease_seconds=30)
    assert third is not None
    assert store.fail(third, "downstream_unavailable").outcome is Outcome.DEAD
    dead = store.dead_letters()
    assert [(m.event_id, m.attempts, m.last_error) for m in dead] == [("E0001", 3, "downstream_unavailable")]
    assert store.redrive(["E0001"]) == ["E0001"]
    again = store.claim(lease_seconds=30)
    assert again is not None and (again.attempt, again.generation) == (1, 4)
    assert store.complete(again, Handler()).outcome is Outcome.DONE


def test_a_handler_refusal_is_recorded_and_its_writes_undone(store: Store) -> None:
    store.enqueue(line("E0001", category="toy"))
    lease = store.claim(lease_seconds=30)
    assert lease is not None
    completion = store.complete(lease, Handler())
    assert (completion.outcome, completion.error) == (Outcome.DEAD, "invalid_payload")
    assert ledger.effects(store) == []


def test_an_expired_lease_is_reclaimed_lazily_and_the_budget_ends_in_dead(store: Store, clock: ModelClock) -> None:
    store.enqueue(line("E0001"))
    for attempt in (1, 2, 3):
        lease = store.claim(lease_seconds=2)
        assert lease is not None and lease.attempt == attempt
        clock.advance(2)  # the worker never completes
        assert store.message("E0001").state == "leased"  # expiry writes nothing
    assert store.claim() is None
    message = store.message("E0001")
    assert (message.state, message.last_error) == ("dead", "lease_expired")


def test_a_claim_skips_a_row_another_transaction_holds(url: str, clock: ModelClock) -> None:
    # SQLite would make B wait for A's write lock; PostgreSQL lets B take the
    # next message at once, because A's claim locks only the row it took.
    with Store(url, clock=clock) as a, Store(url, clock=clock) as b:
        a.enqueue(line("E0001") + line("E0002"))
        with a.transaction() as tx:
            held = a.claim_tx(tx, 30)
            assert held is not None and held.event_id == "E0001"
            started = time.monotonic()
            other = b.claim(30)
            assert time.monotonic() - started < 5  # not blocked behind A's open transaction
            assert other is not None and other.event_id == "E0002"
        assert b.claim(30) is None  # A committed E0001's lease


def test_concurrent_threads_take_different_messages_and_pay_each_once(url: str, clock: ModelClock) -> None:
    with Store(url, clock=clock) as setup:
        ledger.install(setup)
        setup.enqueue("".join(line(f"E{n:04d}", amount_cents=n) for n in range(1, 201)))
    summaries: list[object] = []

    def worker() -> None:
        with Store(url, clock=clock) as mine:
            summaries.append(work(mine, Handler(), lease_seconds=600))

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    with Store(url, clock=clock) as check:
        report = ledger.report(check).to_dict()
    assert report["messages"] == {"ready": 0, "leased": 0, "done": 200, "dead": 0}
    assert report["effects"]["count"] == 200 and report["effects"]["total_cents"] == sum(range(1, 201))


def test_worker_processes_on_one_database_pay_each_event_once(url: str) -> None:
    with Store(url, clock=ModelClock(1000)) as setup:
        ledger.install(setup)
        setup.enqueue("".join(line(f"E{n:04d}", amount_cents=n) for n in range(1, 301)))
    program = ("import json, sys\n"
               "from queue_core import Handler, ModelClock, Store, work\n"
               "with Store(sys.argv[1], clock=ModelClock(1000)) as s:\n"
               "    print(json.dumps(work(s, Handler(), lease_seconds=600).to_dict()))\n")
    procs = [subprocess.Popen([sys.executable, "-c", program, url], stdout=subprocess.PIPE, text=True)
             for _ in range(3)]
    done = [json.loads(proc.communicate(timeout=180)[0])["done"] for proc in procs]
    assert sum(done) == 300
    with Store(url, clock=ModelClock(1000)) as check:
        report = ledger.report(check).to_dict()
    assert report["effects"]["count"] == 300 and report["effects"]["total_cents"] == sum(range(1, 301))


def test_the_batched_path_works_there_too(store: Store) -> None:
    store.enqueue("".join(line(f"E{n:04d}", amount_cents=n) for n in range(1, 41)))
    summary = work(store, Handler(), lease_seconds=600, batch=16)
    assert summary.done == 40
    assert ledger.totals(store).total_cents == sum(range(1, 41))


def test_with_the_system_clock_time_is_the_servers(url: str) -> None:
    with Store(url) as store:  # no model clock: the database server's clock
        before = int(time.time())
        with store.transaction() as tx:
            now = tx.now()
        assert before - 5 <= now <= int(time.time()) + 5
        store.enqueue(line("E0001"))
        assert abs(store.message("E0001").available_at - now) <= 5


def test_an_unreachable_server_is_a_storage_error_with_a_code(postgres_cluster: Cluster) -> None:
    missing = f"postgresql://{SERVER_USER}@/no_such_database?host={postgres_cluster.root}&port={PORT}"
    with pytest.raises(StorageError) as failed:
        Store(missing, clock=ModelClock(1000))
    assert failed.value.code == "cannot_connect"
    assert "no_such_database" in str(failed.value)


def run_cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "queue_core", *args], input=stdin, capture_output=True, text=True,
                          timeout=120)


def test_the_command_line_runs_the_readme_session_on_postgresql(url: str) -> None:
    batch = (line("E0001", amount_cents=10000) + line("E0001", amount_cents=10000) + line("E0002", "pen", 2000)
             + line("E0003", amount_cents=5000) + line("E0004", "toy", 3000))
    enqueued = run_cli("--db", url, "--now", "1000", "enqueue", "-", stdin=batch)
    assert enqueued.returncode == 0, enqueued.stderr
    assert json.loads(enqueued.stdout) == {"accepted": 4, "duplicates": 1}
    worked = run_cli("--db", url, "--now", "1000", "work", "--lease-seconds", "2")
    assert json.loads(worked.stdout) == {"claimed": 4, "done": 3, "retried": 0, "dead": 1, "lease_lost": 0}
    dead = run_cli("--db", url, "dead", "--json")
    assert [(d["event_id"], d["last_error"]) for d in json.loads(dead.stdout)] == [("E0004", "invalid_payload")]
    assert run_cli("--db", url, "--now", "1000", "redrive", "E0004").returncode == 0
    toy = run_cli("--db", url, "--now", "1000", "work", "--category", "toy")
    assert json.loads(toy.stdout)["done"] == 1
    status = run_cli("--db", url, "status", "--json")
    assert status.returncode == 0, status.stderr
    shown = json.loads(status.stdout)
    assert shown["messages"] == {"ready": 0, "leased": 0, "done": 4, "dead": 0}
    # A refused batch is refused the same way, with its line and code, and nothing written.
    bad = run_cli("--db", url, "--now", "1000", "enqueue", "-", stdin=line("E0005") + '{"event_id": "E0006"}\n')
    assert bad.returncode == 2 and "line 2: missing_key" in bad.stderr and "Traceback" not in bad.stderr
    assert json.loads(run_cli("--db", url, "status", "--json").stdout)["messages"]["done"] == 4


def order_line(event_id: str, operation: str = "op-1") -> str:
    payload = {"tenant": "north", "operation": operation, "category": "book", "amount_cents": 500}
    return json.dumps({"event_id": event_id, "payload": payload}) + "\n"


def test_receipts_work_there_and_a_repeated_operation_makes_one_effect(store: Store) -> None:
    from queue_core import ReceiptHandler, receipts

    store.enqueue(order_line("E0001") + order_line("E0002") + order_line("E0003", "op-2"))
    summary = work(store, ReceiptHandler(Handler()))
    assert (summary.claimed, summary.done) == (3, 3)
    assert ledger.effects(store) == [("E0001", "book", 500), ("E0003", "book", 500)]
    assert [(r.operation, r.effect) for r in receipts.stored(store)] == [("op-1", "E0001"), ("op-2", "E0003")]
    with pytest.raises(ValueError, match="create_table is for an SQLite database"):
        store.write(receipts.create_table)


def test_two_workers_completing_one_operation_at_once_make_one_effect(url: str, clock: ModelClock) -> None:
    # No write lock serialises them here: both transactions are open at once,
    # and the second must wait for the first's receipt instead of writing a
    # second effect (without the key lock it would fail on the receipts key).
    from queue_core import ReceiptHandler, receipts

    with Store(url, clock=clock) as setup:
        ledger.install(setup)
        setup.enqueue(order_line("E0001") + order_line("E0002"))
    inside_effect = threading.Event()
    outcomes: dict[str, object] = {}

    class SlowHandler(Handler):
        def __call__(self, tx, message):  # type: ignore[no-untyped-def]
            super().__call__(tx, message)
            inside_effect.set()
            time.sleep(0.5)  # the other worker arrives while this transaction is open

    def first() -> None:
        with Store(url, clock=clock) as store:
            lease = store.claim(60)
            assert lease is not None and lease.event_id == "E0001"
            outcomes["E0001"] = store.complete(lease, ReceiptHandler(SlowHandler())).outcome

    thread = threading.Thread(target=first)
    thread.start()
    try:
        assert inside_effect.wait(30)
        with Store(url, clock=clock) as store:
            lease = store.claim(60)  # E0001 is leased: the next one
            assert lease is not None and lease.event_id == "E0002"
            outcomes["E0002"] = store.complete(lease, ReceiptHandler(Handler())).outcome
    finally:
        thread.join(60)
    assert outcomes == {"E0001": Outcome.DONE, "E0002": Outcome.DONE}
    with Store(url, clock=clock) as check:
        assert ledger.effects(check) == [("E0001", "book", 500)]
        assert [(r.operation, r.effect) for r in receipts.stored(check)] == [("op-1", "E0001")]
        assert check.status().count("done") == 2


def test_without_create_an_empty_database_is_refused_and_left_empty(url: str, clock: ModelClock) -> None:
    from queue_core import WrongPath

    with pytest.raises(WrongPath) as refused:
        Store(url, clock=clock, create=False)
    assert refused.value.code == "no_database" and "no queue database at postgresql://" in str(refused.value)
    import psycopg

    with psycopg.connect(url) as conn:  # nothing was created
        assert conn.execute("SELECT count(*) FROM information_schema.tables "
                            "WHERE table_schema = current_schema()").fetchone() == (0,)
    with Store(url, clock=clock) as created:
        created.enqueue(line("E0001"))
    with Store(url, clock=clock, create=False) as opened:  # a queue database opens without create
        assert opened.status().count("ready") == 1


# ------------------------------------------- a connection lost between INSERT and COMMIT

DIE_BEFORE_COMMIT = """
import os, signal, sys
from queue_core import Handler, ModelClock, Store

def probe(point):
    if point == "complete.before_commit":  # the effect's INSERT is sent; COMMIT is not
        print("inserted", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)

with Store(sys.argv[1], clock=ModelClock(1000), create=False, probe=probe) as store:
    lease = store.claim(30)
    store.complete(lease, Handler())
"""


def _wait_until_no_open_transaction(url: str, timeout: float = 30) -> None:
    """Until the server has noticed the dead client: its transaction, and the row lock, end with it."""
    import psycopg

    deadline = time.monotonic() + timeout
    with psycopg.connect(url, autocommit=True) as conn:
        while conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                           "AND state LIKE 'idle in transaction%' AND pid <> pg_backend_pid()").fetchone()[0]:
            assert time.monotonic() < deadline, "the server kept the dead client's transaction open"
            time.sleep(0.05)


def test_a_worker_killed_between_insert_and_commit_leaves_no_effect_and_the_message_comes_back(url: str) -> None:
    with Store(url, clock=ModelClock(1000)) as setup:
        ledger.install(setup)
        setup.enqueue(line("E0001", amount_cents=250))
    child = subprocess.run([sys.executable, "-c", DIE_BEFORE_COMMIT, url], capture_output=True, text=True,
                           timeout=60)
    assert child.returncode == -9 and child.stdout == "inserted\n", (child.returncode, child.stderr)
    _wait_until_no_open_transaction(url)
    clock = ModelClock(1000)
    with Store(url, clock=clock, create=False) as store:
        assert ledger.effects(store) == []  # the server rolled the INSERT back with the connection
        leased = store.message("E0001")
        assert (leased.state, leased.attempts, leased.generation) == ("leased", 1, 1)  # the claim had committed
        assert store.claim(30) is None  # its lease still runs
        clock.advance(31)
        again = store.claim(30)
        assert again is not None and (again.event_id, again.attempt, again.generation) == ("E0001", 2, 2)
        assert store.complete(again, Handler()).outcome is Outcome.DONE
        assert ledger.effects(store) == [("E0001", "book", 250)]


def test_a_connection_the_server_ends_before_commit_is_a_storage_error_and_a_retry_is_safe(url: str) -> None:
    import psycopg

    with Store(url, clock=ModelClock(1000)) as setup:
        ledger.install(setup)
        setup.enqueue(line("E0001", amount_cents=250) + line("E0002", amount_cents=40))
    backend: list[int] = []

    def cut(point: str) -> None:
        if point == "complete.before_commit" and len(backend) == 1:
            with psycopg.connect(url, autocommit=True) as admin:  # as a failover or a network cut would
                assert admin.execute("SELECT pg_terminate_backend(%s)", (backend[0],)).fetchone() == (True,)
            backend.append(0)

    with Store(url, clock=ModelClock(1000), create=False, probe=cut) as store:
        backend.append(store.read(lambda tx: tx.execute("SELECT pg_backend_pid()").fetchone()[0]))
        lease = store.claim(30)
        assert lease is not None
        with pytest.raises(StorageError) as lost:
            store.complete(lease, Handler())
        assert lost.value.code == "connection_lost", lost.value
        assert ledger.effects(store) == []  # the store reconnected for this read; nothing was written
        assert store.message("E0001").state == "leased"
        # The worker cannot know whether a lost COMMIT landed; retrying with the
        # same lease is safe either way. Here it had not: the retry writes once.
        assert store.complete(lease, Handler()).outcome is Outcome.DONE
        # Had it landed, the retry would be refused by the fence and write nothing:
        with pytest.raises(LeaseLost):
            store.complete(lease, Handler())
        assert ledger.effects(store) == [("E0001", "book", 250)]
        assert backend[0] != store.read(lambda tx: tx.execute("SELECT pg_backend_pid()").fetchone()[0])


# ------------------------------------------------------------------ schema versions


def make_v3(url: str, version: int = 3) -> None:
    """A database as queue_core ``version`` (2 or 3) left it: its migrations, and the ledger of then."""
    import psycopg

    from queue_core.engines.postgres import MIGRATIONS

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("BEGIN")
        for step in range(2, version + 1):
            conn.execute(MIGRATIONS[step])
        conn.execute("INSERT INTO queue_core_schema (application_id, version) VALUES (1363373938, %s)",
                     (version,))
        conn.execute("""CREATE TABLE effects (
            event_id TEXT COLLATE "C" PRIMARY KEY
                     CONSTRAINT effects_event_id_fkey REFERENCES messages (event_id),
            category TEXT NOT NULL, amount_cents BIGINT NOT NULL)""")
        conn.execute("INSERT INTO messages (event_id, payload, state, attempts, generation, available_at) "
                     "VALUES ('E0001', '{}', 'done', 1, 1, 1000), ('E0002', '{}', 'ready', 0, 0, 1000)")
        conn.execute("INSERT INTO effects VALUES ('E0001', 'book', 100)")
        conn.execute("COMMIT")


def test_a_version_3_database_moves_to_named_queues_keeping_every_row(url: str, clock: ModelClock) -> None:
    import psycopg

    make_v3(url)
    every = "SELECT event_id, payload, state, attempts, generation, available_at FROM messages ORDER BY 1"
    with psycopg.connect(url, autocommit=True) as conn:
        before = conn.execute(every).fetchall()
    with Store(url, clock=clock, create=False) as store:
        assert store.status().to_dict()["messages"] == {"ready": 1, "leased": 0, "done": 1, "dead": 0}
        assert ledger.effects(store) == [("E0001", "book", 100)]
        store.create_queue("orders", id_pattern=r"o-[0-9]+")
    with psycopg.connect(url, autocommit=True) as conn:
        assert conn.execute("SELECT version FROM queue_core_schema").fetchone() == (SCHEMA_VERSION,)
        assert conn.execute(every).fetchall() == before
        assert conn.execute("SELECT DISTINCT queue FROM messages").fetchall() == [("default",)]
        keys = conn.execute("SELECT pg_get_constraintdef(oid) FROM pg_constraint "
                            "WHERE conname = 'effects_event_id_fkey'").fetchall()
        assert keys == [("FOREIGN KEY (queue, event_id) REFERENCES messages(queue, event_id)",)]


def test_the_ledgers_effects_move_only_because_its_line_is_registered(
        url: str, clock: ModelClock, monkeypatch: pytest.MonkeyPatch) -> None:
    import psycopg

    from queue_core import engines

    make_v3(url)
    monkeypatch.setattr(engines, "LINES", {})  # the engine knows no ledger
    with pytest.raises(StorageError) as blocked:
        Store(url, clock=clock, create=False)
    assert blocked.value.code == "migration_blocked" and "table effects" in blocked.value.message
    with psycopg.connect(url, autocommit=True) as conn:
        assert conn.execute("SELECT version FROM queue_core_schema").fetchone() == (3,)
    engines.register_line(ledger.LINE)
    with Store(url, clock=clock, create=False) as store:
        assert ledger.effects(store) == [("E0001", "book", 100)]
        ledger.install(store)  # adopted at the line's version 1
        assert store.read(lambda view: view.ops.line_version(view.conn, "ledger")) == 1


def test_a_version_2_database_moves_to_the_current_version_and_no_row_changes_meaning(url: str, clock: ModelClock) -> None:
    import psycopg

    make_v3(url, version=2)
    old = "event_id, payload, state, attempts, generation, available_at, lease_until, last_error, last_detail"
    with psycopg.connect(url, autocommit=True) as conn:
        before = conn.execute(f"SELECT {old} FROM messages ORDER BY event_id").fetchall()
    with Store(url, clock=clock, create=False) as store:
        metrics = store.metrics()
        assert dict(metrics.messages) == {"ready": 1, "leased": 0, "done": 1, "dead": 0}
        assert (metrics.oldest_ready_age, metrics.enqueue_to_done.count) == (None, 0)  # times unknown: left out
    with psycopg.connect(url, autocommit=True) as conn:
        assert conn.execute("SELECT version FROM queue_core_schema").fetchone() == (SCHEMA_VERSION,)
        assert conn.execute(f"SELECT {old} FROM messages ORDER BY event_id").fetchall() == before
        assert conn.execute("SELECT count(*) FROM messages WHERE enqueued_at IS NULL AND done_at IS NULL"
                            " AND expired_leases = 0 AND payload_sha256 IS NULL AND queue = 'default'"
                            " AND lease_token = 0"
                            ).fetchone() == (2,)


def test_a_version_4_database_gets_lease_tokens_and_its_leases_still_complete(url: str, clock: ModelClock) -> None:
    import psycopg

    from queue_core.engines.postgres import MIGRATIONS

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("BEGIN")
        for step in range(2, 5):
            conn.execute(MIGRATIONS[step])
        conn.execute("INSERT INTO queue_core_schema (application_id, version) VALUES (1363373938, 4)")
        # E0001 leased by a version-4 claim: the generation and the deadline only
        conn.execute("INSERT INTO messages (event_id, payload, state, attempts, generation, available_at,"
                     " lease_until) VALUES ('E0001', %s, 'leased', 1, 1, 0, %s), ('E0002', %s, 'ready', 0, 0, 0,"
                     " NULL)", ('{"category": "book", "amount_cents": 100}', clock.now() + 30,
                                '{"category": "book", "amount_cents": 100}'))
        conn.execute("COMMIT")
    with Store(url, clock=clock, create=False) as store:
        ledger.install(store)
        assert store.complete(Lease("E0001", 1, 1, clock.now() + 30), Handler()).outcome is Outcome.DONE
        fresh = store.claim()
        assert fresh is not None and fresh.token != 0
        assert store.complete(fresh, Handler()).outcome is Outcome.DONE
    with psycopg.connect(url, autocommit=True) as conn:
        assert conn.execute("SELECT version FROM queue_core_schema").fetchone() == (SCHEMA_VERSION,)
        assert conn.execute("SELECT event_id, lease_token FROM messages ORDER BY 1").fetchall() == [
            ("E0001", 0), ("E0002", fresh.token)]
        with pytest.raises(psycopg.errors.CheckViolation):
            conn.execute("UPDATE messages SET lease_token = -1")


def test_a_table_of_yours_keyed_on_the_old_id_stops_the_migration(url: str, clock: ModelClock) -> None:
    import psycopg

    make_v3(url)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE orders (event_id TEXT COLLATE \"C\" REFERENCES messages (event_id))")
    with pytest.raises(StorageError) as blocked:
        Store(url, clock=clock)
    assert blocked.value.code == "migration_blocked" and "orders" in blocked.value.message
    with psycopg.connect(url, autocommit=True) as conn:
        assert conn.execute("SELECT version FROM queue_core_schema").fetchone() == (3,)
        assert conn.execute("SELECT count(*) FROM information_schema.tables "
                            "WHERE table_name = 'queues'").fetchone() == (0,)


def test_a_newer_schema_version_is_refused_and_nothing_is_changed(url: str, clock: ModelClock) -> None:
    import psycopg

    Store(url, clock=clock).close()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("UPDATE queue_core_schema SET version = %s", (SCHEMA_VERSION + 1,))
        conn.execute("ALTER TABLE messages DROP COLUMN payload_sha256")  # a change this version would undo
    with pytest.raises(StorageError) as refused:
        Store(url, clock=clock)
    assert refused.value.code == "schema_too_new" and f"schema version {SCHEMA_VERSION + 1}" in str(refused.value)
    with psycopg.connect(url, autocommit=True) as conn:
        assert conn.execute("SELECT version FROM queue_core_schema").fetchone() == (SCHEMA_VERSION + 1,)
        assert conn.execute("SELECT count(*) FROM information_schema.columns WHERE table_name = 'messages'"
                            " AND column_name = 'payload_sha256'").fetchone() == (0,)


# ------------------------------------------- BEGIN travels with the first statement

def test_a_transaction_that_opens_with_a_script_or_executemany_still_rolls_back_whole(
        url: str, clock: ModelClock) -> None:
    # BEGIN waits to go out with the transaction's first statement; a script or an
    # executemany cannot take it along, so it must go first on its own, or they
    # would commit by themselves outside the transaction.
    with Store(url, clock=clock) as store:
        with store.transaction():
            pass  # an empty transaction: nothing was begun, nothing to end
        with pytest.raises(RuntimeError, match="undo"):
            with store.transaction() as tx:
                ledger.install_tx(tx)  # its first statement: the ledger's script
                raise RuntimeError("undo")
        assert not store.read(lambda view: view.ops.table_exists(view.conn, "effects"))
        with pytest.raises(RuntimeError, match="undo"):
            with store.transaction() as tx:
                tx.conn.executemany(
                    "INSERT INTO receipts (scope, tenant, operation, payload, effect)"
                    " VALUES (%s, %s, %s, %s, %s)",
                    [("default", "north", "op-1", "{}", "E0001")])
                raise RuntimeError("undo")
        assert receipts.stored(store) == []


@pytest.mark.timeout(120)
def test_a_forever_worker_outlives_a_lost_connection_and_goes_on(url: str, tmp_path: Path) -> None:
    # A real `queue-core work --forever` process; the server ends its session (as a
    # restart or a failover would). The worker says so, waits, reconnects and goes on.
    import psycopg

    with Store(url) as setup:
        ledger.install(setup)
        setup.enqueue(line("E0001", amount_cents=10))
    worker = subprocess.Popen([sys.executable, "-m", "queue_core", "--db", url, "work", "--forever",
                               "--poll", "0.1"], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)

    def state(event_id: str) -> str:
        with Store(url, create=False) as look:
            return look.message(event_id).state

    def wait(condition: Any, what: str) -> None:
        deadline = time.monotonic() + 60
        while not condition():
            assert time.monotonic() < deadline, f"waited 60 s for {what}"
            time.sleep(0.05)

    try:
        wait(lambda: state("E0001") == "done", "E0001")
        with psycopg.connect(url, autocommit=True) as admin:
            ended = admin.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()").fetchone()[0]
        assert ended >= 1
        with Store(url, create=False) as more:
            more.enqueue(line("E0002", amount_cents=20))
        wait(lambda: state("E0002") == "done", "E0002, after the connection was lost")
        assert worker.poll() is None  # still running
        worker.send_signal(signal.SIGTERM)
        out, err = worker.communicate(timeout=30)
    finally:
        worker.kill()
    assert worker.returncode == 0, err
    assert json.loads(out)["done"] == 2
    assert "queue-core: connection_lost: " in err and "; trying again in 0.1 s" in err, err
    with Store(url, create=False) as final:
        assert ledger.effects(final) == [("E0001", "book", 10), ("E0002", "book", 20)]
