"""Connections live as long as the store, one per thread; writers take turns (issue 9).

A ``Store`` keeps one connection per thread, opened on first use and closed
by ``close()`` (or by leaving ``with Store(...)``); a call nested inside this
thread's open transaction gets a temporary connection of its own; a forked
child opens its own. Every write first takes its *turn* (``queue_core/engines/sqlite_turn.py``):
an ``flock`` on ``<db>-lock`` across processes, a re-entrant lock with a
timeout between threads. Real SQLite files in ``tmp_path``, real threads and
real processes; the clock is a ModelClock. Nothing here measures speed: where
an order of events matters, the test waits for evidence (a line from a child,
a waiter in ``/proc/locks``), never for a duration.
"""

from __future__ import annotations

import faulthandler
import json
import os
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from queue_core import Message, ModelClock, Outcome, StorageError, Store, Tx, parse_batch, work
from queue_core.engines import sqlite_turn as turn
from queue_core.engines import sqlite as sqlite_engine

from .support import batch, line

ROOT = Path(__file__).resolve().parent.parent
DONE_TABLE = "CREATE TABLE handled (event_id TEXT PRIMARY KEY, thread TEXT NOT NULL, conn INTEGER NOT NULL) STRICT"


# ----------------------------------------------------------------- helpers

@pytest.fixture(autouse=True)
def no_hang() -> Iterator[None]:
    """A test that hangs (the failure these tests look for) dumps its stacks and fails the run."""
    faulthandler.dump_traceback_later(120, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


@pytest.fixture
def connects(monkeypatch: pytest.MonkeyPatch) -> list[sqlite3.Connection]:
    """Every connection the store makes, in order (``sqlite_engine.connect`` is the one place it makes them)."""
    made: list[sqlite3.Connection] = []
    real_connect = sqlite_engine.connect

    def counting(path: Path, **options: Any) -> sqlite3.Connection:
        conn = real_connect(path, **options)
        made.append(conn)
        return conn

    monkeypatch.setattr(sqlite_engine, "connect", counting)
    return made


def handled_by_thread(tx: Tx, message: Message) -> None:
    """A handler whose effect records which thread, on which connection, completed the message."""
    tx.execute("INSERT INTO handled VALUES (?, ?, ?)", (message.event_id, threading.current_thread().name,
                                                       id(tx.conn)))


def new_queue(db: Path, clock: ModelClock, count: int = 0, **options: Any) -> Store:
    store = Store(db, clock=clock, **options)
    with store.transaction() as tx:
        tx.execute(DONE_TABLE)
    if count:
        store.enqueue(batch(*(line(f"E{n:04d}") for n in range(1, count + 1))))
    return store


def is_closed(conn: sqlite3.Connection) -> bool:
    try:
        conn.execute("SELECT 1")
    except sqlite3.ProgrammingError:
        return True
    return False


def wal(db: Path) -> Path:
    return db.with_name(db.name + "-wal")


def in_thread(body: Callable[[], Any]) -> Any:
    """Run ``body`` in a new thread; its result, or its exception raised here. A hang fails the test."""
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append(("value", body()))
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            outcome.append(("error", exc))

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(timeout=60)
    assert not thread.is_alive(), "the call did not return: it hangs"
    kind, value = outcome[0]
    if kind == "error":
        raise value
    return value


# ------------------------------------------------------ one connection per thread

def test_one_connection_per_thread_is_kept_across_operations(db: Path, clock: ModelClock,
                                                             connects: list[sqlite3.Connection]) -> None:
    store = new_queue(db, clock, count=3)
    assert len(connects) == 1  # created the file on it, and kept it
    kept = connects[0]
    seen = set()
    for _ in range(3):
        lease = store.claim()
        assert store.complete(lease, handled_by_thread).outcome is Outcome.DONE
        with store.transaction() as tx:
            seen.add(id(tx.conn))
        seen.add(store.read(lambda view: id(view.conn)))
        store.status()
        store.messages()
    assert seen == {id(kept)} and not is_closed(kept)
    assert connects == [kept]  # eleven transactions and reads later, still the one connection
    # The handler's effect was written on that same connection, inside complete's transaction.
    assert {conn for (conn,) in store.read(lambda v: v.execute("SELECT conn FROM handled").fetchall())} == {id(kept)}
    store.close()


def test_close_closes_every_threads_connection_and_refuses_later_use(db: Path, clock: ModelClock,
                                                                     connects: list[sqlite3.Connection]) -> None:
    store = new_queue(db, clock, count=2)
    mine = store.read(lambda view: view.conn)
    theirs = [in_thread(lambda: store.read(lambda view: view.conn)) for _ in range(2)]
    assert len({id(mine), *map(id, theirs)}) == 3 and connects == [mine, *theirs]
    assert wal(db).exists()  # open connections keep the WAL
    store.close()
    assert store.closed
    assert all(is_closed(conn) for conn in [mine, *theirs])  # the threads' connections too
    assert not wal(db).exists()  # the last connection closed: SQLite checkpointed and removed the WAL
    uses: dict[str, Callable[[], Any]] = {
        "enqueue": lambda: store.enqueue(line("E0009")),
        "claim": lambda: store.claim(),
        "status": lambda: store.status(),
        "message": lambda: store.message("E0001"),
        "transaction": lambda: store.transaction().__enter__(),
        "snapshot": lambda: store.snapshot().__enter__(),
        "claim_many": lambda: store.claim_many(2),
    }
    for name, use in uses.items():
        for where in ("this thread", "another thread"):
            with pytest.raises(StorageError) as info:
                use() if where == "this thread" else in_thread(use)
            assert info.value.code == "store_closed", (name, where, info.value.code)
            assert str(db) in info.value.message
    assert len(connects) == 3  # a closed store opens nothing
    store.close()  # closing twice is harmless
    with Store(db, clock=clock) as again:  # the file itself is fine
        assert again.status().count("ready") == 2


def test_leaving_with_store_closes_it_even_on_an_error(db: Path, clock: ModelClock) -> None:
    with new_queue(db, clock, count=1) as store:
        kept = store.read(lambda view: view.conn)
    assert store.closed and is_closed(kept) and not wal(db).exists()
    with pytest.raises(StorageError) as info:
        store.status()
    assert info.value.code == "store_closed"
    with pytest.raises(ZeroDivisionError), Store(db, clock=clock) as failing:
        kept = failing.read(lambda view: view.conn)
        1 / 0
    assert failing.closed and is_closed(kept) and not wal(db).exists()


def test_a_call_nested_in_a_transaction_sees_committed_state_and_leaves_the_outer_alone(
    db: Path, clock: ModelClock, connects: list[sqlite3.Connection]
) -> None:
    store = new_queue(db, clock, count=1, busy_timeout_ms=50, busy_retry_seconds=0.2)
    kept = connects[0]
    with store.transaction() as tx:
        assert tx.conn is kept
        store.enqueue_tx(tx, parse_batch(line("E0002").encode()))
        lease = store.claim_tx(tx)
        assert lease is not None and lease.event_id == "E0001"
        # Nested reads run on a temporary connection and see only what is committed.
        assert store.status().messages == {"ready": 1, "leased": 0, "done": 0, "dead": 0}
        assert store.message("E0001").state == "ready"
        assert [m.event_id for m in store.messages()] == ["E0001"]
        nested = connects[1:]
        assert len(nested) == 3 and all(conn is not kept and is_closed(conn) for conn in nested)
        # A nested *write* would wait for this very transaction: it is refused as busy, not a hang.
        with pytest.raises(StorageError) as info:
            store.enqueue(line("E0003"))
        assert info.value.code == "database_busy"
        # The outer transaction is undisturbed: still open, on the kept connection, with its writes.
        assert tx.conn is kept and kept.in_transaction
        assert tx.execute("SELECT event_id, state FROM messages ORDER BY event_id").fetchall() == [
            ("E0001", "leased"), ("E0002", "ready")]
        assert store.complete_tx(tx, lease).outcome is Outcome.DONE
    assert {m.event_id: m.state for m in store.messages()} == {"E0001": "done", "E0002": "ready"}
    assert store.read(lambda view: view.conn) is kept  # this thread's connection is still the kept one
    store.close()


def test_two_threads_each_use_their_own_connection_and_both_complete_messages(
    db: Path, clock: ModelClock, connects: list[sqlite3.Connection]
) -> None:
    store = new_queue(db, clock, count=40)
    start = threading.Barrier(2)
    used: dict[str, set[int]] = {}
    errors: list[BaseException] = []

    def worker() -> None:
        name = threading.current_thread().name
        try:
            start.wait()
            for _ in range(20):  # 20 claims each: both threads really complete messages
                lease = store.claim()
                assert lease is not None
                with store.transaction() as tx:
                    used.setdefault(name, set()).add(id(tx.conn))
                assert store.complete(lease, handled_by_thread).outcome is Outcome.DONE
        except BaseException as exc:  # noqa: BLE001 - reported by the test thread
            errors.append(exc)

    threads = [threading.Thread(target=worker, name=f"worker-{n}") for n in (1, 2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
        assert not thread.is_alive()
    assert errors == []
    # One connection per thread, kept for all its work, and not the main thread's.
    assert all(len(ids) == 1 for ids in used.values()) and len(used) == 2
    ids = {name: next(iter(found)) for name, found in used.items()}
    assert len(set(ids.values())) == 2 and id(connects[0]) not in ids.values()
    assert len(connects) == 3
    # Every message done once, its effect written by the thread that completed it, on that thread's connection.
    assert store.status().messages == {"ready": 0, "leased": 0, "done": 40, "dead": 0}
    rows = store.read(lambda view: view.execute("SELECT event_id, thread, conn FROM handled").fetchall())
    assert sorted(event_id for event_id, _, _ in rows) == [f"E{n:04d}" for n in range(1, 41)]
    assert all(conn == ids[thread] for _, thread, conn in rows)
    assert sorted(sum(thread == name for _, thread, _ in rows) for name in ids) == [20, 20]
    store.close()
    assert all(is_closed(conn) for conn in connects)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_opens_its_own_connection_and_leaves_the_parents_open(db: Path, clock: ModelClock) -> None:
    store = new_queue(db, clock, count=1)
    parent_conn = store.read(lambda view: view.conn)
    wal_before = os.stat(wal(db)).st_ino
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report through the pipe, never return into pytest
        try:
            child_conn = store.read(lambda view: view.conn)
            store.enqueue(line("E0002"))
            lease = store.claim()
            outcome = store.complete(lease, handled_by_thread).outcome
            report = {"own_connection": child_conn is not parent_conn, "claimed": lease.event_id,
                      "outcome": outcome.value}
            store.close()  # closes the child's connections only
            report["closed_parents"] = is_closed(parent_conn)
            os.write(write_end, json.dumps(report).encode())
        except BaseException as exc:  # noqa: BLE001
            os.write(write_end, json.dumps({"error": repr(exc)}).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        report = json.loads(pipe.read() or b"{}")
    assert os.waitpid(pid, 0)[1] == 0
    assert report == {"own_connection": True, "claimed": "E0001", "outcome": "done", "closed_parents": False}
    # The parent's store still works, on the same connection, and sees the child's commits.
    assert not store.closed and not is_closed(parent_conn)
    assert store.read(lambda view: view.conn) is parent_conn
    assert os.stat(wal(db)).st_ino == wal_before  # the child's close did not checkpoint away our WAL
    assert {m.event_id: m.state for m in store.messages()} == {"E0001": "done", "E0002": "ready"}
    lease = store.claim()
    assert lease is not None and lease.event_id == "E0002"
    assert store.complete(lease, handled_by_thread).outcome is Outcome.DONE
    assert store.read(lambda view: view.execute("PRAGMA integrity_check").fetchone()[0]) == "ok"
    store.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_child_forked_inside_a_turn_neither_keeps_it_nor_closes_a_file_of_its_own(
    db: Path, clock: ModelClock
) -> None:
    store = new_queue(db, clock, count=1)
    report_read, report_write = os.pipe()
    go_read, go_write = os.pipe()
    with store.writer_turn():
        pid = os.fork()
        if pid == 0:  # the child, still inside the with-block that its parent entered
            try:
                # The child let go of its copy of the turn's lock file at the fork; the
                # number is free, and the next file the child opens may well get it.
                mine = os.open(os.devnull, os.O_RDONLY)
                os.write(report_write, b"inside;")
                os.read(go_read, 1)  # stay inside while the parent checks that the turn is free
            except BaseException:  # noqa: BLE001
                os._exit(3)
    if pid == 0:  # the child, out of the block
        try:
            os.fstat(mine)  # leaving the block must not have closed it
            os.write(report_write, b"mine is open")
        except OSError as exc:
            os.write(report_write, repr(exc).encode())
        finally:
            os._exit(0)
    os.close(report_write)
    os.close(go_read)
    try:
        assert os.read(report_read, 7) == b"inside;"
        # The parent gave its turn back, and the child (alive, inside the block) holds
        # nothing of it: another process gets the turn at once.
        done = subprocess.run([sys.executable, "-c", HOLD_TURN, str(db)], cwd=ROOT, input="\n",
                              capture_output=True, text=True, timeout=60)
        assert done.stdout.split() == ["held", "released"], done.stderr
    finally:
        os.write(go_write, b"x")
        os.close(go_write)
        with os.fdopen(report_read, "rb") as pipe:
            said = pipe.read()
        assert os.waitpid(pid, 0)[1] == 0
    assert said == b"mine is open"
    store.close()


def test_a_disk_error_discards_the_connection_and_the_store_works_again(
    db: Path, clock: ModelClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    new_queue(db, clock, count=1).close()  # everything in the main file: its size is the database's
    cap = {"pages": len(db.read_bytes()) // 4096}
    made: list[sqlite3.Connection] = []
    real_connect = sqlite_engine.connect

    def capped(path: Path, **options: Any) -> sqlite3.Connection:
        # PRAGMA max_page_count is a property of one connection: while the cap is
        # on, every new connection finds the database "full" at its present size.
        conn = real_connect(path, **options)
        if cap["pages"]:
            conn.execute(f"PRAGMA max_page_count = {cap['pages']}")
        made.append(conn)
        return conn

    monkeypatch.setattr(sqlite_engine, "connect", capped)
    big = batch(*(line(f"E{n:04d}", pad="p" * 2000) for n in range(100, 140)))
    with Store(db, clock=clock, create=False) as store:
        assert store.claim() is not None  # no new page needed: works on the capped connection
        with pytest.raises(StorageError) as info:
            store.enqueue(big)
        assert info.value.code == "disk_full"
        assert len(made) == 1 and is_closed(made[0])  # that connection was discarded
        cap["pages"] = 0  # space again (for the connections made from now on)
        assert store.enqueue(big).accepted == 40  # a capped connection kept would still be full
        assert len(made) == 2 and not is_closed(made[1])
        assert store.status().messages == {"ready": 40, "leased": 1, "done": 0, "dead": 0}


def test_a_busy_error_keeps_the_connection(db: Path, clock: ModelClock) -> None:
    holder = new_queue(db, clock, count=1)
    other = Store(db, clock=clock, busy_timeout_ms=50, busy_retry_seconds=0.2)
    kept = other.read(lambda view: view.conn)
    with holder.transaction():
        with pytest.raises(StorageError) as info:
            other.claim()
        assert info.value.code == "database_busy"
    assert other.read(lambda view: view.conn) is kept and not is_closed(kept)
    assert other.claim() is not None
    holder.close()
    other.close()


# --------------------------------------------------------------- writer turns

def test_a_second_store_in_the_same_thread_shares_the_turn_and_a_held_write_lock_is_busy(
    db: Path, clock: ModelClock
) -> None:
    first = new_queue(db, clock, count=1)
    second = Store(db, clock=clock, busy_timeout_ms=50, busy_retry_seconds=0.2)
    # The turn is this thread's: another store of the same file, in the same thread, writes within it.
    with first.writer_turn():
        assert second.enqueue(line("E0002")).accepted == 1
        assert first.claim() is not None
    # While the first store's write transaction is open, the second one's write cannot get in:
    # after its busy_retry_seconds it is refused as busy instead of waiting for itself forever.
    with first.transaction() as tx:
        with pytest.raises(StorageError) as info:
            second.enqueue(line("E0003"))
        assert info.value.code == "database_busy"
        tx.execute("UPDATE messages SET available_at = available_at WHERE event_id = 'E0002'")
    assert [m.event_id for m in second.messages()] == ["E0001", "E0002"]  # E0003 was not written
    first.close()
    second.close()


def test_another_thread_waits_for_the_turn_and_gets_busy_after_its_retry_time(db: Path, clock: ModelClock) -> None:
    first = new_queue(db, clock, count=1, busy_timeout_ms=50, busy_retry_seconds=0.2)
    second = Store(db, clock=clock, busy_timeout_ms=50, busy_retry_seconds=0.2)
    with first.writer_turn():
        for store in (first, second):  # the turn belongs to the thread, whichever store holds it
            with pytest.raises(StorageError) as info:
                in_thread(lambda: store.enqueue(line("E0002")))
            assert info.value.code == "database_busy"
            assert "another thread of this process holds the write turn" in info.value.message
        # Reads take no turn.
        assert in_thread(lambda: second.status().messages) == {"ready": 1, "leased": 0, "done": 0, "dead": 0}
    assert in_thread(lambda: second.enqueue(line("E0002"))).accepted == 1
    assert [m.event_id for m in first.messages()] == ["E0001", "E0002"]
    first.close()
    second.close()


HOLD_TURN = """
import sys
from queue_core import Store
store = Store(sys.argv[1])
with store.writer_turn():
    print("held", flush=True)
    sys.stdin.readline()
print("released", flush=True)
store.close()
"""


@pytest.fixture
def turn_holder() -> Iterator[Callable[[Path], subprocess.Popen]]:
    """A real process that takes ``Store(db).writer_turn()``, says "held", and gives it back on a line of stdin."""
    children: list[subprocess.Popen] = []

    def hold(db: Path) -> subprocess.Popen:
        child = subprocess.Popen([sys.executable, "-c", HOLD_TURN, str(db)], cwd=ROOT, stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True)
        children.append(child)
        assert child.stdout.readline().strip() == "held"
        return child

    yield hold
    for child in children:
        if child.poll() is None:
            child.stdin.close()
            child.wait(timeout=30)


def release(child: subprocess.Popen) -> None:
    child.stdin.write("\n")
    child.stdin.flush()
    assert child.stdout.readline().strip() == "released"
    assert child.wait(timeout=30) == 0


def queued_for(lock_file: Path, pid: int) -> bool:
    """Whether process ``pid`` waits in the kernel for the flock on ``lock_file`` (a ``->`` line of /proc/locks)."""
    inode = lock_file.stat().st_ino
    with open("/proc/locks", encoding="ascii") as locks:
        for entry in locks:
            fields = entry.split()
            if "->" in fields and "FLOCK" in fields:
                rest = fields[fields.index("->") + 1:]
                if rest[3] == str(pid) and rest[4].endswith(f":{inode}"):
                    return True
    return False


@pytest.mark.skipif(not Path("/proc/locks").exists(), reason="needs /proc/locks to see a waiter")
def test_a_claim_waits_for_the_turn_another_process_holds(db: Path, clock: ModelClock, turn_holder) -> None:
    store = new_queue(db, clock, count=1)
    store.close()
    child = turn_holder(db)
    events: list[str] = []
    claimed: list[Any] = []

    def claim() -> None:
        with Store(db, clock=clock) as parent:  # the default retry time: it waits
            claimed.append(parent.claim())
        events.append("claimed")

    thread = threading.Thread(target=claim)
    thread.start()
    lock_file = db.with_name(db.name + "-lock")
    # Evidence, not a duration: our claim shows up as a waiter for the child's lock.
    gives_up = time.monotonic() + 60  # only so that a broken test ends
    while not queued_for(lock_file, os.getpid()):
        assert thread.is_alive() and events == [], "the claim did not wait for the turn"
        assert time.monotonic() < gives_up, "the claim never queued for the turn"
        time.sleep(0.01)
    assert events == [] and thread.is_alive()
    events.append("released")
    release(child)
    thread.join(timeout=60)
    assert not thread.is_alive()
    assert events == ["released", "claimed"]
    assert claimed[0] is not None and claimed[0].event_id == "E0001"


def test_a_turn_held_by_another_process_past_the_retry_time_is_busy_not_a_hang(
    db: Path, clock: ModelClock, turn_holder
) -> None:
    new_queue(db, clock, count=1).close()
    child = turn_holder(db)
    with Store(db, clock=clock, busy_timeout_ms=50, busy_retry_seconds=0.2) as impatient:
        for write in (lambda: impatient.enqueue(line("E0002")), lambda: impatient.claim()):
            with pytest.raises(StorageError) as info:
                in_thread(write)  # a hang fails here instead of blocking the run
            assert info.value.code == "database_busy"
            assert "another process holds the write turn" in info.value.message and str(db) in info.value.message
        assert impatient.status().messages == {"ready": 1, "leased": 0, "done": 0, "dead": 0}  # nothing was written; reads take no turn
        release(child)
        # The turns given up on were handed straight back: the next write gets in.
        assert in_thread(lambda: impatient.enqueue(line("E0002"))).accepted == 1
        lease = in_thread(lambda: impatient.claim())
        assert lease is not None and lease.event_id == "E0001"


def test_writes_work_where_the_lock_file_cannot_be_created(db: Path, clock: ModelClock,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    real_open = os.open
    refused: list[str] = []

    def no_lock_files(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if str(path).endswith("-lock"):
            refused.append(str(path))
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(turn.os, "open", no_lock_files)
    with new_queue(db, clock, count=2) as store, Store(db, clock=clock, busy_retry_seconds=0.2) as other:
        summary = work(store, handled_by_thread)
        assert (summary.claimed, summary.done) == (2, 2)
        with store.writer_turn():  # no turn across processes, but still one between threads
            with pytest.raises(StorageError) as info:
                in_thread(lambda: other.enqueue(line("E0003")))
            assert info.value.code == "database_busy"
        assert other.enqueue(line("E0003")).accepted == 1
        assert store.status().messages == {"ready": 1, "leased": 0, "done": 2, "dead": 0}
    assert refused and all(path == f"{db}-lock" for path in refused)
    assert not db.with_name(db.name + "-lock").exists()


def test_without_fcntl_the_package_imports_and_sqlite_is_refused_by_code(tmp_path: Path) -> None:
    """Windows has no fcntl: queue_core imports, SQLite says no_file_locks, nothing is created."""
    program = f"""
import sys
sys.modules["fcntl"] = None  # what a platform without flock looks like to an import
import queue_core
assert "queue_core.app" not in sys.modules, "the reference app was imported"
try:
    queue_core.Store({str(tmp_path / "q.sqlite3")!r})
except queue_core.StorageError as exc:
    print(exc.code)
"""
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "no_file_locks"
    assert not (tmp_path / "q.sqlite3").exists()
    # the control: with fcntl, the same store opens
    with Store(tmp_path / "q.sqlite3") as store:
        assert store.status().messages == {"ready": 0, "leased": 0, "done": 0, "dead": 0}


def test_an_sqlite_older_than_3_37_is_refused_with_its_versions() -> None:

    from queue_core.errors import StorageError
    sqlite_engine.check_sqlite_version()  # the SQLite of this Python is new enough
    sqlite_engine.check_sqlite_version((3, 37, 0))
    with pytest.raises(StorageError) as refused:
        sqlite_engine.check_sqlite_version((3, 36, 9))
    assert refused.value.code == "sqlite_too_old"
    assert "SQLite 3.37.0 or newer" in str(refused.value) and "SQLite 3.36.9" in str(refused.value)


@pytest.mark.parametrize(("option", "value"), [
    ("busy_timeout_ms", -1), ("busy_timeout_ms", 1.5), ("busy_timeout_ms", True), ("busy_timeout_ms", "2000"),
    ("busy_retry_seconds", -0.1), ("busy_retry_seconds", float("nan")), ("busy_retry_seconds", float("inf")),
    ("busy_retry_seconds", "60"), ("busy_retry_seconds", False),
])
def test_a_bad_busy_wait_is_refused_before_the_file_is_made(tmp_path: Path, option: str, value: object) -> None:
    with pytest.raises(ValueError, match=f"{option} must be"):
        Store(tmp_path / "q.sqlite3", **{option: value})  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []
