"""Real OS processes: competing clients, two consumers, crashes inside a transaction, a held lock."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from queue_core import Handler, ModelClock, Outcome, StorageError, Store, ledger
from queue_core.app.crash_child import CRASH_EXIT_CODE, run_crashing_completion

from .support import batch, line

CLIENTS = Path(__file__).with_name("clients.py")


def start_clients(command: str, db: Path, start: Path, count: int, now: int = 1000) -> list[subprocess.Popen]:
    return [
        subprocess.Popen([sys.executable, str(CLIENTS), command, str(db), str(now), str(start)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(count)
    ]


def finish(processes: list[subprocess.Popen]) -> list[object]:
    results = []
    for process in processes:
        out, err = process.communicate(timeout=120)
        assert process.returncode == 0, err
        assert "Traceback" not in err
        results.append(json.loads(out))
    return results


def integrity(db: Path) -> str:
    conn = sqlite3.connect(db)
    try:
        return conn.execute("PRAGMA integrity_check").fetchone()[0]
    finally:
        conn.close()


def test_two_competing_clients_get_one_lease(tmp_path: Path) -> None:
    db, start = tmp_path / "q.sqlite3", tmp_path / "go"
    Store(db, clock=ModelClock(1000)).enqueue(line("E0001"))
    clients = start_clients("claim", db, start, 2)
    start.touch()
    leases = finish(clients)
    won = [lease for lease in leases if lease is not None]
    assert len(won) == 1, leases
    assert won[0]["event_id"] == "E0001" and won[0]["generation"] == 1
    row = Store(db, create=False).message("E0001")
    assert (row.state, row.attempts, row.generation) == ("leased", 1, 1)


def test_twenty_events_two_consumers_each_effect_once(tmp_path: Path) -> None:
    db, start = tmp_path / "q.sqlite3", tmp_path / "go"
    store = Store(db, clock=ModelClock(1000))
    ledger.install(store)
    store.enqueue(batch(*(line(f"E{n:04d}", "pen", n) for n in range(1, 21))))
    clients = start_clients("work", db, start, 2)
    start.touch()
    summaries = finish(clients)
    assert sum(s["done"] for s in summaries) == 20
    assert sum(s["claimed"] for s in summaries) == 20
    assert all(s["lease_lost"] == 0 for s in summaries)
    effects = ledger.effects(store)
    assert [e[0] for e in effects] == [f"E{n:04d}" for n in range(1, 21)]
    assert ledger.report(store).total_cents == sum(range(1, 21))
    # Nobody claimed a message twice: every generation is still 1.
    assert {(m.state, m.generation) for m in store.messages()} == {("done", 1)}


@pytest.mark.parametrize(
    "how, expected_status", [("exit", CRASH_EXIT_CODE), ("sigkill", -signal.SIGKILL)]
)
def test_crash_between_insert_and_commit_loses_nothing_and_doubles_nothing(
    tmp_path: Path, how: str, expected_status: int
) -> None:
    db = tmp_path / "q.sqlite3"
    clock = ModelClock(1000)
    store = Store(db, clock=clock)
    ledger.install(store)
    store.enqueue(line("E0003", "book", 5000))
    lease = store.claim(lease_seconds=2)
    status = run_crashing_completion(
        db, lease, now=1000, point="complete.after_effect", how=how
    )
    assert status == expected_status
    assert integrity(db) == "ok"
    # The uncommitted INSERT is gone; the committed claim is still there.
    assert ledger.effects(store) == []
    row = store.message("E0003")
    assert (row.state, row.generation, row.lease_until) == ("leased", 1, 1002)
    clock.set(1002)
    again = store.claim(lease_seconds=2)
    assert (again.event_id, again.generation, again.attempt) == ("E0003", 2, 2)
    assert store.complete(again, Handler()).outcome is Outcome.DONE
    assert ledger.effects(store) == [("E0003", "book", 5000)]


@pytest.mark.parametrize("point", ["complete.after_recheck", "complete.after_update", "complete.before_commit"])
def test_crash_anywhere_before_commit_rolls_back(tmp_path: Path, point: str) -> None:
    db = tmp_path / "q.sqlite3"
    store = Store(db, clock=ModelClock(1000))
    ledger.install(store)
    store.enqueue(line("E0001"))
    lease = store.claim(lease_seconds=2)
    assert run_crashing_completion(db, lease, now=1000, point=point) == CRASH_EXIT_CODE
    assert ledger.effects(store) == []
    assert store.message("E0001").state == "leased"


def test_crash_just_after_commit_keeps_the_result(tmp_path: Path) -> None:
    db = tmp_path / "q.sqlite3"
    clock = ModelClock(1000)
    store = Store(db, clock=clock)
    ledger.install(store)
    store.enqueue(line("E0001"))
    lease = store.claim(lease_seconds=2)
    assert run_crashing_completion(db, lease, now=1000, point="complete.after_commit") == CRASH_EXIT_CODE
    assert ledger.effects(store) == [("E0001", "book", 100)]
    assert store.message("E0001").state == "done"
    clock.set(2000)
    assert store.claim() is None  # nothing to redo, nothing doubled


def test_a_held_write_lock_is_waited_out(tmp_path: Path) -> None:
    db = tmp_path / "q.sqlite3"
    store = Store(db, clock=ModelClock(1000))
    store.enqueue(line("E0001"))
    holder = subprocess.Popen([sys.executable, str(CLIENTS), "hold", str(db), "0.5"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        lease = store.claim()  # blocks until the holder commits, then sees the row
        assert lease is not None and lease.event_id == "E0001"
    finally:
        holder.wait(timeout=30)
    assert holder.returncode == 0


def test_a_lock_held_past_the_retry_deadline_is_a_clean_error(tmp_path: Path) -> None:
    db = tmp_path / "q.sqlite3"
    Store(db, clock=ModelClock(1000)).enqueue(line("E0001"))
    impatient = Store(db, clock=ModelClock(1000), busy_timeout_ms=50, busy_retry_seconds=0.2)
    holder = subprocess.Popen([sys.executable, str(CLIENTS), "hold", str(db), "30"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(StorageError) as info:
            impatient.claim()
        assert info.value.code == "database_busy"
    finally:
        holder.kill()
        holder.wait(timeout=30)
    assert impatient.message("E0001").state == "ready"  # nothing half-written
