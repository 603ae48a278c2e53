"""Named queues: each with its own settings in the database, isolated from the others.

Runs on both engines (tests/conformance/conftest.py). The CLI tests run
real ``queue-core`` processes.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from queue_core import (
    BatchRejected,
    Handler,
    InvalidQueue,
    LeaseLost,
    ModelClock,
    Outcome,
    QueueConflict,
    QueueSettings,
    StorageError,
    Store,
    UnknownQueue,
    ledger,
    parse_batch,
    work,
)
from queue_core.prometheus import exposition
from queue_core.queues import DEFAULT_SETTINGS, NEW_QUEUE_BACKOFF_JITTER


def book(cents: int) -> dict[str, Any]:
    return {"category": "book", "amount_cents": cents}


def cli(folder: Path, target: Any, *args: Any, now: int = 1000) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "queue_core", "--db", str(target), "--now", str(now),
                           *map(str, args)], cwd=folder, capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)


@pytest.fixture
def orders(store: Store, clock: ModelClock) -> Iterator[Store]:
    store.create_queue("orders", id_pattern=r"order-[0-9]+", max_attempts=2, lease_seconds=60)
    queue = Store(store.target, clock=clock, queue="orders")
    yield queue
    queue.close()


# ------------------------------------------------------------ settings

def test_the_default_queue_has_the_teaching_settings(store: Store) -> None:
    assert store.queue == "default" and store.settings == DEFAULT_SETTINGS
    assert store.queue_settings("default") == DEFAULT_SETTINGS  # as stored in the database
    assert (DEFAULT_SETTINGS.id_pattern, DEFAULT_SETTINGS.max_attempts, DEFAULT_SETTINGS.lease_seconds,
            DEFAULT_SETTINGS.max_payload_bytes) == ("E[0-9]{4}", 3, 30, 10_000)


def test_a_created_queue_keeps_its_settings_and_applies_them(orders: Store, store: Store, clock: ModelClock) -> None:
    assert orders.settings == QueueSettings("orders", "order-[0-9]+", 2, 60, 10_000,
                                            backoff_jitter=NEW_QUEUE_BACKOFF_JITTER)
    # another store on the same database reads the same settings
    assert [q.name for q, _ in store.queues()] == ["default", "orders"]
    orders.send("order-42", book(100))
    lease = orders.claim()  # the queue's own lease: 60 s
    assert lease is not None and lease.lease_until == 1060
    orders.fail(lease, "flaky")
    clock.advance(10)
    second = orders.claim()
    assert second is not None
    assert orders.fail(second, "flaky").outcome is Outcome.DEAD  # max_attempts 2
    with pytest.raises(BatchRejected) as refused:
        orders.send("E0001", book(1))
    assert refused.value.code == "invalid_event_id"
    assert "id rule of queue orders, order-[0-9]+" in refused.value.message


def test_a_batch_parsed_by_another_queue_s_rules_is_checked_by_this_queue_s(store: Store,
                                                                            clock: ModelClock) -> None:
    # parse_batch() alone applies the default queue's rules; enqueue_tx checks the queue's own
    store.create_queue("small", max_payload_bytes=20)
    store.create_queue("orders", id_pattern=r"order-[0-9]+")
    with Store(store.target, clock=clock, queue="small") as small, \
            Store(store.target, clock=clock, queue="orders") as orders:
        with pytest.raises(BatchRejected) as too_large:
            small.enqueue(parse_batch(b'{"event_id": "E0001", "payload": {"note": "some thirty bytes long"}}'))
        assert (too_large.value.code, too_large.value.line) == ("payload_too_large", 1)
        assert "the limit is 20" in too_large.value.message
        with pytest.raises(BatchRejected) as refused:
            orders.enqueue(parse_batch(b'{"event_id": "E0001", "payload": {}}'))
        assert (refused.value.code, refused.value.line) == ("invalid_event_id", 1)
        assert "id rule of queue orders" in refused.value.message
        assert small.messages() == [] and orders.messages() == []  # nothing written


def test_create_is_idempotent_and_a_conflict_changes_nothing(orders: Store, store: Store) -> None:
    same = store.create_queue("orders", id_pattern=r"order-[0-9]+", max_attempts=2, lease_seconds=60)
    assert same == orders.settings
    with pytest.raises(QueueConflict) as conflict:
        store.create_queue("orders", id_pattern=r"order-[0-9]+", max_attempts=3, lease_seconds=60)
    assert "max_attempts 2, not 3" in conflict.value.message
    with pytest.raises(QueueConflict):
        store.create_queue("default", max_attempts=5)  # the default queue's rules never change
    assert store.queue_settings("orders") == orders.settings


@pytest.mark.parametrize(("kwargs", "code"), [
    ({"id_pattern": "a*"}, "invalid_id_pattern"),  # matches the empty string
    ({"id_pattern": "(x"}, "invalid_id_pattern"),
    ({"id_pattern": ""}, "invalid_id_pattern"),
    ({"max_attempts": 0}, "invalid_setting"),
    ({"lease_seconds": -1}, "invalid_setting"),
    ({"max_payload_bytes": 0}, "invalid_setting"),
    ({"max_attempts": True}, "invalid_setting"),
])
def test_an_unusable_setting_is_refused_and_nothing_is_written(store: Store, kwargs: dict[str, Any],
                                                               code: str) -> None:
    with pytest.raises(InvalidQueue) as refused:
        store.create_queue("orders", **kwargs)
    assert refused.value.code == code
    assert store.queue_settings("orders") is None


HOSTILE = ["Orders", "1orders", "", "o'; DROP TABLE messages; --", "a b", "a;b", "%s", "%(queue)s",
           "ordеrs",  # a Cyrillic е: looks like "orders"
           "x" * 64, "o" * 10_000, "orders\n", "orders\x00"]


@pytest.mark.parametrize("name", HOSTILE, ids=range(len(HOSTILE)))
def test_a_hostile_name_is_refused_before_any_sql(store: Store, name: str) -> None:
    store.close()  # any SQL would now raise store_closed: the refusal comes first
    with pytest.raises(InvalidQueue) as refused:
        store.create_queue(name)
    assert refused.value.code == "invalid_queue_name"
    assert len(refused.value.message) < 300  # a 10,000-character name is not echoed whole
    with pytest.raises(InvalidQueue):
        store.queue_settings(name)
    with pytest.raises(InvalidQueue):
        Store(store.target, queue=name)


def test_a_name_is_a_bound_value_in_every_statement() -> None:
    from queue_core.engines import postgres, sqlite
    compared_somewhere = 0
    for operations in (sqlite.OPERATIONS, postgres.OPERATIONS):
        for query in operations.queries.values():
            for compared in re.findall(r"\bqueue = (\S+)", query.sql):
                assert compared.rstrip(")") in (":queue", "%(queue)s"), query.sql
                compared_somewhere += 1
    assert compared_somewhere > 40  # the scan saw the statements


def test_an_unknown_queue_is_an_error_naming_it(store: Store) -> None:
    with pytest.raises(UnknownQueue) as unknown:
        Store(store.target, queue="ordrs")
    assert "ordrs" in unknown.value.message and "create" in unknown.value.message
    assert [q.name for q, _ in store.queues()] == ["default"]  # a typo never creates a queue


# ------------------------------------------------------------ isolation

def test_queues_are_isolated_the_same_id_in_two_queues(store: Store, clock: ModelClock) -> None:
    store.create_queue("a", id_pattern=r"[a-z]+-[0-9]+")
    store.create_queue("b", id_pattern=r"[a-z]+-[0-9]+")
    with Store(store.target, clock=clock, queue="a") as a, Store(store.target, clock=clock, queue="b") as b:
        assert a.send("job-1", book(100)).accepted == 1
        assert b.send("job-1", book(200)).accepted == 1  # another queue: not a conflict
        assert a.send("job-1", book(100)).duplicates == 1  # deduplicated within its queue
        with pytest.raises(BatchRejected):
            a.send("job-1", book(300))  # a conflict within its queue
        assert store.claim() is None  # the default queue sees neither
        lease_a = a.claim()
        assert lease_a is not None and a.claim() is None  # a never claims b's message
        # a's lease cannot complete b's message of the same id and generation
        lease_b = b.claim()
        assert lease_b is not None and (lease_b.event_id, lease_b.generation) == (lease_a.event_id, 1)
        assert a.complete(lease_a, Handler()).outcome is Outcome.DONE
        assert b.message("job-1").state == "leased"
        b.close()
        with Store(store.target, clock=clock, queue="b") as b2:
            assert b2.complete(lease_b, Handler()).outcome is Outcome.DONE
            # the ledger keeps both effects, each keyed by its queue
            assert sorted(ledger.effects(store)) == [("job-1", "book", 100), ("job-1", "book", 200)]
            assert ledger.totals(store).total_cents == 300
            b2.enqueue([{"event_id": "job-2", "payload": {"x": 1}}])
            assert b2.complete(b2.claim(), Handler()).outcome is Outcome.DEAD  # not a ledger payload
            assert [m.event_id for m in b2.dead_letters()] == ["job-2"] and a.dead_letters() == []
            with pytest.raises(Exception):
                a.redrive(["job-2"])  # not in a
            assert b2.redrive(["job-2"]) == ["job-2"]
            assert a.status().to_dict()["messages"] == {"ready": 0, "leased": 0, "done": 1, "dead": 0}
            assert b2.status().count("ready") == 1
            assert a.purge("ready") == 0 and b2.purge("ready") == 1
            assert 'queue_core_messages{queue="a",state="done"} 1' in exposition(a.metrics(), a.queue)
            clock.advance(10)
            assert a.prune(0).pruned == 1 and b2.message("job-1").pruned is False


def test_a_stale_lease_of_another_queue_is_fenced(orders: Store, store: Store) -> None:
    orders.send("order-1", book(100))
    lease = orders.claim()
    assert lease is not None
    with pytest.raises(LeaseLost):
        store.complete(lease, Handler())  # the default queue has no order-1


def test_work_takes_only_its_own_queue(orders: Store, store: Store) -> None:
    orders.send("order-1", book(100))
    store.send("E0001", book(200))
    assert work(orders, Handler()).done == 1
    assert store.message("E0001").state == "ready"


# ------------------------------------------------------------ the command line

def test_the_command_line_creates_lists_and_works_a_queue(tmp_path: Path, store: Store) -> None:
    target = store.target
    # a queue of your own needs --handler: here the ledger's, from a module of the test's
    (tmp_path / "myledger.py").write_text("from queue_core import Handler\nhandle = Handler()\n")
    (tmp_path / "orders.jsonl").write_text(
        '{"event_id": "order-41", "payload": {"category": "book", "amount_cents": 100}}\n'
        '{"event_id": "order-42", "payload": {"category": "pen", "amount_cents": 200}}\n')
    refused = cli(tmp_path, target, "--queue", "orders", "enqueue", "orders.jsonl")
    assert refused.returncode == 2 and "unknown_queue" in refused.stderr and "create" in refused.stderr
    created = cli(tmp_path, target, "create", "orders", "--id-pattern", "order-[0-9]+", "--max-attempts", "5")
    assert created.returncode == 0, created.stderr
    assert json.loads(created.stdout) == {"created": True, "name": "orders", "id_pattern": "order-[0-9]+",
                                          "max_attempts": 5, "lease_seconds": 30, "max_payload_bytes": 10000,
                                          "backoff_base_seconds": 1, "backoff_max_seconds": 3600,
                                          "backoff_jitter": NEW_QUEUE_BACKOFF_JITTER}
    again = cli(tmp_path, target, "create", "orders", "--id-pattern", "order-[0-9]+", "--max-attempts", "5")
    assert again.returncode == 0 and json.loads(again.stdout)["created"] is False
    conflict = cli(tmp_path, target, "create", "orders", "--max-attempts", "4")
    assert conflict.returncode == 2 and "queue_conflict" in conflict.stderr
    for bad, code in (("Bad;Name", "usage"), ("x", "invalid_id_pattern")):
        extra = ("--id-pattern", "a*") if bad == "x" else ()
        result = cli(tmp_path, target, "create", bad, *extra)
        assert result.returncode == 2 and code in result.stderr and "Traceback" not in result.stderr
    default = cli(tmp_path, target, "enqueue", "orders.jsonl")  # the default queue's rule refuses them
    assert default.returncode == 2 and "queue-core create NAME --id-pattern" in default.stderr
    enqueued = cli(tmp_path, target, "--queue", "orders", "enqueue", "--delay", "5", "orders.jsonl")
    assert json.loads(enqueued.stdout) == {"accepted": 2, "duplicates": 0}
    mine = ("--handler", "myledger:handle")
    assert json.loads(cli(tmp_path, target, "--queue", "orders", "work", *mine).stdout)["claimed"] == 0  # delayed
    worked = cli(tmp_path, target, "--queue", "orders", "work", *mine, now=1005)
    assert json.loads(worked.stdout)["done"] == 2
    listed = json.loads(cli(tmp_path, target, "--queue", "orders", "list", "--json").stdout)
    assert [(m["event_id"], m["state"]) for m in listed] == [("order-41", "done"), ("order-42", "done")]
    queues = json.loads(cli(tmp_path, target, "queues", "--json").stdout)
    assert [(q["name"], q["messages"]["done"]) for q in queues] == [("default", 0), ("orders", 2)]
    table = cli(tmp_path, target, "queues").stdout.splitlines()
    assert table[0].split()[:2] == ["queue", "id"] and table[2].split()[:2] == ["orders", "order-[0-9]+"]
    status = json.loads(cli(tmp_path, target, "--queue", "orders", "status", "--json").stdout)
    assert status["effects"]["total_cents"] == 300  # the ledger's money of this queue
    assert 'queue="orders"' in cli(tmp_path, target, "--queue", "orders", "metrics").stdout
    for command in (("work", *mine), ("status",), ("list",), ("dead",), ("metrics",)):
        unknown = cli(tmp_path, target, "--queue", "ordrs", *command)
        assert unknown.returncode == 2 and "unknown_queue" in unknown.stderr and "ordrs" in unknown.stderr
    for command in (("purge", "--state", "dead", "--yes"), ("redrive", "order-1")):
        unknown = cli(tmp_path, target, "--queue", "ordrs", *command)
        assert unknown.returncode == 2 and "unknown_queue" in unknown.stderr


def test_an_id_of_a_queue_of_yours_is_at_most_200_characters(store: Store, clock: ModelClock) -> None:
    # The pages say an id of a queue of yours is up to MAX_EVENT_ID_CHARS characters,
    # whatever its pattern allows, and that the schema holds it to that length too.
    from queue_core.queues import MAX_EVENT_ID_CHARS

    store.create_queue("long", id_pattern="[a-z]+")
    with Store(store.target, clock=clock, queue="long") as long:
        assert long.send("a" * MAX_EVENT_ID_CHARS, book(100)).accepted == 1
        with pytest.raises(BatchRejected) as refused:
            long.send("b" * (MAX_EVENT_ID_CHARS + 1), book(100))
        assert refused.value.code == "invalid_event_id"
        assert f"the limit is {MAX_EVENT_ID_CHARS}" in refused.value.message
        assert [len(m.event_id) for m in long.messages()] == [MAX_EVENT_ID_CHARS]
        # the schema's own CHECK, for a client that bypasses the store
        with pytest.raises(StorageError) as checked:
            long.write(lambda tx: tx.execute(
                "UPDATE messages SET event_id = ? WHERE queue = 'long'", ("c" * (MAX_EVENT_ID_CHARS + 1),)))
        assert checked.value.code == "constraint_violation"
    assert MAX_EVENT_ID_CHARS == 200
