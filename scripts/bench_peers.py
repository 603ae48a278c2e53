"""procrastinate and pgqueuer on the bench's PostgreSQL server: the same jobs, the same effect.

Each peer gets a new database of the same throwaway server as queue_core's
PostgreSQL rows (``fsync`` and ``synchronous_commit`` on, a Unix socket), its
own schema installed by its own API, and ``messages`` jobs enqueued *before*
the clock starts, so that what is timed is the consumption alone, as for
queue_core. A job carries what a queue_core message carries (an event id, a
category, an amount) and its handler writes the effect queue_core's ledger
handler writes: one row ``INSERT INTO effects (event_id, category,
amount_cents)`` into a table of the same columns and primary key (without the
foreign key to queue_core's messages table, which these databases do not
have). Neither peer can put the effect in the transaction that records the job
done, so the effect commits on its own first (autocommit, one round trip) and
the peer then records the job done its own way.

Two modes per peer:

* ``one``: one consumer, one job at a time to completion (procrastinate
  ``concurrency=1``; pgqueuer ``batch_size=1`` with the entrypoint's
  ``concurrency_limit=1``, so its completion buffer flushes every job);
* ``batched``: each peer's fastest concurrent or batched setting that still
  completes every job once (``PROCRASTINATE_CONCURRENCY`` jobs in flight;
  pgqueuer dequeuing and logging ``PGQUEUER_BATCH`` jobs per statement).

Each peer's database is ``ANALYZE``d after its enqueue, before the clock:
without statistics procrastinate's fetch slowed down as its table grew
(about 150 jobs/s at 1,000 jobs, 100 at 4,000, here). queue_core's rows get
no ``ANALYZE``, as before (bench_postgres.py): if anything, this favours the
peers.

After every run the database is counted: every job completed once (the
peer's own record of it), and one effect per job with the exact money. A run
that lost or doubled a job raises ``SystemExit``: the bench fails loudly.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from importlib import metadata
from typing import Any

AMOUNT = 7  # cents per job, as queue_core's bench messages
CATEGORY = "book"
ENQUEUE_CHUNK = 1000  # jobs per enqueue call: the enqueue is not timed, only kept short
# The batched settings: each peer's fastest of 4, 16, 64 and 256 on this 2-core
# machine (`python scripts/bench_peers.py --explore --jobs 2000` measures them again).
PROCRASTINATE_CONCURRENCY = 16
PGQUEUER_BATCH = 256
EFFECT_POOL = 4  # connections for the effects of the batched runs (one for one-at-a-time)

# The effect's table: queue_core's ledger table (queue_core/app/ledger_migrations/postgresql/0001_effects.sql)
# less its foreign key to queue_core's messages.
EFFECTS_TABLE = """
CREATE TABLE effects (
    queue        TEXT COLLATE "C" NOT NULL DEFAULT 'default',
    event_id     TEXT COLLATE "C" NOT NULL,
    category     TEXT   NOT NULL CHECK (length(category) > 0),
    amount_cents BIGINT NOT NULL CHECK (amount_cents > 0),
    PRIMARY KEY (queue, event_id)
)"""
EFFECT = "INSERT INTO effects (event_id, category, amount_cents) VALUES (%s, %s, %s)"

PEER_PACKAGES = ("procrastinate", "pgqueuer")


def versions() -> dict[str, str]:
    """The installed version of each peer (requirements-bench.txt pins them)."""
    return {name: metadata.version(name) for name in PEER_PACKAGES}


def available() -> str | None:
    """Why the PostgreSQL peers cannot run here, or None."""
    try:
        versions()
    except metadata.PackageNotFoundError as exc:
        return f"{exc.name} is not installed (make bench installs requirements-bench.txt)"
    return None


def job_payload(number: int) -> dict[str, Any]:
    """Job ``number``'s arguments: what queue_core's bench message E<number> carries."""
    return {"event_id": f"E{number:04d}", "category": CATEGORY, "amount_cents": AMOUNT}


def _rate(messages: int, seconds: float) -> float:
    return messages / seconds


def _check_effects(conn: Any, messages: int, peer: str) -> None:
    """One effect per job, the money exact (a doubled effect would also break the primary key)."""
    count, distinct, total = conn.execute(
        "SELECT count(*), count(DISTINCT event_id), coalesce(sum(amount_cents), 0) FROM effects").fetchone()
    if (count, distinct, total) != (messages, messages, messages * AMOUNT):
        raise SystemExit(f"{peer}: {count} effects ({distinct} distinct, {total} cents) "
                         f"for {messages} jobs: lost or doubled")


def _check_durability(conn: Any, peer: str) -> None:
    """The server's settings as the peer's database sees them, and every table a logged one.

    No peer may trade its WAL or its commit's flush for speed here: neither
    library sets ``synchronous_commit`` (their 3.10.0 and 1.6.0 sources never
    name it), and a database-level setting would show in this session.
    """
    settings = dict(conn.execute("SELECT name, setting FROM pg_settings "
                                 "WHERE name IN ('fsync', 'synchronous_commit', 'full_page_writes')").fetchall())
    if settings != {"fsync": "on", "synchronous_commit": "on", "full_page_writes": "on"}:
        raise SystemExit(f"{peer}: server settings {settings}: not the same durability")
    unlogged = [row[0] for row in conn.execute(
        "SELECT relname FROM pg_class WHERE relkind = 'r' AND relpersistence <> 'p' "
        "AND relnamespace NOT IN (SELECT oid FROM pg_namespace WHERE nspname LIKE 'pg\\_%')")]
    if unlogged:
        raise SystemExit(f"{peer}: unlogged tables {unlogged}: not the same durability")


class Effects:
    """The connections a peer's handlers write their effects through, each in autocommit.

    A free list rather than a driver's pool: a pool adds statements of its own
    per use (psycopg_pool a BEGIN and COMMIT around a transaction, asyncpg's a
    reset query on release), which would be the bench's cost, not the peer's.
    One connection for one job at a time; ``EFFECT_POOL`` for the batched runs.
    """

    def __init__(self, connections: list[Any]) -> None:
        self.connections = connections
        self._free: asyncio.Queue[Any] = asyncio.Queue()
        for connection in connections:
            self._free.put_nowait(connection)

    async def write(self, execute: Callable[[Any], Awaitable[Any]]) -> None:
        """Run ``execute(connection)`` on a free connection: one statement, its own commit."""
        connection = await self._free.get()
        try:
            await execute(connection)
        finally:
            self._free.put_nowait(connection)


# ------------------------------------------------------------- procrastinate

def _nothing() -> None:
    pass


def run_procrastinate(url: str, messages: int, concurrency: int, mark: Callable[[], None] = _nothing) -> float:
    """Jobs per second of one procrastinate worker (``concurrency`` jobs in flight) draining ``messages``."""
    import psycopg
    import procrastinate

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(EFFECTS_TABLE)
    # procrastinate's own connector as its documentation sets it up (its pool,
    # each statement in a transaction of its own), large enough for every job in flight
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(
        conninfo=url, min_size=1, max_size=concurrency + 2))  # + the worker's own fetch and finish
    effects: list[Effects] = []

    @app.task(name="effect", queue="bench")
    async def effect(event_id: str, category: str, amount_cents: int) -> None:
        # One INSERT in autocommit: it commits before procrastinate records the job done.
        await effects[0].write(lambda conn: conn.execute(EFFECT, (event_id, category, amount_cents)))

    async def main() -> float:
        size = 1 if concurrency == 1 else EFFECT_POOL
        effects.append(Effects([await psycopg.AsyncConnection.connect(url, autocommit=True) for _ in range(size)]))
        try:
            return await timed_run()
        finally:
            for connection in effects[0].connections:
                await connection.close()

    async def timed_run() -> float:
        async with app.open_async():
            await app.schema_manager.apply_schema_async()
            for first in range(0, messages, ENQUEUE_CHUNK):
                await effect.batch_defer_async(*(job_payload(n) for n in range(first, min(first + ENQUEUE_CHUNK,
                                                                                           messages))))
            await app.connector.execute_query_async("ANALYZE")  # statistics: see the docstring
            mark()  # the clock starts: the bench may count the statements between the two marks
            started = time.perf_counter()
            # wait=False: the worker stops once it finds the queue empty and its jobs are done
            await app.run_worker_async(queues=["bench"], concurrency=concurrency, wait=False,
                                       install_signal_handlers=False)
            seconds = time.perf_counter() - started
            mark()  # and stops: the checks below are not the run's
            return seconds

    seconds = asyncio.run(main())
    with psycopg.connect(url, autocommit=True) as conn:
        states: dict[str, int] = dict(conn.execute("SELECT status::text, count(*) FROM procrastinate_jobs GROUP BY status").fetchall())
        if states != {"succeeded": messages}:
            raise SystemExit(f"procrastinate: jobs by status {states}, expected {messages} succeeded")
        _check_effects(conn, messages, "procrastinate")
        _check_durability(conn, "procrastinate")
    return _rate(messages, seconds)


# ------------------------------------------------------------------ pgqueuer

def run_pgqueuer(url: str, messages: int, batch: int, mark: Callable[[], None] = _nothing) -> float:
    """Jobs per second of one pgqueuer QueueManager draining ``messages``, ``batch`` jobs per dequeue.

    ``batch == 1`` is one job at a time: the entrypoint's ``concurrency_limit=1``
    keeps a single job in flight, and the completion buffer (its size is the
    batch) writes each job's completion as it finishes. pgqueuer runs on
    asyncpg, its primary driver: with its psycopg driver a serialised
    entrypoint stopped taking jobs here after a few (pgqueuer 1.6.0).
    """
    import asyncpg
    import psycopg
    from pgqueuer import AsyncpgDriver, Queries, QueueManager
    from pgqueuer.models import Job
    from pgqueuer.types import QueueExecutionMode

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(EFFECTS_TABLE)

    async def main() -> float:
        setup = await asyncpg.connect(url)
        try:
            queries = Queries(AsyncpgDriver(setup))
            await queries.install()
            for first in range(0, messages, ENQUEUE_CHUNK):
                numbers = range(first, min(first + ENQUEUE_CHUNK, messages))
                await queries.enqueue(["effect"] * len(numbers),
                                      [json.dumps(job_payload(n)).encode() for n in numbers], [0] * len(numbers))
            await setup.execute("ANALYZE")  # statistics: see the module's docstring
        finally:
            await setup.close()
        size = 1 if batch == 1 else EFFECT_POOL
        effects = Effects([await asyncpg.connect(url) for _ in range(size)])
        conn = await asyncpg.connect(url)
        try:
            manager = QueueManager(Queries(AsyncpgDriver(conn)))

            @manager.entrypoint("effect", concurrency_limit=1 if batch == 1 else 0)
            async def effect(job: Job) -> None:
                args = json.loads(job.payload or b"{}")
                # outside a transaction block: the effect commits by itself, before pgqueuer logs the job
                await effects.write(lambda c: c.execute(
                    "INSERT INTO effects (event_id, category, amount_cents) VALUES ($1, $2, $3)",
                    args["event_id"], args["category"], args["amount_cents"]))

            mark()  # the clock starts: the bench may count the statements between the two marks
            started = time.perf_counter()
            # drain: stop once the queue is empty and the jobs in flight are done (their
            # completions flushed); no log aggregation during the run, so the log can be counted.
            await manager.run(batch_size=batch, mode=QueueExecutionMode.drain,
                              dequeue_timeout=timedelta(seconds=1), log_aggregation_interval=timedelta(0))
            seconds = time.perf_counter() - started
            mark()  # and stops: the checks below are not the run's
            return seconds
        finally:
            await conn.close()
            for connection in effects.connections:
                await connection.close()

    seconds = asyncio.run(main())
    with psycopg.connect(url, autocommit=True) as conn:
        left = conn.execute("SELECT count(*) FROM pgqueuer").fetchone()
        logged = dict((status, (count, distinct)) for status, count, distinct in conn.execute(
            "SELECT status::text, count(*), count(DISTINCT job_id) FROM pgqueuer_log "
            "WHERE status <> 'queued' AND status <> 'picked' GROUP BY status"))
        if left != (0,) or logged != {"successful": (messages, messages)}:
            raise SystemExit(f"pgqueuer: {left} jobs left, log {logged}, expected {messages} successful once each")
        _check_effects(conn, messages, "pgqueuer")
        _check_durability(conn, "pgqueuer")
    return _rate(messages, seconds)


# ---------------------------------------------------------------------- table

# name -> runner(url, jobs, mark): the rows the bench adds, in this order
Runner = Callable[[str, int, Callable[[], None]], float]
RUNS: dict[str, Runner] = {
    "procrastinate one at a time": lambda url, n, mark: run_procrastinate(url, n, 1, mark),
    f"procrastinate concurrency {PROCRASTINATE_CONCURRENCY}":
        lambda url, n, mark: run_procrastinate(url, n, PROCRASTINATE_CONCURRENCY, mark),
    "pgqueuer one at a time": lambda url, n, mark: run_pgqueuer(url, n, 1, mark),
    f"pgqueuer batch {PGQUEUER_BATCH}": lambda url, n, mark: run_pgqueuer(url, n, PGQUEUER_BATCH, mark),
}
ONE_AT_A_TIME = ("procrastinate one at a time", "pgqueuer one at a time")
BATCHED = (f"procrastinate concurrency {PROCRASTINATE_CONCURRENCY}", f"pgqueuer batch {PGQUEUER_BATCH}")


def describe(median: dict[str, float], statements: dict[str, float]) -> dict[str, Any]:
    """What results.json says of the peers: versions, each row's work and settings, the medians.

    ``statements``: statements per job of each row, counted from the server's log
    in a run of its own (bench_postgres.py, ``statements_per_job``).
    """
    return {
        "versions": versions(),
        "effect": "one INSERT INTO effects (event_id, category, amount_cents) per job, committed on its own "
                  "(autocommit) before the peer records the job done; queue_core commits the same INSERT "
                  "with its ACK",
        "settings": {
            "procrastinate one at a time": "a worker with concurrency=1, wait=False, "
                                           "LISTEN/NOTIFY on (its default)",
            f"procrastinate concurrency {PROCRASTINATE_CONCURRENCY}":
                f"a worker with concurrency={PROCRASTINATE_CONCURRENCY} (jobs in flight, each fetched "
                f"by its own statement), its pool of up to {PROCRASTINATE_CONCURRENCY + 2} connections, "
                f"{EFFECT_POOL} connections for the effects",
            "pgqueuer one at a time": "a QueueManager on asyncpg, batch_size=1, the entrypoint's "
                                      "concurrency_limit=1, mode=drain",
            f"pgqueuer batch {PGQUEUER_BATCH}":
                f"a QueueManager on asyncpg, batch_size={PGQUEUER_BATCH} (dequeued in one statement, "
                f"completions logged {PGQUEUER_BATCH} at a time), no concurrency limit, "
                f"{EFFECT_POOL} connections for the effects",
        },
        "jobs_per_second": {name: round(median[f"postgresql {name}"], 1) for name in RUNS
                            if f"postgresql {name}" in median},
        "statements_per_job": {name: round(count, 2) for name, count in statements.items()},
    }


def quiet() -> None:
    """The peers log every job at INFO; the bench prints only its own report."""
    for name in PEER_PACKAGES:
        logging.getLogger(name).setLevel(logging.WARNING)


def explore(new_url: Callable[[], str], messages: int,
            settings: tuple[int, ...] = (4, 8, 16, 32, 64)) -> dict[str, float]:
    """Jobs per second of each peer's batched mode at each setting: how the constants above were chosen."""
    quiet()
    found: dict[str, float] = {}
    for value in settings:
        found[f"procrastinate concurrency {value}"] = run_procrastinate(new_url(), messages, value)
        found[f"pgqueuer batch {value}"] = run_pgqueuer(new_url(), messages, value)
    return found


def main() -> None:
    """A smoke run of every peer row on a throwaway server: ``--jobs`` jobs each, one line of JSON."""
    import argparse
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_postgres import PostgresDatabases

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--jobs", type=int, default=20)
    parser.add_argument("--explore", action="store_true", help="each peer's batched mode at 4, 16, 64 and 256")
    args = parser.parse_args()
    why = available() or PostgresDatabases.unavailable()
    if why:
        raise SystemExit(f"cannot run the PostgreSQL peers here: {why}")
    quiet()
    server = PostgresDatabases()
    try:
        rates = (explore(server.new_database, args.jobs, (4, 16, 64, 256)) if args.explore
                 else {name: runner(server.new_database(), args.jobs, _nothing) for name, runner in RUNS.items()})
    finally:
        server.stop()
    print(json.dumps({"versions": versions(), "jobs": args.jobs, "jobs_per_second": rates}))


if __name__ == "__main__":
    main()
