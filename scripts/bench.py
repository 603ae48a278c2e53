"""What durability costs on this machine, and what queue_core makes of it: ratios from one run.

    make bench                               # the full run; writes docs/assets/bench/
    python scripts/bench.py --quick          # a smoke run (the test suite uses it)
    python scripts/bench.py --out DIR --messages 5000 --rounds 3

Machines here are noisy, so every figure is the median of ``--rounds``
rounds, and within a round the measurements run one after another in a
rotating order; the ratios (the targets of the performance issue) are taken
between medians of the same run. Every measurement verifies its result (every
message done once, one effect each, the money exact; a peer: every item
acknowledged), so a fast wrong run cannot be reported.

Measured, all on WAL with ``synchronous=FULL`` (the peers are set to FULL too):

* ``raw``: ``BEGIN IMMEDIATE; UPDATE one row; COMMIT``: the commit limit.
  A protocol with two commits per message is capped at half of it. The same
  loop also runs with ``synchronous=NORMAL`` and with the rollback journal, to
  show what those settings would buy.
* ``per_transaction``: claim + complete with a connection opened and closed
  around every transaction, the policy before this issue.
* ``simple``: ``work()``, one connection for the run (the path the chapters teach).
* ``bare SQL, simple path``: the same statements as ``simple`` typed straight
  into sqlite3, without queue_core: how much of the cost is the SQL itself.
* ``batch_K``: ``work(batch=K)``, K messages claimed in one transaction and
  completed in one; with its latency per message (claim to ACK).
* ``workers_N``: N real worker processes on one file; shares per worker.
* ``postgresql raw``: the server's own commit loop, its commit limit.
* ``postgresql workers_N``: the same N processes on one PostgreSQL database
  (the test suite's throwaway server, ``fsync`` and ``synchronous_commit``
  on, a Unix socket); left out with ``--no-postgres`` or when no server can
  be started here (the result says why).
* peers: persist-queue ``SQLiteAckQueue`` get+ack, litequeue pop+done, huey's
  ``SqliteStorage`` dequeue (deletes on dequeue: at-most-once) and dequeue +
  ``put_data`` (a stored result). They are installed only for the benchmark.
* ``claim`` cost over 10,000 and 1,000,000 done rows (the claim query and its
  UPDATE, without the commit), and in one of 10 named queues of 100,000 ready
  messages each against a lone such queue, enqueue of 1,000 lines, and a worker's memory
  over 100,000 messages (10 files of 10,000).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from queue_core import Handler, ModelClock, Store, ledger, work
from queue_core.engines import postgres as postgres_engine
from queue_core.engines import sqlite as sqlite_engine
from queue_core.engines import sqlite as sqlite_engine
from queue_core.envelope import MAX_LINES, parse_batch
from queue_core.values import new_lease_token

NOW = 1000
AMOUNT = 7  # cents per message: the money check is messages * AMOUNT
BATCH_SIZES = (16, 64, 256)
WORKER_COUNTS = (1, 2, 4, 8)
QUEUES = 10  # the named queues of the claim-per-queue row, 100,000 ready messages each
PG_BATCH = 64  # the batched path on PostgreSQL: messages per transaction
ROOT = Path(__file__).resolve().parent.parent


# ------------------------------------------------------------------ helpers

def batch_text(first: int, last: int, amount: int = AMOUNT) -> str:
    return "".join(
        json.dumps({"event_id": f"E{n:04d}", "payload": {"category": "book", "amount_cents": amount}}) + "\n"
        for n in range(first, last)
    )


def fresh_queue(folder: Path, name: str, messages: int) -> Path:
    """A new queue file in ``folder`` with ``messages`` ready messages."""
    path = folder / f"{name}.sqlite3"
    fill_queue(path, messages)
    return path


def fill_queue(target: Path | str, messages: int) -> None:
    """Install the ledger into a new file or an empty PostgreSQL database, and enqueue ``messages``."""
    with Store(target, clock=ModelClock(NOW)) as store:
        ledger.install(store)
        for first in range(0, messages, MAX_LINES):
            store.enqueue(batch_text(first, min(first + MAX_LINES, messages)))


def verify_queue(path: Path | str, messages: int) -> None:
    with Store(path, clock=ModelClock(NOW), create=False) as store:
        report = ledger.report(store)
    expected = {"messages": {"ready": 0, "leased": 0, "done": messages, "dead": 0},
                "effects": {"count": messages, "total_cents": messages * AMOUNT,
                            "by_category": {"book": messages * AMOUNT}}}
    if report.to_dict() != expected:
        raise SystemExit(f"{path}: wrong result {report.to_dict()}, expected {expected}")


@contextmanager
def timed() -> Iterator[list[float]]:
    box: list[float] = []
    started = time.perf_counter()
    yield box
    box.append(time.perf_counter() - started)


def cpu_ticks() -> tuple[int, int]:
    """(busy, total) clock ticks of every CPU of the machine so far, from /proc/stat (Linux)."""
    try:
        with open("/proc/stat", encoding="ascii") as stat:
            fields = [int(v) for v in stat.readline().split()[1:]]
    except (OSError, ValueError):
        return 0, 0
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle and iowait
    return sum(fields) - idle, sum(fields)


def busy_between(before: tuple[int, int], after: tuple[int, int]) -> float | None:
    """The share of the machine's CPU time that was busy between two readings."""
    total = after[1] - before[1]
    return None if total <= 0 else round((after[0] - before[0]) / total, 3)


# ------------------------------------------------------------- measurements

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


class PerTransactionStore(Store):
    """The connection policy before this issue: a connection opened and closed around each transaction."""

    def _write_once(self, operation: str | None, body: Callable[[Any], Any]) -> Any:
        try:
            return super()._write_once(operation, body)
        finally:
            conn = getattr(self._local, "conn", None)
            if conn is not None:
                self._discard(conn)  # closed: the next transaction opens a new one


def measure_per_transaction(folder: Path, messages: int) -> float:
    path = fresh_queue(folder, "per-tx", messages)
    store, handler = PerTransactionStore(path, clock=ModelClock(NOW), create=False), Handler()
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
    claim, ack = sqlite_engine.OPERATIONS.sql("claim_messages"), sqlite_engine.OPERATIONS.sql("ack")
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
                acked = conn.execute(ack, {"now": NOW, "event_id": event_id, "generation": generation,
                                           "queue": "default", "token": token}).rowcount
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


class PostgresDatabases:
    """The test suite's throwaway server (tests/postgres_server.py), one new database per measurement.

    The server keeps ``fsync = on`` and ``synchronous_commit = on`` (its
    defaults): a commit is on disk before it returns, as with SQLite's FULL.
    It listens on a Unix socket only, so the figures have no TCP in them.
    """

    def __init__(self) -> None:
        sys.path.insert(0, str(ROOT))
        from tests import postgres_server

        self._server = postgres_server
        # each log line names its database: round_trips() counts one database's statements
        self.cluster = postgres_server.Cluster(
            postgres_server.find_bindir(),  # type: ignore[arg-type]
            settings=("log_line_prefix = '%d '",))
        self.cluster.start()
        self.version = ""
        import psycopg  # type: ignore[import-not-found]

        with psycopg.connect(self.cluster.conninfo(), autocommit=True) as conn:
            self.version = conn.execute("SHOW server_version").fetchone()[0]

    @staticmethod
    def unavailable() -> str | None:
        """Why no PostgreSQL column can be measured here, or None."""
        sys.path.insert(0, str(ROOT))
        from tests import postgres_server

        return postgres_server.unavailable()

    def raw_commits(self, commits: int) -> float:
        """Commits per second of single-row INSERTs in autocommit: one round trip and
        one commit each, over the same kind of connection. The server's commit limit."""
        import psycopg

        name = self.cluster.create_database()
        with psycopg.connect(self.cluster.conninfo(name), autocommit=True) as conn:
            conn.execute("CREATE TABLE commits (id integer PRIMARY KEY)")
            with timed() as seconds:
                for number in range(commits):
                    conn.execute("INSERT INTO commits VALUES (%s)", (number,))
            if conn.execute("SELECT count(*) FROM commits").fetchone()[0] != commits:
                raise SystemExit("postgresql raw: a commit was lost")
        return commits / seconds[0]

    def batched(self, messages: int, batch: int) -> float:
        """Messages per second of one worker on the batched path (``work(batch=...)``)."""
        url = self.new_database()
        fill_queue(url, messages)
        with Store(url, clock=ModelClock(NOW)) as store:
            with timed() as seconds:
                summary = work(store, Handler(), lease_seconds=600, batch=batch)
        if summary.done != messages:
            raise SystemExit(f"postgresql batch_{batch}: {summary}")
        verify_queue(url, messages)
        return messages / seconds[0]

    def bare(self, messages: int) -> float:
        """The simple path's statements straight through psycopg, without queue_core.

        As ``work()`` sends them: the claim in autocommit, then ``BEGIN`` with
        the effect's INSERT in one round trip, the fenced ACK, ``COMMIT``.
        """
        import psycopg

        url = self.new_database()
        fill_queue(url, messages)
        claim, ack = postgres_engine.OPERATIONS.sql("claim_messages"), postgres_engine.OPERATIONS.sql("ack")
        wanted = {"now": None, "until": None, "lease_seconds": 600, "wanted": 1,
                  "max_attempts": 3, "lease_expired": "lease_expired", "queue": "default"}
        with psycopg.connect(self.cluster.conninfo(url.split("/")[3].split("?")[0]), autocommit=True) as conn:
            with timed() as seconds:
                while (row := conn.execute(claim, {**wanted, "token": (token := new_lease_token())}
                                           ).fetchone()) is not None:
                    event_id, payload, generation = row[0], json.loads(row[1]), row[4]
                    with conn.pipeline():
                        conn.execute("BEGIN")
                        conn.execute("INSERT INTO effects (event_id, category, amount_cents) VALUES (%s, %s, %s)",
                                     (event_id, payload["category"], payload["amount_cents"]))
                    acked = conn.execute(ack, {"now": None, "event_id": event_id, "generation": generation,
                                               "queue": "default", "token": token})
                    if acked.rowcount != 1:
                        raise SystemExit(f"postgresql bare: {event_id} was not acknowledged")
                    conn.execute("COMMIT")
        verify_queue(url, messages)
        return messages / seconds[0]

    def round_trips(self, messages: int) -> tuple[float, dict[str, float]]:
        """Statements the server received per message, read from its statement log.

        One worker (``work`` with the ledger's handler) drains ``messages``
        messages. psycopg sends each statement in one round trip, so the
        count per message is the round trips per message, BEGIN and COMMIT
        included. (pg_stat_statements of PostgreSQL 15 misses BEGIN and COMMIT
        sent over the extended protocol, so the log is read instead.)
        """
        import psycopg

        url = self.new_database()
        fill_queue(url, messages)
        name = url.split("/")[3].split("?")[0]
        with psycopg.connect(self.cluster.conninfo(), autocommit=True) as admin:
            admin.execute(f'ALTER DATABASE "{name}" SET log_statement = \'all\'')
        with Store(url, clock=ModelClock(NOW)) as store:
            # counted from here: opening the store (its schema check) is not per message
            start = self.cluster.log.stat().st_size
            summary = work(store, Handler(), lease_seconds=600)
        if summary.done != messages:
            raise SystemExit(f"round trips: {summary.done} of {messages} done")
        with open(self.cluster.log, encoding="utf-8", errors="replace") as log:
            log.seek(start)
            lines = [line for line in log if line.startswith(f"{name} ") and
                     ("LOG:  statement: " in line or "LOG:  execute " in line)]
        counts: dict[str, int] = {}
        for line in lines:
            text = line.split("LOG:  ", 1)[1].split(": ", 1)[1]
            kind = " ".join(text.split()[:3]) or "(a statement written over several lines)"
            counts[kind] = counts.get(kind, 0) + 1
        # The worker's last claim finds the queue empty: a statement of the run, not
        # of a message, so it is left out of the count per message.
        per_message = (len(lines) - 1) / messages
        by_kind = {kind: count / messages for kind, count in counts.items()}
        return per_message, dict(sorted(by_kind.items(), key=lambda item: -item[1]))

    def new_database(self) -> str:
        name = self.cluster.create_database()
        return (f"postgresql://{self._server.SERVER_USER}@/{name}"
                f"?host={self.cluster.root}&port={self._server.PORT}")

    def stop(self) -> None:
        self.cluster.stop()


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
from bench import NOW, fresh_queue, verify_queue
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


# --------------------------------------------------------------------- run

def run(messages: int = 5000, rounds: int = 3, *, peers: bool = True, history: tuple[int, int] = (10_000, 1_000_000),
        memory: tuple[int, int] = (10, 10_000), queue_rows: int = 100_000, worker_counts: tuple[int, ...] = WORKER_COUNTS,
        batch_sizes: tuple[int, ...] = BATCH_SIZES, postgres: bool = True) -> dict[str, Any]:
    """Every measurement, ``rounds`` times in rotating order; medians and the targets' ratios."""
    samples: dict[str, list[float]] = {}
    latencies: dict[str, list[float]] = {}
    shares: dict[str, list[list[int]]] = {}
    cpu_busy: dict[str, list[float | None]] = {}
    jobs: list[tuple[str, Callable[[Path], None]]] = []

    def rate(name: str, value: float) -> None:
        samples.setdefault(name, []).append(value)

    jobs.append(("raw", lambda f: rate("raw", measure_raw(f, messages))))
    # What the other settings would buy (the performance page says what each loses).
    jobs.append(("raw WAL, NORMAL", lambda f: rate("raw WAL, NORMAL", measure_raw(f, messages, "WAL", "NORMAL"))))
    jobs.append(("raw rollback journal, FULL",
                 lambda f: rate("raw rollback journal, FULL", measure_raw(f, min(messages, 2000), "DELETE", "FULL"))))
    jobs.append(("per_transaction", lambda f: rate("per_transaction", measure_per_transaction(f, min(messages, 2000)))))
    jobs.append(("bare SQL, simple path", lambda f: rate("bare SQL, simple path", measure_bare(f, messages))))
    for size in (1, *batch_sizes):
        name = "simple" if size == 1 else f"batch_{size}"

        def job(f: Path, size: int = size, name: str = name) -> None:
            value, latency = measure_work(f, messages, size)
            rate(name, value)
            latencies.setdefault(name, []).append(latency)
        jobs.append((name, job))
    for count in worker_counts:
        def procs(f: Path, count: int = count) -> None:
            value, split, busy = measure_processes(f, messages, count)
            rate(f"workers_{count}", value)
            shares.setdefault(f"workers_{count}", []).append(split)
            cpu_busy.setdefault(f"workers_{count}", []).append(busy)
        jobs.append((f"workers_{count}", procs))
    # The PostgreSQL column runs in a phase of its own after the SQLite rounds:
    # an idle server still writes (checkpoints), and those writes would share
    # the disk with SQLite's fsyncs.
    postgres_server: PostgresDatabases | None = None
    round_trips: tuple[float, dict[str, float]] = (0.0, {})
    postgres_jobs: list[tuple[str, Callable[[Path], None]]] = []
    postgres_skipped = PostgresDatabases.unavailable() if postgres else "not asked for"
    if postgres_skipped is None:
        def pg_raw(f: Path) -> None:
            assert postgres_server is not None
            rate("postgresql raw", postgres_server.raw_commits(messages))
        postgres_jobs.append(("postgresql raw", pg_raw))

        def pg_bare(f: Path) -> None:
            assert postgres_server is not None
            rate("postgresql bare SQL, simple path", postgres_server.bare(messages))
        postgres_jobs.append(("postgresql bare SQL, simple path", pg_bare))

        def pg_batch(f: Path) -> None:
            assert postgres_server is not None
            rate(f"postgresql batch_{PG_BATCH}", postgres_server.batched(messages, PG_BATCH))
        postgres_jobs.append((f"postgresql batch_{PG_BATCH}", pg_batch))
        for count in worker_counts:
            def pg_procs(f: Path, count: int = count) -> None:
                value, split, busy = measure_processes(f, messages, count, postgres_server)
                rate(f"postgresql workers_{count}", value)
                shares.setdefault(f"postgresql workers_{count}", []).append(split)
                cpu_busy.setdefault(f"postgresql workers_{count}", []).append(busy)
            postgres_jobs.append((f"postgresql workers_{count}", pg_procs))
    with_peers = peers and peers_available()
    if with_peers:
        for peer, measure in PEERS.items():
            jobs.append((peer, lambda f, peer=peer, measure=measure: rate(peer, measure(f, messages))))

    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="queue-core-bench-") as tmp:
        def rounds_of(phase: str, phase_jobs: list[tuple[str, Callable[[Path], None]]]) -> None:
            for round_number in range(rounds):
                rotation = round_number % len(phase_jobs)
                for index, (name, job) in enumerate(phase_jobs[rotation:] + phase_jobs[:rotation]):
                    folder = Path(tmp) / f"{phase}{round_number}-{index}"
                    folder.mkdir()
                    job(folder)

        rounds_of("r", jobs)
        if postgres_jobs:
            postgres_server = PostgresDatabases()
            try:
                rounds_of("pg", postgres_jobs)
                round_trips = postgres_server.round_trips(min(messages, 1000))
            finally:
                postgres_server.stop()
        claim_seconds = {str(rows): measure_claim_history(Path(tmp), rows) for rows in history}
        queue_seconds = measure_claim_queues(Path(tmp), queue_rows)
        enqueue_seconds, parse_seconds = measure_enqueue(Path(tmp))
        memory_kib = measure_memory(Path(tmp), *memory) if memory[0] else []

    median = {name: statistics.median(values) for name, values in samples.items()}
    raw = median["raw"]
    ceiling = raw / 2
    low, high = (str(rows) for rows in history)
    best = max((f"batch_{k}" for k in batch_sizes), key=lambda name: median[name])  # the fastest batched path
    targets = {
        "simple / two-commit ceiling": (median["simple"] / ceiling, ">= 0.85"),
        **{f"batch_{k} / raw commits": (median[f"batch_{k}"] / raw, ">= 2") for k in batch_sizes},
        "bare SQL of the simple path / two-commit ceiling": (median["bare SQL, simple path"] / ceiling, "(reference)"),
        "simple / bare SQL of the simple path": (median["simple"] / median["bare SQL, simple path"], ">= 0.9"),
        **{f"simple / {peer}": (median["simple"] / median[peer], ">= 1.2") for peer in PEERS if with_peers},
        **{f"{best} / {peer}": (median[best] / median[peer], ">= 1.2") for peer in PEERS if with_peers},
        f"claim over {high} / over {low} done rows": (claim_seconds[high] / claim_seconds[low], "<= 1.3"),
        f"claim in 1 of {QUEUES} queues / in a lone queue": (queue_seconds[QUEUES] / queue_seconds[1], "<= 1.3"),
        **{f"workers_{n} / workers_1": (median[f"workers_{n}"] / median["workers_1"], ">= 0.9" if n <= 4 else "(reference)")
           for n in worker_counts if n > 1 and "workers_1" in median},
        **({"postgresql workers_1 / its two-commit ceiling":
            (median["postgresql workers_1"] / (median["postgresql raw"] / 2), ">= 0.8"),
            "postgresql bare SQL of the simple path / its two-commit ceiling":
            (median["postgresql bare SQL, simple path"] / (median["postgresql raw"] / 2), "(reference)"),
            "postgresql workers_1 / bare SQL of the simple path":
            (median["postgresql workers_1"] / median["postgresql bare SQL, simple path"], "(reference)"),
            f"postgresql batch_{PG_BATCH} / postgresql raw":
            (median[f"postgresql batch_{PG_BATCH}"] / median["postgresql raw"], ">= 2"),
            "postgresql round trips per message": (round_trips[0], "<= 5")}
           if "postgresql raw" in median else {}),
        **{f"postgresql workers_{n} / postgresql workers_1":
           (median[f"postgresql workers_{n}"] / median["postgresql workers_1"], ">= 2.5" if n == 4 else "(reference)")
           for n in worker_counts if n > 1 and "postgresql workers_1" in median},
        "enqueue of 1,000 lines (ms)": (enqueue_seconds * 1000, "<= 15"),
    }
    if memory_kib:
        targets["worker memory: last / first round"] = (memory_kib[-1] / memory_kib[0], "<= 1.1 (flat)")
    return {
        "machine": _machine(),
        "parameters": {"messages": messages, "rounds": rounds, "batch_sizes": list(batch_sizes),
                       "worker_counts": list(worker_counts), "history_rows": list(history),
                       "queue_rows": queue_rows, "queues": QUEUES,
                       "memory_rounds": memory[0], "memory_messages_per_round": memory[1]},
        "seconds": round(time.perf_counter() - started, 1),
        "messages_per_second": {name: round(value, 1) for name, value in median.items()},
        "samples": {name: [round(v, 1) for v in values] for name, values in samples.items()},
        "two_commit_ceiling": round(ceiling, 1),
        "latency_ms": {name: round(statistics.median(values) * 1000, 3) for name, values in latencies.items()},
        "shares": shares,
        "cpu_busy": cpu_busy,
        "claim_microseconds": {rows: round(seconds * 1e6, 1) for rows, seconds in claim_seconds.items()},
        "claim_in_queues_microseconds": {str(count): round(seconds * 1e6, 1)
                                         for count, seconds in queue_seconds.items()},
        "enqueue_1000_ms": round(enqueue_seconds * 1000, 2),
        "enqueue_1000_parse_ms": round(parse_seconds * 1000, 2),
        "memory_kib": memory_kib,
        "targets": {name: {"value": round(value, 3), "target": target, "met": _met(value, target)}
                    for name, (value, target) in targets.items()},
        "peers": with_peers,
        "postgresql": ({"server": postgres_server.version, "fsync": "on", "synchronous_commit": "on",
                        "connection": "Unix socket",
                        "round_trips_per_message": round(round_trips[0], 3),
                        "round_trips_by_statement": {kind: round(n, 3) for kind, n in round_trips[1].items()}}
                       if postgres_server is not None
                       else {"skipped": postgres_skipped}),
    }


def _met(value: float, target: str) -> bool | None:
    if not target.startswith((">=", "<=")):
        return None  # a reference figure, not a target
    operator, number = target.split()[:2]
    return value >= float(number) if operator == ">=" else value <= float(number)


def _machine() -> dict[str, Any]:
    return {
        "date": datetime.date.today().isoformat(),
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "system": f"{platform.system()} {platform.release()} ({platform.machine()})",
        "cpus": os.cpu_count(),
        "journal": "WAL", "synchronous": "FULL",
    }


# ------------------------------------------------------------------ report

def markdown(result: dict[str, Any]) -> str:
    rates = result["messages_per_second"]
    raw = rates["raw"]
    samples = result.get("samples", {})
    lines = ["| measurement | messages/s (median) | min – max over rounds | ratio to its engine's raw commits "
             "| latency per message |",
             "| --- | ---: | ---: | ---: | ---: |"]
    for name, value in rates.items():
        latency = result["latency_ms"].get(name)
        shown = f"{latency:.2f} ms" if latency is not None else ""
        rounds = samples.get(name, [])
        spread = f"{min(rounds):,.0f} – {max(rounds):,.0f}" if len(rounds) > 1 else ""
        own_raw = rates.get("postgresql raw", raw) if name.startswith("postgresql") else raw  # each engine's own limit
        lines.append(f"| {name} | {value:,.0f} | {spread} | {value / own_raw:.2f} | {shown} |")
    server = result.get("postgresql", {})
    if "server" in server:
        lines += ["", f"PostgreSQL {server['server']} on the same machine (fsync and synchronous_commit on, "
                      f"{server['connection']}); the other rows are SQLite {result['machine']['sqlite']}."]
    # The targets stay in results.json (the project's own yardstick); the reader's page shows results.
    return "\n".join(lines) + "\n"


def chart(result: dict[str, Any], path: Path) -> None:
    import matplotlib  # type: ignore[import-not-found]
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # type: ignore[import-not-found]

    rates = result["messages_per_second"]
    names = [n for n in rates if n != "raw"]
    values = [rates[n] for n in names]
    colors = ["#9e9e9e" if n.startswith(("persist", "lite", "huey")) else "#00897b" if n.startswith("postgresql") else "#90a4ae" if n.startswith(("raw", "bare"))
              else "#3f51b5" for n in names]
    fig, ax = plt.subplots(figsize=(9, 4.8), dpi=110)
    ax.barh(names[::-1], values[::-1], color=colors[::-1])
    ax.axvline(rates["raw"], color="#e65100", linestyle="--", label=f"raw commits/s ({rates['raw']:,.0f})")
    ax.axvline(result["two_commit_ceiling"], color="#e65100", linestyle=":",
               label=f"two-commit ceiling ({result['two_commit_ceiling']:,.0f})")
    ax.set_xlabel("messages per second (median of the run's rounds)")
    machine = result["machine"]
    ax.set_title(f"WAL, synchronous=FULL; {machine['cpus']} cores; SQLite {machine['sqlite']}; {machine['date']}",
                 fontsize=9)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--messages", type=int, default=5000, help="messages per measurement (max 10000)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="a smoke run: few messages, one round, no peers")
    parser.add_argument("--no-postgres", dest="postgres", action="store_false",
                        help="leave out the PostgreSQL column (it needs the server binaries and psycopg)")
    parser.add_argument("--out", type=Path, help="write results.json, results.md and chart.png here")
    args = parser.parse_args()
    if not 1 <= args.messages <= 10_000:
        parser.error("--messages must be 1..10000 (event ids are E0000..E9999)")
    if args.quick:
        result = run(messages=300, rounds=1, peers=False, history=(1_000, 10_000), memory=(2, 300), queue_rows=2_000,
                     worker_counts=(1, 2), batch_sizes=(16,), postgres=args.postgres)
    else:
        result = run(messages=args.messages, rounds=args.rounds, postgres=args.postgres)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "results.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
        (args.out / "results.md").write_text(markdown(result), encoding="utf-8")
        try:
            chart(result, args.out / "chart.png")
        except ImportError:
            print("matplotlib is not installed: no chart (make bench installs it)", file=sys.stderr)
    print(markdown(result))


if __name__ == "__main__":
    main()
