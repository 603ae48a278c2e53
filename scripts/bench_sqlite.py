"""The SQLite measurements of the bench: commit loops, queue_core's paths, worker processes, the peers.

Also the claim's cost over a long history and among named queues, the
enqueue, and a worker's memory. ``measure_processes`` runs the same worker
processes on a PostgreSQL database when given one (bench_postgres.py).
"""

from __future__ import annotations

import json
import sqlite3
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench_common import NOW, batch_text, busy_between, cpu_ticks, fill_queue, fresh_queue, timed, verify_queue
from queue_core import Handler, ModelClock, Store, work
from queue_core.engines import sqlite as sqlite_engine
from queue_core.envelope import MAX_LINES, parse_batch
from queue_core.transactions import Transactions
from queue_core.values import new_lease_token

if TYPE_CHECKING:
    from bench_postgres import PostgresDatabases

QUEUES = 10  # the named queues of the claim-per-queue row, 100,000 ready messages each


def measure_raw(folder: Path, commits: int, journal: str = "WAL", synchronous: str = "FULL") -> float:
    conn = sqlite3.connect(folder / f"raw-{journal}-{synchronous}.sqlite3", isolation_level=None)
    try:
        conn.execute(f"PRAGMA journal_mode = {journal}")
        conn.execute(f"PRAGMA synchronous = {synchronous}")
        conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v INTEGER NOT NULL)")
        conn.execute("INSERT INTO t VALUES (1, 0)")
        with timed() as seconds:
            for _ in range(commits):
                conn.execute("BEGIN IMMEDIATE")
                conn.execute("UPDATE t SET v = v + 1 WHERE id = 1")
                conn.execute("COMMIT")
        if conn.execute("SELECT v FROM t").fetchone()[0] != commits:
            raise SystemExit("raw: wrong count")
    finally:
        conn.close()
    return commits / seconds[0]


class PerTransactionRunner(Transactions):
    """The connection policy before this issue: a connection opened and closed around each transaction."""

    def _write_once(self, operation: str | None, body: Callable[[Any], Any]) -> Any:
        try:
            return super()._write_once(operation, body)
        finally:
            conn = getattr(self._local, "conn", None)
            if conn is not None:
                self._discard(conn)  # closed: the next transaction opens a new one


def per_transaction_store(path: Path) -> Store:
    """A store of ``path`` whose runner opens and closes a connection around each transaction."""
    store = Store(path, clock=ModelClock(NOW), create=False)
    store._runner.__class__ = PerTransactionRunner  # the same runner, with the old connection policy
    return store


def measure_per_transaction(folder: Path, messages: int) -> float:
    path = fresh_queue(folder, "per-tx", messages)
    store, handler = per_transaction_store(path), Handler()
    with timed() as seconds:
        while (lease := store.claim(60)) is not None:
            store.complete(lease, handler)
    verify_queue(path, messages)
    return messages / seconds[0]


def measure_bare(folder: Path, messages: int) -> float:
    """The simple path's statements straight through sqlite3, without queue_core: what the SQL itself costs.

    The same statements as ``work()``, taken from the SQLite engine's named statements:
    the claim as one ``UPDATE ... RETURNING`` that commits by itself, then
    ``BEGIN IMMEDIATE``, the effect's INSERT, the fenced ACK, ``COMMIT``; on
    the same kind of file.
    """
    path = fresh_queue(folder, "bare", messages)
    conn = sqlite_engine.connect(path, busy_timeout_ms=5000)
    claim, ack = sqlite_engine.OPERATIONS.sql("claim_messages"), sqlite_engine.OPERATIONS.sql("fenced_move")
    try:
        with timed() as seconds:
            while True:
                token = new_lease_token()  # the claim's own, as Store draws it
                row = conn.execute(claim, {"now": NOW, "until": NOW + 600, "lease_seconds": 600, "wanted": 1,
                                           "max_attempts": 3, "lease_expired": "lease_expired",
                                           "queue": "default", "token": token}).fetchone()
                if row is None:
                    break
                event_id, payload, generation = row[0], json.loads(row[1]), row[4]
                conn.execute("BEGIN IMMEDIATE")
                conn.execute("INSERT INTO effects (event_id, category, amount_cents) VALUES (?, ?, ?)",
                             (event_id, payload["category"], payload["amount_cents"]))
                acked = conn.execute(ack, {"now": NOW, "until": None, "move": "ack", "queue": "default",
                                           "leases": json.dumps([[event_id, generation, token]])}).rowcount
                if acked != 1:
                    raise SystemExit(f"bare: {event_id} was not acknowledged")
                conn.execute("COMMIT")
    finally:
        sqlite_engine.close(conn, quiet=True)
    verify_queue(path, messages)
    return messages / seconds[0]


class LatencyProbe:
    """Times each message from the start of its claim to the commit of its ACK.

    The worker's claim is one statement with no step of its own, and a worker
    claims again as soon as its last ACK committed: so a message's claim
    starts at the commit before it (the first at the probe's creation). The
    messages of a transaction are counted as their ACKs pass.
    """

    def __init__(self, batch: int) -> None:
        self.ack_point = "complete_many.after_commit" if batch > 1 else "complete.after_commit"
        self.claimed_at = time.perf_counter()
        self.acked = 0
        self.latencies: list[float] = []

    def __call__(self, point: str) -> None:
        if point == "complete.after_update":
            self.acked += 1
        elif point == self.ack_point:
            now = time.perf_counter()
            self.latencies += [now - self.claimed_at] * self.acked
            self.claimed_at, self.acked = now, 0


def measure_work(folder: Path, messages: int, batch: int) -> tuple[float, float]:
    """Messages per second of ``work(batch=...)``, then (in a second, smaller run) the latency per message.

    The throughput run has no probe, so that timing the latency does not slow it down.
    """
    path = fresh_queue(folder, f"work-{batch}", messages)
    with Store(path, clock=ModelClock(NOW), create=False) as store:
        with timed() as seconds:
            summary = work(store, Handler(), lease_seconds=600, batch=batch)
    if summary.done != messages:
        raise SystemExit(f"batch {batch}: {summary}")
    verify_queue(path, messages)
    timed_messages = min(messages, max(1000, 4 * batch))
    path = fresh_queue(folder, f"latency-{batch}", timed_messages)
    probe = LatencyProbe(batch)
    with Store(path, clock=ModelClock(NOW), create=False, probe=probe) as store:
        work(store, Handler(), lease_seconds=600, batch=batch)
    verify_queue(path, timed_messages)
    return messages / seconds[0], statistics.median(probe.latencies)


WORKER_PROGRAM = """
import json, sys
from queue_core import Handler, ModelClock, Store, ledger, work
with Store(sys.argv[1], clock=ModelClock(int(sys.argv[2])), create=False) as store:
    ledger.install(store)
    print("ready", flush=True)
    sys.stdin.readline()
    print(json.dumps(work(store, Handler(), lease_seconds=600).to_dict()), flush=True)
"""


def measure_processes(folder: Path, messages: int, workers: int,
                      postgres: PostgresDatabases | None = None) -> tuple[float, list[int], float | None]:
    """N worker processes draining one queue: a new file, or (``postgres``) a new PostgreSQL database.

    Also returns how busy the machine's CPUs were meanwhile (workers and server share them).
    """
    path: Path | str
    if postgres is None:
        path = fresh_queue(folder, f"workers-{workers}", messages)
    else:
        path = postgres.new_database()
        fill_queue(path, messages)
    command = [sys.executable, "-c", WORKER_PROGRAM, str(path), str(NOW)]
    processes = [subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                 for _ in range(workers)]
    try:
        for process in processes:  # every worker has started Python and opened the file
            if process.stdout is None or process.stdout.readline().strip() != "ready":
                raise SystemExit("a worker did not start")
        ticks = cpu_ticks()
        with timed() as seconds:
            for process in processes:
                assert process.stdin is not None
                process.stdin.write("go\n")
                process.stdin.flush()
            outputs = [process.communicate()[0] for process in processes]
        busy = busy_between(ticks, cpu_ticks())
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
    if any(process.returncode for process in processes):
        raise SystemExit(f"workers_{workers}: exit statuses {[p.returncode for p in processes]}")
    shares = [json.loads(output)["done"] for output in outputs]
    verify_queue(path, messages)
    return messages / seconds[0], shares, busy


# ------------------------------------------------------------------- peers

def _peer_persist_queue(folder: Path, messages: int) -> float:
    from persistqueue import SQLiteAckQueue  # type: ignore[import-not-found]

    queue = SQLiteAckQueue(str(folder / "persist-queue"), auto_commit=True)
    for connection in {id(c): c for c in (queue._getter, queue._putter)}.values():
        connection.execute("PRAGMA synchronous = FULL")
    for n in range(messages):
        queue.put({"n": n})
    acked = 0
    with timed() as seconds:
        while True:
            try:
                item = queue.get(block=False)
            except Exception as exc:  # persistqueue.Empty
                if type(exc).__name__ != "Empty":
                    raise
                break
            queue.ack(item)
            acked += 1
    if acked != messages or queue.acked_count() != messages:
        raise SystemExit(f"persist-queue: acked {acked}, counted {queue.acked_count()}")
    queue.close()
    return messages / seconds[0]


def _peer_litequeue(folder: Path, messages: int) -> float:
    from litequeue import LiteQueue  # type: ignore[import-not-found]

    queue = LiteQueue(str(folder / "litequeue.sqlite3"))
    queue.conn.execute("PRAGMA synchronous = FULL")  # it sets NORMAL itself
    for n in range(messages):
        queue.put(json.dumps({"n": n}))
    done = 0
    with timed() as seconds:
        while (message := queue.pop()) is not None:
            queue.done(message.message_id)
            done += 1
    left = queue.conn.execute(f"SELECT count(*) FROM {queue.table} WHERE done_time IS NULL").fetchone()[0]
    if done != messages or left:
        raise SystemExit(f"litequeue: done {done}, left {left}")
    queue.conn.close()
    return messages / seconds[0]


def _peer_huey(folder: Path, messages: int, *, store_result: bool) -> float:
    from huey.storage import SqliteStorage  # type: ignore[import-not-found]

    name = "huey-result" if store_result else "huey"
    storage = SqliteStorage(name="bench", filename=str(folder / f"{name}.sqlite3"), fsync=True)
    for n in range(messages):
        storage.enqueue(json.dumps({"n": n}).encode())
    taken = 0
    with timed() as seconds:
        while (data := storage.dequeue()) is not None:
            if store_result:
                storage.put_data(f"result-{taken}", data, is_result=True)
            taken += 1
    results = storage.result_store_size()
    if taken != messages or storage.queue_size() != 0 or (store_result and results != messages):
        raise SystemExit(f"huey: took {taken}, left {storage.queue_size()}, results {results}")
    storage.close()
    return messages / seconds[0]


PEERS: dict[str, Callable[[Path, int], float]] = {
    "persist-queue get+ack": _peer_persist_queue,
    "litequeue pop+done": _peer_litequeue,
    "huey dequeue (deletes)": lambda folder, n: _peer_huey(folder, n, store_result=False),
    "huey dequeue + result": lambda folder, n: _peer_huey(folder, n, store_result=True),
}


def peers_available() -> bool:
    try:
        import huey  # type: ignore[import-not-found]  # noqa: F401
        import litequeue  # noqa: F401
        import persistqueue  # noqa: F401
    except ImportError:
        return False
    return True


# ------------------------------------------------------- claim, enqueue, memory

def measure_claim_history(folder: Path, done_rows: int, claims: int = 500) -> float:
    """Seconds per claim (query + UPDATE, no commit) with ``done_rows`` finished messages stored.

    The id format allows 10,000 ids per file, so the history rows are written
    with CHECKs off and ids outside the format: only to measure the index.
    """
    path = fresh_queue(folder, f"history-{done_rows}", claims)
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA ignore_check_constraints = ON")
        conn.execute("BEGIN")
        conn.executemany(
            "INSERT INTO messages (event_id, payload, state, attempts, generation, available_at) "
            "VALUES (?, '{}', 'done', 1, 1, ?)",
            ((f"H{n:07d}", n % 900) for n in range(done_rows)))  # older than every ready row
        conn.execute("COMMIT")
    finally:
        conn.close()
    with Store(path, clock=ModelClock(NOW), create=False) as store:
        return seconds_per_claim(store, claims)


def seconds_per_claim(store: Store, claims: int) -> float:
    """Seconds per claim (query + UPDATE) in ``store``'s queue, each rolled back unmeasured."""
    spent = 0.0
    for _ in range(claims):
        with store.snapshot():  # warm: the same connection as the transaction below
            pass
        try:
            with store.transaction() as tx:
                started = time.perf_counter()
                lease = store.claim_tx(tx, 60)
                spent += time.perf_counter() - started
                if lease is None:
                    raise SystemExit(f"{store.where}: nothing to claim in queue {store.queue}")
                raise _Undo
        except _Undo:
            pass
    return spent / claims


def measure_claim_queues(folder: Path, per_queue: int, queues: int = QUEUES, claims: int = 500) -> dict[int, float]:
    """Seconds per claim (query + UPDATE, no commit) in one queue of ``per_queue`` ready messages.

    Once in a database that holds that queue alone, once in one that holds
    ``queues`` such queues: a claim reads its own queue's part of the claim
    index, so the others should not slow it down.
    """
    seconds: dict[int, float] = {}
    for count in (1, queues):
        path = folder / f"queues-{count}.sqlite3"
        with Store(path, clock=ModelClock(NOW)) as store:
            for number in range(count):
                store.create_queue(f"q{number}", id_pattern=r"m[0-9]+")
        conn = sqlite3.connect(path, isolation_level=None)
        try:
            conn.execute("BEGIN")
            for number in range(count):
                conn.executemany(
                    "INSERT INTO messages (event_id, payload, available_at, enqueued_at, queue) "
                    "VALUES (?, '{}', ?, 0, ?)",
                    ((f"m{n:07d}", n % 900, f"q{number}") for n in range(per_queue)))
            conn.execute("COMMIT")
        finally:
            conn.close()
        with Store(path, clock=ModelClock(NOW), create=False, queue="q0") as store:
            seconds[count] = seconds_per_claim(store, claims)
    return seconds


class _Undo(Exception):
    """Roll the measured claim back: the next claim finds the same state."""


def measure_enqueue(folder: Path, repeats: int = 7) -> tuple[float, float]:
    """Seconds to enqueue 1,000 lines into a new queue, and of that the validation alone (medians)."""
    text = batch_text(0, MAX_LINES)
    times, parse_times = [], []
    for n in range(repeats):
        with timed() as parsing:
            parse_batch(text.encode("utf-8"))
        parse_times.append(parsing[0])
        with Store(folder / f"enqueue-{n}.sqlite3", clock=ModelClock(NOW)) as store:
            with timed() as seconds:
                result = store.enqueue(text)
            if result.accepted != MAX_LINES:
                raise SystemExit(f"enqueue: {result}")
            times.append(seconds[0])
    return statistics.median(times), statistics.median(parse_times)


MEMORY_PROGRAM = """
import json, resource, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from bench_common import NOW, fresh_queue, verify_queue
from queue_core import Handler, ModelClock, Store, work
folder, rounds, per_round = Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
def rss_kib():
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * resource.getpagesize() // 1024
samples = []
handler = Handler()
for n in range(rounds):
    path = fresh_queue(folder, f"memory-{n}", per_round)
    with Store(path, clock=ModelClock(NOW), create=False) as store:
        work(store, handler, lease_seconds=600)
    verify_queue(path, per_round)
    path.unlink()
    samples.append(rss_kib())
print(json.dumps(samples))
"""


def measure_memory(folder: Path, rounds: int, per_round: int) -> list[int]:
    output = subprocess.run([sys.executable, "-c", MEMORY_PROGRAM, str(Path(__file__).parent), str(folder),
                             str(rounds), str(per_round)], check=True, capture_output=True, text=True).stdout
    samples: list[int] = json.loads(output)
    return samples
