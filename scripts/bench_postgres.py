"""The bench's PostgreSQL server: a throwaway cluster (proof/postgres_cluster.py), a new database per measurement.

Its own commit loop, the simple path's bare SQL, queue_core's batched path,
and the statements a message costs, counted from the server's log.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable

from bench_common import NOW, ROOT, fill_queue, timed, verify_queue
from queue_core import Handler, ModelClock, Store, work
from queue_core.engines import postgres as postgres_engine
from queue_core.values import new_lease_token

# the repository's proof package (not installed with queue_core) sits beside scripts/
sys.path.insert(0, str(ROOT))

from proof import postgres_cluster  # noqa: E402


class PostgresDatabases:
    """The throwaway server of the tests and proofs (proof/postgres_cluster.py), one new database per measurement.

    The server keeps ``fsync = on`` and ``synchronous_commit = on`` (its
    defaults): a commit is on disk before it returns, as with SQLite's FULL.
    It listens on a Unix socket only, so the figures have no TCP in them.
    """

    def __init__(self) -> None:
        bindir = postgres_cluster.find_bindir()
        if bindir is None:
            raise SystemExit(postgres_cluster.NO_BINARIES)
        # each log line names its database: round_trips() counts one database's statements
        self.cluster = postgres_cluster.Cluster(
            bindir,
            settings=("log_line_prefix = '%d '",))
        self.cluster.start()
        self.version = ""
        import psycopg  # type: ignore[import-not-found]

        with psycopg.connect(self.cluster.conninfo(), autocommit=True) as conn:
            self.version = conn.execute("SHOW server_version").fetchone()[0]

    @staticmethod
    def unavailable() -> str | None:
        """Why no PostgreSQL column can be measured here, or None."""
        return postgres_cluster.unavailable()

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
        claim, ack = postgres_engine.OPERATIONS.sql("claim_messages"), postgres_engine.OPERATIONS.sql("fenced_move")
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
                    acked = conn.execute(ack, {"now": None, "until": None, "move": "ack", "queue": "default",
                                               "leases": json.dumps([[event_id, generation, token]])})
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
        lines = self._logged(name, start)
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

    def statements_per_job(self, run: Callable[[str, int, Callable[[], None]], float], jobs: int) -> float:
        """Statements the server received per job of a peer's run (bench_peers.RUNS), from its log.

        Counted from the moment the run's clock starts to when it stops: the peer's
        own start-up, polling, heartbeats and shutdown are spread over the
        jobs, as they are in its timed runs. The log must not show a statement
        that changes ``synchronous_commit``.
        """
        import psycopg

        url = self.new_database()
        name = url.split("/")[3].split("?")[0]
        with psycopg.connect(self.cluster.conninfo(), autocommit=True) as admin:
            admin.execute(f'ALTER DATABASE "{name}" SET log_statement = \'all\'')  # before the peer connects
        marks: list[int] = []
        run(url, jobs, lambda: marks.append(self.cluster.log.stat().st_size))
        lines = self._logged(name, marks[0], marks[1])
        changed = [line for line in lines if "synchronous_commit" in line.lower()]
        if changed:
            raise SystemExit(f"{name}: a peer changed synchronous_commit: {changed[:3]}")
        return len(lines) / jobs

    def _logged(self, name: str, start: int, end: int | None = None) -> list[str]:
        """The statements of database ``name`` in the server's log from byte ``start`` (to ``end``)."""
        with open(self.cluster.log, encoding="utf-8", errors="replace") as log:
            log.seek(start)
            text = log.read() if end is None else log.read(end - start)
            return [line for line in text.splitlines(keepends=True) if line.startswith(f"{name} ") and
                    ("LOG:  statement: " in line or "LOG:  execute " in line)]

    def new_database(self) -> str:
        name = self.cluster.create_database()
        return postgres_cluster.url(self.cluster, name)

    def stop(self) -> None:
        self.cluster.stop()
