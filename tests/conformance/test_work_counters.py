"""Counters of work done (processed, retried, dead, expired leases) and one scrape for every queue.

The counters are read from the database (schema version 8's triggers keep
what rows that left no longer show), so they survive a restart, a purge and
a redrive. Runs on both engines (tests/conformance/conftest.py); only the
clock is modelled.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from queue_core import Handler, Message, ModelClock, Outcome, Store, TemporaryFailure, Tx
from queue_core.prometheus import exposition_all
from queue_core.values import WorkCounters

from ..support import batch, line

QUEUE_CORE = [sys.executable, "-m", "queue_core"]
SAMPLE = re.compile(r'^[a-z_]+\{queue="[a-z0-9_-]+"(,[a-z_]+="[^"]*")*\} (NaN|-?[0-9.]+)$')


def flaky(tx: Tx, message: Message) -> None:
    raise TemporaryFailure("downstream_unavailable", "try later")


def counters(store: Store) -> tuple[int, int, int, int]:
    c = store.metrics().counters
    return c.processed, c.retried, c.dead, c.expired_leases


def test_each_outcome_is_counted_once_and_a_release_is_no_retry(store: Store, clock: ModelClock) -> None:
    store.enqueue(batch(line("E0001"), line("E0002", "toy"), line("E0003"), line("E0004")))
    assert counters(store) == (0, 0, 0, 0)
    assert store.complete(store.claim(), Handler()).outcome is Outcome.DONE  # E0001
    assert store.complete(store.claim(), Handler()).outcome is Outcome.DEAD  # E0002, toy
    assert store.complete(store.claim(), flaky).outcome is Outcome.RETRY  # E0003
    released = store.claim()  # E0004, given back: its attempt returns, no retry
    assert released is not None and released.event_id == "E0004"
    store.release(released)
    assert counters(store) == (1, 1, 1, 0)
    taken = store.claim(lease_seconds=2)  # E0004 again
    assert taken is not None and taken.event_id == "E0004"
    clock.advance(2)  # its lease runs out; the next claim takes it over
    again = store.claim(lease_seconds=60)
    assert again is not None and again.event_id == "E0004"
    assert store.complete(again, Handler()).outcome is Outcome.DONE
    assert counters(store) == (2, 1, 1, 1)
    assert store.metrics().expired_leases == 1


def test_the_counters_survive_a_restart_a_redrive_and_a_purge(store: Store, clock: ModelClock) -> None:
    store.enqueue(batch(line("E0001", "toy"), line("E0002", "toy"), line("E0003")))
    for _ in range(3):
        store.complete(store.claim(), flaky)  # a retry each
    clock.advance(60)  # past every backoff
    store.complete(store.claim(), Handler())  # E0001 toy: dead
    store.complete(store.claim(), Handler())  # E0002 toy: dead
    store.complete(store.claim(), Handler())  # E0003 done
    before = counters(store)
    assert before == (1, 3, 2, 0)
    with Store(store.target, clock=clock) as reopened:  # a restart: a new connection reads them
        assert counters(reopened) == before
    assert store.redrive_all() == ["E0001", "E0002"]
    assert counters(store) == before  # the deaths stay counted
    assert store.purge("ready") == 2  # the rows go, with their retries
    assert counters(store) == before
    store.enqueue(line("E0001", "toy"))  # the same id again is a new message
    store.complete(store.claim(), Handler())
    assert counters(store) == (1, 3, 3, 0)
    assert store.purge("dead") == 1
    assert counters(store) == (1, 3, 3, 0)


def test_metrics_all_reads_every_queue_in_one_snapshot(store: Store, clock: ModelClock) -> None:
    store.create_queue("orders", id_pattern="order-[0-9]+")
    with Store(store.target, clock=clock, queue="orders") as orders:
        orders.enqueue(batch(line("order-1"), line("order-2")))
        orders.complete(orders.claim(), Handler())
        orders.complete(orders.claim(), flaky)
    store.enqueue(line("E0001", "toy"))
    store.complete(store.claim(), Handler())
    every = store.metrics_all()
    assert list(every) == ["default", "orders"]
    assert every["default"].counters == WorkCounters(processed=0, retried=0, dead=1, expired_leases=0)
    assert every["orders"].counters == WorkCounters(processed=1, retried=1, dead=0, expired_leases=0)
    assert dict(every["orders"].messages) == {"ready": 1, "leased": 0, "done": 1, "dead": 0}
    assert every["default"] == store.metrics()  # the same figures as the queue's own read


def test_the_exposition_of_every_queue_has_each_family_once(store: Store, clock: ModelClock) -> None:
    store.create_queue("orders", id_pattern="order-[0-9]+")
    store.enqueue(line("E0001"))
    store.complete(store.claim(), Handler())
    text = exposition_all(store.metrics_all())
    types = [row.split(" ")[2:] for row in text.splitlines() if row.startswith("# TYPE ")]
    names = [name for name, _ in types]
    assert len(names) == len(set(names))  # one HELP and TYPE per family, the queues share it
    assert sum(row.startswith("# HELP ") for row in text.splitlines()) == len(names)
    for name, kind in types:  # counters end in _total, and only counters
        assert (kind == "counter") == name.endswith("_total"), name
    assert {"queue_core_messages_processed_total", "queue_core_messages_retried_total",
            "queue_core_messages_dead_total", "queue_core_expired_leases_total"} <= set(names)
    for row in text.splitlines():
        assert row.startswith("# ") or SAMPLE.match(row), row  # a queue label on every sample
    assert 'queue_core_messages_processed_total{queue="default"} 1' in text
    assert 'queue_core_messages_processed_total{queue="orders"} 0' in text


@pytest.fixture
def target(request: pytest.FixtureRequest, engine: str, tmp_path: Path) -> str:
    """What ``--db`` names: a file in tmp_path, or a fresh PostgreSQL database."""
    if engine == "postgresql":
        return str(request.getfixturevalue("postgres_url"))
    return str(tmp_path / "queue.sqlite3")


def cli(target: str, *args: str, stdin: str | None = None,
        cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*QUEUE_CORE, "--db", target, "--now", "1000", *args], capture_output=True,
                          text=True, input=stdin, timeout=120, cwd=cwd)


def test_metrics_all_scrapes_every_queue_from_the_command_line(target: str, tmp_path: Path) -> None:
    # a queue of your own needs --handler: here the ledger's, from a module of the test's
    (tmp_path / "myledger.py").write_text("from queue_core import Handler\nhandle = Handler()\n")
    assert cli(target, "create", "orders", "--id-pattern", "order-[0-9]+").returncode == 0
    assert cli(target, "enqueue", "-", stdin=batch(line("E0001"), line("E0002", "toy"))).returncode == 0
    assert cli(target, "--queue", "orders", "enqueue", "-", stdin=line("order-1") + "\n").returncode == 0
    assert cli(target, "work").returncode == 0
    assert cli(target, "--queue", "orders", "work", "--handler", "myledger:handle", cwd=tmp_path).returncode == 0
    scraped = cli(target, "metrics", "--all")
    assert scraped.returncode == 0, scraped.stderr
    values = {name: float(value) for name, value in
              (row.rsplit(" ", 1) for row in scraped.stdout.splitlines() if not row.startswith("#"))}
    assert values['queue_core_messages_processed_total{queue="default"}'] == 1
    assert values['queue_core_messages_dead_total{queue="default"}'] == 1
    assert values['queue_core_messages_processed_total{queue="orders"}'] == 1
    assert values['queue_core_messages{queue="orders",state="done"}'] == 1
    one = cli(target, "metrics").stdout  # without --all: the default queue alone, as before
    assert 'queue="orders"' not in one and 'queue_core_messages_processed_total{queue="default"} 1' in one
    refused = cli(target, "--queue", "orders", "metrics", "--all")
    assert refused.returncode == 2 and "takes no --queue" in refused.stderr and "Traceback" not in refused.stderr
